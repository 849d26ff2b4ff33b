"""The embedded tiny model (tiny-qwen3/, what `LLM()` loads); lab/data/make_tiny.py builds it."""
