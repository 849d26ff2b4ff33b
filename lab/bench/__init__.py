"""Benchmarks: the same-binary A/B harness (`ab`) and bandwidth against the measured copy ceiling (`bandwidth`).

Both print ratios against a baseline measured in the same run; absolute times count only on a GPU.
"""
