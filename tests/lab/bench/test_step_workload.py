"""The decode-step workload: a model-wide flag's A/B on the whole step, with its bytes counted from the model."""

from __future__ import annotations

import torch

from lab.bench import ab, step_workload
from lab.bench.workloads import WORKLOADS, for_flag
from tests.lab.ledger_record import read_record

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
            "--allow-dirty",  # a test run, not evidence: the tree may be mid-edit
        ]
    )
    # on the CPU the merged projections (a GPU arm) run on neither side: the record is written, the A/B fails
    assert rc == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "the arms VT_MERGED_PROJ gates ran 0 times on both sides" in captured.err
    assert "A/B VT_MERGED_PROJ on decode-step" in out
    record = read_record(next(tmp_path.glob("*.json")))
    assert record["results"]["workload"] == "decode-step"
    assert record["rows"][0] == "MODEL-MERGED-PROJ"
    assert len(record["results"]["samples_s"]["on"]) == 3


def test_bandwidth_measures_the_defaults_against_the_step_arms_off() -> None:
    arms = WORKLOADS["decode-step"].arms
    assert arms["defaults"] == {}
    assert arms["step-arms-off"] == {"VT_GEMV": "0", "VT_MERGED_PROJ": "0", "VT_QK_NORM_ROPE_FUSED": "0"}


def test_bandwidth_refuses_arms_the_workload_lacks(capsys) -> None:
    from lab.bench import bandwidth

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
            "--allow-dirty",  # a test run, not evidence: the tree may be mid-edit
        ]
    )
    assert rc == 1  # the CPU runs no dequant GEMV on either side: recorded, and refused as a measurement
    assert "A/B VT_DEQUANT_GEMV on decode-step-awq" in capsys.readouterr().out
    record = read_record(next(tmp_path.glob("*.json")))
    assert record["results"]["workload"] == "decode-step-awq"
    assert for_flag("VT_DEQUANT_GEMV") is WORKLOADS["awq-gemv"]  # the kernel's own workload stays the default


# Qwen3-Next at test scale: the workload's mechanics (state slots, reset, bytes) without its 80B-shaped layers
TINY_NEXT = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    max_position_embeddings=256,
)
NEXT_SHAPE = {"ctx": 37, "batch": 2, "layers": 4}  # three delta net layers, then full attention


def test_the_qwen3next_step_reads_its_state_slots_and_reset_restores_the_state(monkeypatch) -> None:
    monkeypatch.setattr(step_workload, "QWEN3_NEXT", TINY_NEXT)
    work = WORKLOADS["decode-step-qwen3next"]
    assert for_flag("VT_GDN_KERNEL") is WORKLOADS["gdn-decode"]  # the kernel's own workload stays the default
    runner, inputs = work.make(NEXT_SHAPE, torch.device("cpu"), torch.bfloat16, 1)  # the second set: slots 2, 3
    assert runner.recurrent is not None and inputs["state_index"].tolist() == [2, 3]
    before = {i: t.clone() for i, t in runner.recurrent.ssm.items()}
    first = work.run(runner.flags, runner, inputs)
    assert any(not torch.equal(before[i], t) for i, t in runner.recurrent.ssm.items())  # the step advanced it
    assert work.reset is not None
    work.reset(runner, inputs)
    assert all(torch.equal(before[i], t) for i, t in runner.recurrent.ssm.items())
    assert torch.equal(work.run(runner.flags, runner, inputs), first)  # from the same state, the same tokens
    cfg, elt = runner.config, 2
    params = sum(p.numel() for n, p in runner.model.named_parameters() if "embed" not in n)
    assert cfg.gdn is not None
    linear = sum(cfg.gdn.is_linear(i) for i in range(cfg.num_hidden_layers))
    gdn = cfg.gdn
    state = linear * 2 * 2 * (gdn.num_value_heads * gdn.key_head_dim * gdn.value_head_dim * 4)
    conv = linear * 2 * 2 * gdn.conv_dim * gdn.conv_kernel * elt
    kv = 2 * (cfg.num_hidden_layers - linear) * 2 * 38 * cfg.num_key_value_heads * cfg.head_dim
    assert work.bytes_moved(NEXT_SHAPE, torch.bfloat16) == (params + 2 * cfg.hidden_size + kv) * elt + state + conv


def test_ab_of_the_gdn_kernel_on_the_qwen3next_step_writes_a_record(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setattr(step_workload, "QWEN3_NEXT", TINY_NEXT)
    argv = ["--flag", "VT_GDN_KERNEL", "--workload", "decode-step-qwen3next", "--shape", "ctx=37,batch=2,layers=4"]
    assert (
        ab.main([*argv, "--reps", "3", "--device", "cpu", "--ledger", str(tmp_path), "--allow-dirty"]) == 1
    )  # no CUDA arm
    out = capsys.readouterr().out
    assert "A/B VT_GDN_KERNEL on decode-step-qwen3next" in out
    # on the CPU both arms run the reference, from the same reset state: the same token ids
    assert "tokens that differ on vs off: 0 of " in out and "max |on - off|" not in out
    assert "arms gated by VT_GDN_KERNEL: on 0, off 0 calls (each arm's first call)\n" in out  # no CUDA arm here
    record = read_record(next(tmp_path.glob("*.json")))
    assert record["results"]["workload"] == "decode-step-qwen3next" and record["rows"][0] == "KERNEL-GDN"
    assert record["results"]["flag_arm_calls"] == {"off": 0, "on": 0}
