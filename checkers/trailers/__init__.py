"""Commit-message trailers: a git-exact parser (`parser`), the message as the contract reads it
(`message`), the built-in presets (`presets`) and the contract judged over one message (`contract`)."""
