"""The builders of the tiny models: the embedded one (engine/data/tiny-qwen3), the gate models and the
quantized checkpoints."""
