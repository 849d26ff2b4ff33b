"""The benchmark harness's pure parts (bands, verdicts, shapes) and an A/B run end to end on the CPU.
No timing is asserted: only the structure and the verdict rule."""

from __future__ import annotations

import pytest
import torch

from engine import flags, kernels
from lab.bench import ab
from lab.bench.stats import Band, ab_verdict, drop_warmup
from lab.bench.timing import sets_for
from lab.bench.workloads import GEMV, for_arm, for_flag, parse_shape
from tests.lab.ledger_record import read_record


def test_win_needs_separate_bands_and_no_reversed_pair():
    assert ab_verdict([2.0, 2.1, 2.2], [1.0, 1.1, 1.2]).label == "win"
    assert ab_verdict([1.0, 1.1, 1.2], [2.0, 2.1, 2.2]).label == "loss"
    # medians far apart, but one pair reversed and the bands overlap: not a win
    assert ab_verdict([2.0, 2.0, 0.9], [1.0, 1.0, 1.5]).label == "no difference"


def test_pairs_and_bands():
    v = ab_verdict([2.0, 4.0], [1.0, 2.0])
    assert v.ratios == [2.0, 2.0] and v.median_ratio == 2.0
    assert Band.of([3.0, 1.0, 2.0]) == Band(2.0, 1.0, 3.0, 3)
    with pytest.raises(ValueError, match="equal counts"):
        ab_verdict([1.0], [1.0, 2.0])


def test_first_repetition_is_dropped():
    assert drop_warmup([9.0, 1.0, 2.0]) == [1.0, 2.0]
    with pytest.raises(ValueError):
        drop_warmup([1.0])


def test_input_rotation_exceeds_the_cache():
    assert sets_for(1 << 30) == 2
    assert sets_for(8 << 20) == 16  # 2 x 64 MiB / 8 MiB


def test_shapes_and_flag_lookup():
    assert parse_shape("n=128", GEMV.defaults) == {"n": 128, "k": 4096}
    with pytest.raises(ValueError, match="expected KEY=INT"):
        parse_shape("rows=3", GEMV.defaults)
    assert for_flag("VT_ATTN_TILED").name == "attn-decode"
    assert for_arm("paged_decode_attention", "warp_d128").name == "attn-decode"
    with pytest.raises(ValueError, match="no workload runs paged_decode_attention/tiled by name"):
        for_arm("paged_decode_attention", "tiled")
    assert for_flag("VT_NORM_KERNEL").name == "rms-norm"
    assert for_flag("VT_DEQUANT_KERNEL").name == "awq-gemv"
    with pytest.raises(ValueError, match="no workload measures VT_EAGER"):
        for_flag("VT_EAGER")


def test_attention_arms_turn_off_the_tiled_default():
    # VT_ATTN_TILED is ON and takes precedence: an arm that left it on would time the tiled kernel
    from lab.bench.workloads import ATTN

    assert flags.FLAGS["VT_ATTN_TILED"].default is True
    for name, settings in ATTN.arms.items():
        assert settings.get("VT_ATTN_TILED") == ("1" if name.startswith("tiled") else "0"), name
    assert ATTN.arms["tiled"]["VT_ATTN_TILED_FUSED"] == "0" and ATTN.arms["tiled-fused"]["VT_ATTN_TILED_FUSED"] == "1"
    # the by-name arms need no flag: the table tries the named arm first whatever the flags
    defaults = flags.FlagSnapshot.defaults()
    assert ATTN.arm_names[-2:] == ["warp-split", "split-kv-swap"]
    assert ATTN.arm("warp-split", defaults).args[0] == defaults.with_arm("paged_decode_attention", "warp_d128")


def test_ab_of_a_by_name_arm_runs_the_default_order_against_the_named_arm(tmp_path, capsys):
    rc = ab.main(
        ["--arm", "paged_decode_attention/warp_d128", "--shape", "batch=2,ctx=64,hq=4,hkv=2", "--reps", "3"]
        + ["--device", "cpu", "--dtype", "float32", "--ledger", str(tmp_path), "--allow-dirty"]
    )
    captured = capsys.readouterr()
    # on the CPU no arm runs: both sides are the reference, and the A/B says the named arm ran on neither
    assert rc == 1 and "the named arm paged_decode_attention/warp_d128: on 0, off 0 calls" in captured.out
    assert captured.err.startswith("error: the arms paged_decode_attention/warp_d128 gates ran 0 times on both sides")
    [path] = tmp_path.glob("*-ab-paged-decode-attention-warp-d128.json")
    assert read_record(path)["rows"] == ["ENGINE-BENCH"]


def test_ab_refuses_an_arm_the_table_does_not_have(capsys):
    assert ab.main(["--arm", "paged_decode_attention/gqa", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --arm paged_decode_attention/gqa: paged_decode_attention: no arm 'gqa'")
    assert "splitkv_swap, warp_d128, reference" in err


def test_ab_runs_end_to_end_and_writes_a_ledger_record(tmp_path, capsys):
    before = dict(__import__("os").environ)
    rc = ab.main(
        [
            "--flag",
            "VT_GEMV",
            "--shape",
            "n=19,k=83",
            "--reps",
            "4",
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--ledger",
            str(tmp_path),
            "--allow-dirty",  # a test run, not evidence: the tree may be mid-edit
        ]
    )
    captured = capsys.readouterr()
    out = captured.out
    # on the CPU the CUDA arm VT_GEMV gates runs on neither side: the A/B says so and fails, its record too
    assert rc == 1 and "verdict: not measured: the arms VT_GEMV gates ran on neither side" in out
    assert out.splitlines()[0] == (
        "bench ab: on the CPU (--device cpu): this measures the torch references: a flag that gates a CUDA arm "
        "runs none there"
    )
    assert captured.err.startswith("error: the arms VT_GEMV gates ran 0 times on both sides")
    [path] = tmp_path.glob("*-ab-vt-gemv.json")
    record = read_record(path)
    assert record["kind"] == "bench" and record["rows"] == ["KERNEL-GEMV", "ENGINE-BENCH"]
    assert len(record["results"]["samples_s"]["on"]) == 4 and record["results"]["max_abs_on_vs_off"] == 0.0
    assert dict(__import__("os").environ) == before  # the arms are snapshots: the environment is never written


def test_the_declines_name_why_the_flags_arms_did_not_run() -> None:
    kernels.reset_counts()
    kernels.COUNTS.fallbacks[("linear", "gemv", "1-2 rows unasked (its A/B's range)")] += 3
    kernels.COUNTS.declines[("linear", "gemv_stream", "compute capability 9.0")] += 1
    kernels.COUNTS.fallbacks[("rms_norm", "cuda", "a contiguous weight")] += 1  # not an arm VT_GEMV gates
    assert ab.declines("VT_GEMV") == [
        "linear/gemv: 1-2 rows unasked (its A/B's range)",
        "linear/gemv_stream: compute capability 9.0",
    ]
    kernels.reset_counts()


def test_norm_workload_runs_both_arms_on_the_cpu(tmp_path, capsys):
    rc = ab.main(
        [
            "--flag",
            "VT_NORM_KERNEL",
            "--shape",
            "tokens=3,hidden=67",
            "--reps",
            "3",
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--ledger",
            str(tmp_path),
            "--allow-dirty",  # a test run, not evidence: the tree may be mid-edit
        ]
    )
    assert rc == 1 and "verdict: not measured" in capsys.readouterr().out  # no CUDA arm on the CPU
    [path] = tmp_path.glob("*-ab-vt-norm-kernel.json")
    assert read_record(path)["results"]["max_abs_on_vs_off"] == 0.0  # the CPU runs the reference twice


def test_ab_rejects_unknown_flags(capsys):
    assert ab.main(["--flag", "VT_NOPE"]) == 2
    assert ab.main(["--flag", "VT_CUDA_ARCHS"]) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without a CUDA device")
def test_gpu_benchmarks_refuse_at_once_without_a_gpu(capsys):
    from lab.bench import decode

    for main, argv, command in (
        (decode.main, ["--profile"], "bench decode"),
        (decode.main, ["--hf-compiled", "--device", "cuda"], "bench decode"),
        (ab.main, ["--flag", "VT_ATTN_TILED"], "bench ab"),
    ):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.splitlines()) == 1
        assert captured.err.startswith(f"error: {command} measures a CUDA device and there is none here;")


def test_decode_bench_runs_on_a_tiny_model(capsys):
    from lab.bench import decode

    assert decode.main(["--tiny", "--context", "9", "--steps", "2", "--device", "cpu", "--no-oracle"]) == 0
    out = capsys.readouterr().out
    assert "decode step at batch 1, context 9 (cpu, float32, graph=False)" in out
    assert "engine tok/s" in out and "transformers tok/s" not in out


def test_launch_runs_one_arm_or_peer_for_a_profiler(capsys):
    from lab.bench import launch

    assert (
        launch.main(
            [
                "--workload",
                "gemv",
                "--arm",
                "F.linear",
                "--shape",
                "n=33,k=64",
                "--dtype",
                "float32",
                "--device",
                "cpu",
                "--calls",
                "2",
            ]
        )
        == 0
    )
    assert "launch: gemv F.linear n=33,k=64 x2 on cpu: output (1, 33) torch.float32\n" in capsys.readouterr().out
    assert (
        launch.main(
            [
                "--workload",
                "gemv",
                "--arm",
                "gemv-kernel",
                "--shape",
                "n=7,k=16",
                "--dtype",
                "float32",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    # the decode step's projections at batch rows: past the GEMV's 8 rows the table's linear is F.linear (cuBLAS)
    assert (
        launch.main(["--workload", "gemm", "--arm", "defaults", "--shape", "rows=9,n=7,k=16", "--device", "cpu"]) == 0
    )
    assert "launch: gemm defaults rows=9,n=7,k=16 x4 on cpu: output (9, 7) torch.bfloat16\n" in capsys.readouterr().out
    assert launch.main(["--workload", "gemv", "--arm", "nope", "--device", "cpu"]) == 2
    assert (
        "not an arm or peer of gemv (known: F.linear, gemv-kernel, gemv-pdl, gemv-stream, "
        "gemv-stream-pdl, reference)" in capsys.readouterr().err
    )
    assert launch.main(["--workload", "gemv", "--arm", "reference", "--calls", "0", "--device", "cpu"]) == 2


def test_dequant_gemv_workloads_count_packed_bytes_and_run_every_arm(tmp_path, capsys):
    import torch

    from lab.bench import launch
    from lab.bench.workloads import WORKLOADS

    shape = {"n": 64, "k": 256, "group": 32}
    # packed int4 weight 8192 B, zeros 256 B, bf16 scales 1024 B, x and y 640 B
    assert WORKLOADS["awq-gemv"].bytes_moved(shape, torch.bfloat16) == 10112
    assert WORKLOADS["gptq-gemv"].bytes_moved(shape, torch.bfloat16) == 10112 + 256 * 4  # and g_idx
    assert WORKLOADS["nvfp4-gemv"].bytes_moved(shape, torch.bfloat16) == 8192 + 1024 + 640  # fp4 codes, e4m3 scales
    for name in ("awq-gemv", "gptq-gemv", "nvfp4-gemv"):
        # the torch reference, the engine's dequant kernel then linear, the fused kernel, the dense peer
        assert set(WORKLOADS[name].arms) == {"reference", "dequant+linear", "dequant-gemv"}
        assert WORKLOADS[name].arms["dequant+linear"] == {"VT_DEQUANT_KERNEL": "1", "VT_DEQUANT_GEMV": "0"}
        for arm in ("reference", "dequant+linear", "dequant-gemv", "F.linear-dense"):
            assert (
                launch.main(
                    [
                        "--workload",
                        name,
                        "--arm",
                        arm,
                        "--shape",
                        "n=64,k=256,group=32",
                        "--dtype",
                        "float32",
                        "--device",
                        "cpu",
                        "--calls",
                        "1",
                    ]
                )
                == 0
            )
        assert f"launch: {name} F.linear-dense n=64,k=256,group=32 x1 on cpu: output (1, 64)" in capsys.readouterr().out
    rc = ab.main(
        [
            "--flag",
            "VT_DEQUANT_GEMV",
            "--workload",
            "gptq-gemv",
            "--shape",
            "n=64,k=256,group=32",
            "--reps",
            "3",
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--ledger",
            str(tmp_path),
            "--allow-dirty",  # a test run, not evidence: the tree may be mid-edit
        ]
    )
    assert rc == 1 and "verdict: not measured" in capsys.readouterr().out  # the fused CUDA arm: not on the CPU


def test_a_step_ab_counts_the_tokens_that_changed() -> None:
    from lab.bench.ab import changed_tokens

    on, off = torch.tensor([[5], [96105], [7], [9]]), torch.tensor([[5], [3], [7], [8]])
    assert changed_tokens(on, off) == (2, 4)  # ids: a count, not 96102
    assert changed_tokens(on, on.clone()) == (0, 4)
    assert changed_tokens(torch.ones(3), torch.zeros(3)) is None  # values keep their max |on - off|
