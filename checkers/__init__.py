"""rowgate's repo-governance toolkit: checks that enforce a roadmap-row workflow."""

__version__ = "0.1.0"
