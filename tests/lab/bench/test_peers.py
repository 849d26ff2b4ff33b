"""The peer comparisons of ENGINE-PERF on the CPU: the six-shape set and its per-shape table, the FlashInfer
peer's "not installed" row, the transformers static-cache peer, the fused tiled arm's cases and the
former `ci/gpu.sh peers` phase's wiring (scripts/bench/perf_peers_device.sh runs its steps now)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import pytest
import torch

from engine import flags
from lab.bench import bandwidth as bw
from lab.bench.workloads import ATTN, for_flag


def test_the_peers_set_holds_the_six_shapes_over_the_defaults():
    shapes = bw.listed_shapes(ATTN, None, "peers")
    assert len(shapes) == 6 and all(s["block"] == 32 for s in shapes)
    assert shapes[1] == {"batch": 1, "ctx": 32768, "hq": 32, "hkv": 8, "d": 128, "block": 32}
    assert shapes[5]["d"] == 256 and shapes[5]["hkv"] == 2
    assert bw.listed_shapes(ATTN, "block=16", "batch=2,ctx=64;batch=3") == [
        {**ATTN.defaults, "batch": 2, "ctx": 64, "block": 16},
        {**ATTN.defaults, "batch": 3, "block": 16},
    ]
    with pytest.raises(ValueError, match="not a shape set of attn-decode"):
        bw.listed_shapes(ATTN, None, "six")
    with pytest.raises(ValueError, match="expected KEY=INT"):
        bw.listed_shapes(ATTN, None, "rows=3")


def test_bandwidth_refuses_shapes_with_sweep(capsys):
    assert bw.main(["--shapes", "peers", "--sweep", "ctx=1,2"]) == 2
    assert "give one of them" in capsys.readouterr().err


def test_per_shape_table_ratios_and_unavailable_peers():
    shape = {"batch": 1, "ctx": 1024, "hq": 16, "hkv": 8, "d": 128, "block": 32}
    rows = [
        {"arm": "tiled", "kind": "arm", "shape": shape, "median_s": 20e-6},
        {"arm": "tiled-fused", "kind": "arm", "shape": shape, "median_s": 16e-6},
        {"arm": "flashinfer-tc", "kind": "peer", "shape": shape, "median_s": 10e-6},
        {"arm": "sdpa-cudnn", "kind": "peer", "shape": shape, "median_s": 8e-6},
        {
            "arm": "flashinfer",
            "kind": "peer",
            "shape": shape,
            "unavailable": "RuntimeError: not installed (pip install flashinfer-python==0.5.3)",
        },
    ]
    (entry,) = bw.per_shape(rows, "tiled")
    assert entry["engine_over_flashinfer_tc"] == pytest.approx(0.5)
    assert entry["fastest_peer"] == "sdpa-cudnn" and entry["engine_over_fastest_peer"] == pytest.approx(0.4)
    assert entry["best_other_arm"] == "tiled-fused" and entry["best_other_arm_over_engine"] == pytest.approx(1.25)
    text = bw.render_per_shape([entry])
    assert "b1 ctx1024 16/8 d128" in text and "not installed" in text and "0.50x" in text and "0.40x" in text
    assert "default arm (tiled)" in text
    (none,) = bw.per_shape(rows, None)
    assert "engine_over_flashinfer_tc" not in none
    assert "not computed: the engine's default arm did not run" in bw.render_per_shape([none])


def test_the_attention_table_holds_the_arm_the_flag_defaults_run_against_the_peers():
    # the default arm: the one-pass kernel since VT_ATTN_ONEPASS's flip
    assert ATTN.default_arm() == "tiled-onepass"
    two_pass = {"VT_ATTN_TILED": "1", "VT_ATTN_ONEPASS": "0"}
    assert replace(ATTN, arms={"two-pass": two_pass}).default_arm() is None  # no arm is the defaults
    twice = {"a": {"VT_ATTN_TILED": "1"}, "b": {"VT_ATTN_ONEPASS": "1"}}
    assert replace(ATTN, arms=twice).default_arm() is None  # two arms are: the table cannot tell which


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is not None, reason="flashinfer is installed here")
def test_flashinfer_peer_says_not_installed():
    q, k, v, table, lens, scale = ATTN.make(
        {**ATTN.defaults, "batch": 1, "ctx": 40}, torch.device("cpu"), torch.bfloat16, 0
    )
    prepare, _ = ATTN.peers["flashinfer-tc"]
    with pytest.raises(RuntimeError, match=r"not installed \(pip install flashinfer-python==0.5.3\)"):
        prepare(q, k, v, table, lens, scale)


@pytest.mark.parametrize(("name", "default"), [("VT_ATTN_TILED_FUSED", False), ("VT_ATTN_PV_PIPELINED", True)])
def test_attention_perf_flags_are_declared_and_measured_by_the_attention_workload(name: str, default: bool):
    flag = flags.FLAGS[name]
    assert flag.default is default and flag.gates == "ENGINE-PERF"
    assert for_flag(name).name == "attn-decode"


@pytest.mark.parametrize(
    ("arm", "flag", "min_splits"),
    [("tiled_fused", "VT_ATTN_TILED_FUSED", 2), ("tiled_pipelined", "VT_ATTN_PV_PIPELINED", 1)],
)
def test_bitwise_arms_cases_compare_with_the_two_pass_arm(arm: str, flag: str, min_splits: int):
    from lab.gates.cases import attention

    fused = [c for c in attention.CASES if c.arm == arm]
    against_two_pass = [c for c in fused if "-vs-ref" not in c.name]
    assert len(against_two_pass) >= 40 and all(c.tolerance == "exact" for c in against_two_pass)
    assert all(c.reference.func is attention.run_tiled_two_pass for c in against_two_pass)
    assert {c.tolerance for c in fused if "-vs-ref" in c.name} == {"bf16"}
    assert all(c.flag == flag for c in fused)
    # the fused arm: several splits only (one split keeps the two passes); empty splits included
    assert min(c.kernel.args[0] for c in fused) == min_splits and any(c.kernel.args[0] == 64 for c in fused)
    assert any("/ctx1/s7" in c.name for c in fused) and any("/ctx32768/" in c.name for c in fused)


def test_transformers_static_cache_peer_matches_the_engine_on_the_cpu(capsys):
    from lab.bench import decode

    assert (
        decode.main(
            [
                "--tiny",
                "--context",
                "9",
                "--steps",
                "3",
                "--batch",
                "2",
                "--device",
                "cpu",
                "--no-oracle",
                "--hf-compiled",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "decode step at batch 2, context 9" in out
    assert "transformers compiled+graph" in out and "first 4 tokens = engine             2 of 2" in out


def test_decode_rejects_a_zero_batch(capsys):
    from lab.bench import decode

    assert decode.main(["--tiny", "--batch", "0", "--device", "cpu"]) == 2
    assert "--batch" in capsys.readouterr().err
