"""Qwen3 dense and Qwen3-MoE models on the reference ops, their config and their loader."""

from engine.model.config import ConfigError, ModelConfig, load_config, parse_config

__all__ = ["ConfigError", "ModelConfig", "load_config", "parse_config"]
