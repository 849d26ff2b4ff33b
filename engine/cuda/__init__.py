"""Torch-free CUDA kernels, their feature table and build; bindings load lazily (importing this needs no GPU)."""
