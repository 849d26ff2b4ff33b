"""lab/gates/spread.py: per prompt seed, on how many prompts each correct implementation's greedy ids leave the
oracle's; the engine's reference, which rounds as the eager oracle does, leaves none, and a seeded bug shows."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from engine.ops import paged_attn
from lab.cli import main
from lab.gates import harness, peer_attention, spread, teeth

_ATTEND = paged_attn.paged_decode_attention  # the reference the seeded bug wraps (patched, the name is the bug)


def _drop_last_key(q, k, v, table, lens, scale, window=None):
    return _ATTEND(q, k, v, table, (lens - 1).clamp(min=1), scale, window)


def test_each_implementation_is_counted_per_seed_and_a_bug_diverges(tiny_model_dir: Path) -> None:
    impls = {
        "reference": spread.IMPLEMENTATIONS["reference"],
        "online": spread.IMPLEMENTATIONS["online"],
        "drops-last-key": (
            peer_attention.ENGINE,
            lambda: teeth.patched(paged_attn, "paged_decode_attention", _drop_last_key),
        ),
    }
    setup = harness.Setup(tiny_model_dir, [], 8, "bfloat16")
    said: list[str] = []
    rows = spread.spread(setup, [0, 1], (3, 9, 17, 30), impls, said.append)
    assert [r["seed"] for r in rows] == [0, 1] and all(set(r) == {"seed", *impls} for r in rows)
    assert all(r["reference"] == 0 for r in rows)  # bitwise with the eager oracle: the gate's exact case
    assert sum(r["drops-last-key"] for r in rows) > 0  # the seeded bug leaves the oracle's tokens
    assert re.fullmatch(r"seed 0: reference 0, online \d, drops-last-key \d of 4 prompts diverge \[\d+ s\]", said[0])
    summary, gap = spread.summarize(rows, list(impls), 4)
    pair = ("online", "drops-last-key")  # the reference, bitwise, is left out of the gap
    assert gap == max(abs(r[pair[0]] - r[pair[1]]) for r in rows)
    assert summary.startswith("diverging prompts of 4 over 2 seeds: reference 0-0, online ")
    assert spread.summarize([{"seed": 0, "reference": 0, "a": 5, "b": 7}], ["reference", "a", "b"], 16)[1] == 2


def test_the_command_line_refuses_bad_input_and_writes_a_record(tiny_model_dir: Path, capsys, tmp_path) -> None:
    for bad, message in (
        (["--model", str(tmp_path / "none")], "not a checkpoint directory"),
        (["--model", str(tiny_model_dir), "--seeds", "0"], "--seeds 0: at least 1"),
        (["--model", str(tiny_model_dir), "--prompt-lens", "3,x"], "comma-separated prompt lengths"),
    ):
        with pytest.raises(SystemExit):
            main(["gate", "spread", *bad])
        assert message in capsys.readouterr().err
    args = ["gate", "spread", "--model", str(tiny_model_dir), "--seeds", "1", "--prompt-lens", "3,9"]
    assert main([*args, "--max-new-tokens", "4", "--only", "reference", "sdpa-math"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("seed 0: reference 0, sdpa-math ") and out[-1].startswith("diverging prompts of 2")
    with contextlib.suppress(SystemExit):
        main(["gate", "spread", "--help"])
    assert "--divergence-beside-peers" in capsys.readouterr().out
