"""The decode-step workload: a model-wide flag's A/B on the whole step, with its bytes counted from the model."""

from __future__ import annotations

import json

import torch

from engine.bench import ab, step_workload
from engine.bench.workloads import WORKLOADS, for_flag

SHAPE = {"ctx": 37, "batch": 2, "layers": 1}


def test_model_flags_are_measured_on_the_decode_step() -> None:
    assert for_flag("VT_MERGED_PROJ") is WORKLOADS["decode-step"]
    assert for_flag("VT_QK_NORM_ROPE_FUSED") is WORKLOADS["decode-step"]


def test_bytes_are_the_weights_read_and_the_cached_kv() -> None:
    runner, inputs = step_workload.make(SHAPE, torch.device("cpu"), torch.bfloat16, 0)
    cfg = runner.config
    params = sum(p.numel() for p in runner.model.parameters())  # the tied embedding counted once, as the head
    kv = 2 * cfg.num_hidden_layers * SHAPE["batch"] * (SHAPE["ctx"] + 1) * cfg.num_key_value_heads * cfg.head_dim
    assert step_workload.bytes_moved(SHAPE, torch.bfloat16) == 2 * (params + kv)
    # the inputs are one decode step of both sequences, at position ctx
    assert inputs["positions"].tolist() == [SHAPE["ctx"]] * 2
    assert inputs["context_lens"].tolist() == [SHAPE["ctx"] + 1] * 2
    assert step_workload.run(runner.flags, runner, inputs).shape == (2,)


def test_input_sets_are_different_sequences_of_one_model() -> None:
    r0, a = step_workload.make(SHAPE, torch.device("cpu"), torch.bfloat16, 0)
    r1, b = step_workload.make(SHAPE, torch.device("cpu"), torch.bfloat16, 1)
    assert r0 is r1
    assert set(a["slot_mapping"].tolist()).isdisjoint(b["slot_mapping"].tolist())


def test_ab_on_the_decode_step_writes_a_record(tmp_path, capsys) -> None:
    rc = ab.main(
        [
            "--flag",
            "VT_MERGED_PROJ",
            "--shape",
            "ctx=37,batch=2,layers=1",
            "--reps",
            "3",
            "--device",
            "cpu",
            "--ledger",
            str(tmp_path),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "A/B VT_MERGED_PROJ on decode-step" in out
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert record["results"]["workload"] == "decode-step"
    assert record["rows"][0] == "MODEL-MERGED-PROJ"
    assert len(record["results"]["samples_s"]["on"]) == 3


def test_bandwidth_measures_the_defaults_against_the_step_arms_off() -> None:
    arms = WORKLOADS["decode-step"].arms
    assert arms["defaults"] == {}
    assert arms["step-arms-off"] == {"VT_GEMV": "0", "VT_MERGED_PROJ": "0", "VT_QK_NORM_ROPE_FUSED": "0"}


def test_bandwidth_refuses_arms_the_workload_lacks(capsys) -> None:
    from engine.bench import bandwidth

    assert bandwidth.main(["--workload", "decode-step", "--arms", "defaults,tiled"]) == 2
    assert capsys.readouterr().err == (
        "error: --arms tiled: not an arm or peer of decode-step (known: defaults, fused-on, step-arms-off)\n"
    )


def test_quantized_steps_count_the_packed_weights_they_hold() -> None:
    for method in step_workload.QUANT_METHODS:
        runner, inputs = WORKLOADS[f"decode-step-{method}"].make(SHAPE, torch.device("cpu"), torch.bfloat16, 0)
        model = runner.model
        held = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
        cfg = runner.config
        kv = 2 * cfg.num_hidden_layers * SHAPE["batch"] * (SHAPE["ctx"] + 1) * cfg.num_key_value_heads * cfg.head_dim
        assert cfg.quant is not None and cfg.quant.method == method
        assert WORKLOADS[f"decode-step-{method}"].bytes_moved(SHAPE, torch.bfloat16) == held + 2 * kv, method
        assert step_workload.run(runner.flags, runner, inputs).shape == (2,)


def test_ab_of_the_dequant_gemv_on_a_quantized_step_writes_a_record(tmp_path, capsys) -> None:
    rc = ab.main(
        [
            "--flag",
            "VT_DEQUANT_GEMV",
            "--workload",
            "decode-step-awq",
            "--shape",
            "ctx=37,batch=2,layers=1",
            "--reps",
            "3",
            "--device",
            "cpu",
            "--ledger",
            str(tmp_path),
        ]
    )
    assert rc == 0
    assert "A/B VT_DEQUANT_GEMV on decode-step-awq" in capsys.readouterr().out
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert record["results"]["workload"] == "decode-step-awq"
    assert for_flag("VT_DEQUANT_GEMV") is WORKLOADS["awq-gemv"]  # the kernel's own workload stays the default
