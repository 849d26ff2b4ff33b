"""The attention gate models: tiny random Qwen3 checkpoints whose shapes reach every paged-attention arm.

Run: `python -m lab.data.gate_models --out DIR [NAME ...]` (needs transformers) writes each model to
DIR/NAME. Every model is the embedded tiny model's builder (lab/data/make_tiny.py: the same scaled
weights, so greedy choices are usually clear-cut) with another attention shape: head_dim 64, 128 or 256,
1, 2, 4, 8 or 16 query heads per KV head, and three layers of which the middle one is a Qwen3
`sliding_attention` layer (`layer_types`, `use_sliding_window`, `sliding_window`), so every arm that runs
a model also runs a window. `long` decodes after prompts of 1500+ tokens: the split-KV arms' several
splits (splits wholly outside the window are empty) and the tiled arms' multi-split path.
lab/gates/reach.py runs them through the gates, one flag setting per arm.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.data.make_tiny import build
from lab.gates.tokens import RAZOR_PROMPT_LENS

if TYPE_CHECKING:
    from transformers import PreTrainedModel

WINDOW = 40  # tokens; not a multiple of the 16-token KV block, and shorter than most contexts the gates decode
LONG_PREFIX = 1536  # the long model's prompts are this much longer than the razor's


@dataclass(frozen=True)
class GateModel:
    name: str
    head_dim: int
    heads: int  # query heads
    kv_heads: int
    prompt_lens: tuple[int, ...] = RAZOR_PROMPT_LENS
    max_position_embeddings: int = 1024
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def overrides(self) -> dict[str, Any]:
        """Qwen3Config keyword arguments over make_tiny.CONFIG."""
        return {
            "head_dim": self.head_dim,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "max_position_embeddings": self.max_position_embeddings,
            "num_hidden_layers": 3,
            "use_sliding_window": True,
            "sliding_window": WINDOW,
            "layer_types": ["full_attention", "sliding_attention", "full_attention"],
            **self.extra,
        }


# in the order the reach gate runs them: the first three already take every arm but the one-launch tiled one
GATE_MODELS: dict[str, GateModel] = {
    m.name: m
    for m in (
        GateModel("d128-g4", 128, 8, 2, seed=3),
        GateModel("d256-g8", 256, 8, 1, seed=4),
        GateModel("d128-g16", 128, 16, 1, seed=5),
        GateModel(
            "long",
            128,
            8,
            2,
            prompt_lens=tuple(LONG_PREFIX + n for n in RAZOR_PROMPT_LENS),
            max_position_embeddings=4096,
            seed=6,
        ),
        GateModel("d64-g1", 64, 2, 2, seed=1),
        GateModel("d128-g2", 128, 4, 2, seed=2),
    )
}


def build_gate_model(name: str) -> PreTrainedModel:
    """The transformers Qwen3ForCausalLM of one gate model (float32, scaled random weights)."""
    if name not in GATE_MODELS:
        raise KeyError(f"no gate model {name!r} (gate models: {', '.join(GATE_MODELS)})")
    model = GATE_MODELS[name]
    return build(model.seed, **model.overrides())


def write_gate_models(out: Path, names: list[str] | None = None) -> dict[str, Path]:
    """save_pretrained each gate model (default: all) to out/NAME, skipping one already written; name -> dir."""
    dirs = {}
    for name in names or list(GATE_MODELS):
        path = out / name
        if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
            build_gate_model(name).save_pretrained(path)
        dirs[name] = path
    return dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.data.gate_models", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory that gets one folder per gate model")
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"gate models (default: all of {', '.join(GATE_MODELS)})"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in GATE_MODELS]
    if unknown:
        parser.error(f"no gate model {', '.join(unknown)} (gate models: {', '.join(GATE_MODELS)})")
    for name, path in write_gate_models(args.out, args.names).items():
        m = GATE_MODELS[name]
        print(
            f"{name}: head_dim {m.head_dim}, {m.heads}/{m.kv_heads} heads (group {m.group}), window {WINDOW} -> {path}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
