"""rowgate's reference LLM-decode engine: torch references, CUDA kernels behind VT_* flags, gates."""
