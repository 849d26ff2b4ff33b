"""Commit-message trailers: a git-exact parser (`parser`), the contract model's presets (`presets`) and
the contract judged over one message (`contract`)."""
