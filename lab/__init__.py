"""The engine's proving ground: gates, benchmarks, the tiny-model makers and the goldens.

It drives `engine` through its public API (`engine.LLM`, the kernel table, the references); `engine` never
imports it (tests/test_import_graph.py). `python -m lab gate ...`, `python -m lab bench ...`, and the GPU job
`python -m lab ci [PHASE ...]` (lab/ci.py, docs/CI.md).
"""
