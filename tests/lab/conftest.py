"""The lab's tests share the engine tests' tiny checkpoints: one definition, in tests/engine/conftest.py."""

from tests.engine.conftest import tiny_checkpoint, tiny_model_dir

__all__ = ["tiny_checkpoint", "tiny_model_dir"]
