"""The embedded tiny model and the script that builds it."""
