"""The kernel table: snapshots, arm choice, selection counters, and the gate's report of them (CPU)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE, FlagSnapshot
from engine.model.layers import MergedLinear
from engine.model.qwen3 import Qwen3MLP
from lab.gates.cli import report
from lab.gates.result import PASS, GateResult
from tests.engine.table_standins import OnGpu, decode_args, on_an_h200


@pytest.fixture(autouse=True)
def _counts_on_an_h200() -> Iterator[None]:
    with on_an_h200():  # fresh counters; the stand-ins (OnGpu) on an H200 as the table's device probe sees it
        yield


def test_snapshot_is_read_once_and_frozen() -> None:
    snap = FlagSnapshot.from_env({"VT_GEMV": "0", "VT_ATTN_ONEPASS": "no"})
    assert snap == FlagSnapshot.defaults().with_(VT_GEMV=False, VT_ATTN_ONEPASS=False)
    assert snap.changed() == {"VT_GEMV": False, "VT_ATTN_ONEPASS": False}
    with pytest.raises(ValueError, match="VT_GEMV='maybe': expected one of"):
        FlagSnapshot.from_env({"VT_GEMV": "maybe"})
    with pytest.raises(KeyError, match="VT_NOPE: not a flag"):
        FlagSnapshot.defaults().with_(VT_NOPE=True)
    with pytest.raises(TypeError, match="VT_GEMV: a boolean flag"):
        FlagSnapshot.defaults().with_(VT_GEMV="1")
    with pytest.raises(AttributeError):
        snap.values = {}  # type: ignore[misc]


def test_attention_arms_follow_the_snapshot_in_precedence_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.cuda import paged_attn_onepass, paged_attn_tiled

    resident = [True]
    monkeypatch.setattr(paged_attn_tiled, "supports_pipelined", lambda q, k_cache, block_tables: True)
    monkeypatch.setattr(paged_attn_tiled, "supports_pdl", lambda q, k_cache, block_tables: resident[0])
    monkeypatch.setattr(paged_attn_onepass, "supports_inputs", lambda q, k_cache, block_tables: True)
    op = kernels.paged_decode_attention
    defaults = FlagSnapshot.defaults().with_(VT_ATTN_ONEPASS=False)  # the two-pass chain below the one-pass arm
    base = defaults.with_(VT_ATTN_PV_PIPELINED=False)  # the plain two passes, below

    def arm(snap: FlagSnapshot, d: int, group: int, dtype: torch.dtype = torch.bfloat16) -> str:
        q, k_cache = OnGpu(2, 4 * group, d, dtype=dtype), OnGpu(9, 16, 4, d)
        return op.choose(snap, *decode_args(q, k_cache))  # type: ignore[arg-type]

    assert arm(FlagSnapshot.defaults(), 128, 2) == "tiled_onepass"  # ON by default since its flip
    assert arm(defaults, 128, 2) == "tiled_pipelined_pdl"  # its rollback: the passes chained by PDL
    assert arm(defaults.with_(VT_ATTN_PDL=False), 128, 2) == "tiled_pipelined"  # its rollback
    resident[0] = False
    assert arm(defaults, 128, 2) == "tiled_pipelined"  # grids past 2 blocks per SM: the plain launch
    assert arm(base, 128, 2) == "tiled"  # the pipelined pass's rollback: the plain two passes
    off = base.with_(VT_ATTN_TILED=False)
    assert arm(off, 256, 4) == "generic"  # below the tiled arms, only the generic kernel
    assert arm(defaults, 128, 4, torch.float32) == "generic"  # fp32: not the tiled arm's
    assert arm(base, 128, 16) == "generic"  # more than 8 query heads per KV head: not the tiled arm
    # a by-name arm goes first where it is named, and its decline falls back down the chain
    assert arm(kernels.naming(defaults, op.name, "warp_d128"), 128, 4, torch.float32) == "warp_d128"
    assert arm(kernels.naming(off, op.name, "warp_d128"), 256, 4) == "generic"  # warp_d128: head_dim 128 only
    assert arm(kernels.naming(defaults, op.name, "splitkv_swap"), 128, 4) == "splitkv_swap"
    assert arm(kernels.naming(defaults, op.name, "splitkv_swap"), 128, 3) == "tiled_pipelined"  # groups 1/2/4/8
    assert arm(REFERENCE, 128, 2) == "reference"


def test_a_call_counts_its_arm_and_a_cpu_tensor_runs_the_reference() -> None:
    x, w = torch.randn(3, 8), torch.randn(8)
    kernels.rms_norm(FlagSnapshot.defaults(), x, w, 1e-6)
    kernels.rms_norm(REFERENCE, x, w, 1e-6)
    seen = kernels.counts()
    assert seen.ran == {("rms_norm", "reference"): 2} and not seen.fallbacks
    assert kernels.arms_ran("VT_NORM_KERNEL", seen) == 0
    assert kernels.render_counts(seen).splitlines()[1:] == ["  rms_norm/reference 2"]


def test_the_inputs_are_checked_once_at_the_table_naming_the_tensor() -> None:
    with pytest.raises(ValueError, match=r"weight: dim 0 is 7 but x's last dim \(hidden\) is 8"):
        kernels.call("rms_norm", FlagSnapshot.defaults(), torch.randn(3, 8), torch.randn(7), 1e-6)
    assert not kernels.counts().ran  # a rejected call ran nothing


def test_a_runner_passes_its_snapshot_down_and_every_op_is_counted(tiny_model_dir) -> None:
    from engine.llm import LLM
    from lab.drive import greedy

    llm = LLM(tiny_model_dir, max_num_seqs=1, max_model_len=16, flags=REFERENCE)
    greedy(llm, [[1, 2, 3]], 3)
    ran = kernels.counts().ran
    assert llm.runner.flags is REFERENCE
    for op in (
        "embedding",
        "linear",
        "rms_norm",
        "qkv_norm_rope_store",  # q/k norm + RoPE and the KV store (the table's ops one by one on a GPU)
        "prefill_attention",
        "paged_decode_attention",
        "silu_mul_linear",  # SiLU-and-mul then down_proj
        "greedy_argmax",
    ):
        assert ran[(op, "reference")] > 0, op
    assert ran[("paged_decode_attention", "reference")] == 2 * llm.runner.config.num_hidden_layers  # 2 decode steps


def test_a_gate_prints_the_arms_that_ran_and_fails_when_the_arm_under_test_never_ran(capsys) -> None:
    passed = GateResult("tokens", PASS, "3/3 prompts token-exact")
    kernels.rms_norm(FlagSnapshot.defaults(), torch.randn(2, 4), torch.randn(4), 1e-6)
    assert report(passed, False) == 0
    assert report(passed, False, require=["VT_NORM_KERNEL"]) == 1  # a passing gate that never ran the arm
    out = capsys.readouterr().out
    assert "  rms_norm/reference 1" in out.splitlines()
    assert (
        "FAIL: no arm gated by VT_NORM_KERNEL ran (0 calls): the gate did not exercise the arm under test"
        in out.splitlines()
    )
    kernels.COUNTS.ran[("rms_norm", "cuda")] += 1  # as a GPU run counts it
    assert report(passed, False, require=["VT_NORM_KERNEL"]) == 0
    assert "  rms_norm/cuda 1 [VT_NORM_KERNEL]" in capsys.readouterr().out.splitlines()


def test_the_gate_command_prints_its_own_arms_and_a_flip_fails_on_a_zero_count(capsys) -> None:
    from lab.cli import main

    kernels.COUNTS.ran[("rms_norm", "cuda")] += 5  # left over from earlier work in this process: reset by the gate
    argv = ["gate", "tokens", "--prompt-ids", "5,6,7", "--max-new-tokens", "2"]
    assert main([*argv, "--require-arm", "VT_NORM_KERNEL"]) == 1  # the CPU runs references only
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "tokens: PASS: 2 tokens over 1 prompts equal the oracle's"  # passing, yet refused
    assert "FAIL: no arm gated by VT_NORM_KERNEL ran (0 calls): the gate did not exercise the arm under test" in out
    assert [ln for ln in out if ln.startswith("  paged_decode_attention/reference ")]  # one decode step ran
    assert not [ln for ln in out if "/cuda" in ln]  # nor is the stale count of before the gate reported


def test_the_fused_tiled_arm_leads_only_under_its_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.cuda import paged_attn_tiled

    fits = [True]
    monkeypatch.setattr(paged_attn_tiled, "supports_fused", lambda q, k_cache, block_tables: fits[0])
    op = kernels.paged_decode_attention
    base = FlagSnapshot.defaults().with_(VT_ATTN_PV_PIPELINED=False, VT_ATTN_ONEPASS=False)
    args = decode_args(OnGpu(2, 8, 128), OnGpu(9, 16, 4, 128))
    assert op.choose(base, *args) == "tiled"  # the default: VT_ATTN_TILED_FUSED is off
    fused = base.with_(VT_ATTN_TILED_FUSED=True)
    assert op.choose(fused, *args) == "tiled_fused"
    assert op.choose(fused.with_(VT_ATTN_TILED=False), *args) == "generic"  # it needs VT_ATTN_TILED too
    fits[0] = False
    assert op.choose(fused, *args) == "tiled"  # a shape the one launch does not take keeps the two passes
    assert kernels.flags_of("paged_decode_attention", "tiled_fused") == ("VT_ATTN_TILED_FUSED", "VT_ATTN_TILED")


def test_the_pipelined_tiled_arm_leads_the_two_passes_under_its_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.cuda import paged_attn_tiled

    fits = {"fused": True, "pipelined": True}
    monkeypatch.setattr(paged_attn_tiled, "supports_fused", lambda q, k_cache, block_tables: fits["fused"])
    monkeypatch.setattr(paged_attn_tiled, "supports_pipelined", lambda q, k_cache, block_tables: fits["pipelined"])
    op, on = kernels.paged_decode_attention, FlagSnapshot.defaults().with_(VT_ATTN_PDL=False, VT_ATTN_ONEPASS=False)
    args = decode_args(OnGpu(2, 8, 128), OnGpu(9, 16, 4, 128))
    assert op.choose(on, *args) == "tiled_pipelined"  # the default since its flip
    assert op.choose(on.with_(VT_ATTN_PV_PIPELINED=False), *args) == "tiled"  # the rollback
    assert op.choose(on.with_(VT_ATTN_TILED_FUSED=True), *args) == "tiled_fused"  # the one launch leads it
    fits["fused"] = False
    assert op.choose(on.with_(VT_ATTN_TILED_FUSED=True), *args) == "tiled_pipelined"  # where it does not fit
    assert op.choose(on.with_(VT_ATTN_TILED=False), *args) == "generic"  # it needs VT_ATTN_TILED too
    fits["pipelined"] = False
    assert op.choose(on, *args) == "tiled"  # no ready counters (first use under capture): the plain passes
    assert kernels.flags_of("paged_decode_attention", "tiled_pipelined") == ("VT_ATTN_PV_PIPELINED", "VT_ATTN_TILED")


def test_a_quantized_linear_runs_its_methods_op_of_the_table() -> None:
    from engine.ops import quant

    g = torch.Generator().manual_seed(0)
    n, k = 16, 32
    w = {
        "packed": torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g),
        "block_scales": torch.rand(n, k // 16, generator=g).to(torch.float8_e4m3fn),
        "global_scale": torch.tensor(0.5),
    }
    x = torch.randn(3, k, generator=g)
    got = kernels.quantized_linear(FlagSnapshot.defaults(), x, "nvfp4", w)
    assert torch.equal(got, quant.nvfp4_linear(x, w["packed"], w["block_scales"], w["global_scale"]))
    assert kernels.counts().ran == {("nvfp4_linear", "reference"): 1}  # the CPU: the reference
    with pytest.raises(ValueError, match="'int8' is not a quantized linear"):
        kernels.quantized_linear(FlagSnapshot.defaults(), x, "int8", w)


def test_the_serving_sampler_runs_the_tables_ops() -> None:
    from engine.sampler import Mode, sample

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    cols = (
        torch.tensor([0.0, 1.0, 0.7]),
        torch.tensor([-1, 5, -1]),
        torch.tensor([1.0, 1.0, 0.9]),
        torch.arange(3),
        torch.zeros(3, dtype=torch.int64),
    )
    out = sample(FlagSnapshot.defaults(), logits, *cols, Mode.FILTERED)
    assert int(out[0]) == int(logits[0].argmax())  # temperature 0: greedy
    assert kernels.counts().ran == {("greedy_argmax", "reference"): 1, ("sample_rows", "reference"): 1}
    kernels.reset_counts()
    sample(FlagSnapshot.defaults(), logits, *cols, Mode.GREEDY)
    assert kernels.counts().ran == {("greedy_argmax", "reference"): 1}  # an all-greedy batch draws nothing


def test_the_serving_steps_run_under_the_runners_snapshot() -> None:
    from engine import LLM, SamplingParams

    llm = LLM(device="cpu", flags=REFERENCE)
    prompt = [(7 * i) % 97 + 1 for i in range(40)]  # two full blocks of 16: cached after the first request
    params = SamplingParams(temperature=0.8, seed=1, max_tokens=3, ignore_eos=True)
    llm.generate([prompt], params)
    llm.generate([prompt], params)  # a prefix-cache hit: the prefill reads the cached blocks
    ran = kernels.counts().ran
    assert llm.runner.flags is REFERENCE
    for op in ("linear", "prefill_attention", "extend_attention", "paged_decode_attention", "sample_rows"):
        assert ran[(op, "reference")] > 0, op
    assert all(arm == "reference" for _, arm in ran)  # REFERENCE everywhere: nothing read the environment


def test_a_required_flag_whose_ops_the_model_never_calls_is_not_applicable_not_passed(capsys) -> None:
    passed = GateResult("tokens", PASS, "3/3 prompts token-exact")
    kernels.rms_norm(FlagSnapshot.defaults(), torch.randn(2, 4), torch.randn(4), 1e-6)
    # an MoE model calls no dense GLU: the GLU arm's flag is not applicable there, and says so
    assert report(passed, False, require=["VT_GLU_GEMV"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln for ln in out if ln.startswith("n/a: VT_GLU_GEMV: this model never calls its ops (")]
    assert not [ln for ln in out if ln.startswith("FAIL")]
    # a flag that gates no arm of the table is never "not applicable": a typo must not pass
    assert report(passed, False, require=["VT_NO_SUCH_FLAG"]) == 1
    assert "FAIL: no arm gated by VT_NO_SUCH_FLAG ran (0 calls)" in capsys.readouterr().out
    # once the model calls one of the flag's ops through another arm, the flag is required again
    kernels.COUNTS.ran[("norm_mlp", "reference")] += 1
    assert report(passed, False, require=["VT_GLU_GEMV"]) == 1
    assert "FAIL: no arm gated by VT_GLU_GEMV ran" in capsys.readouterr().out


@pytest.mark.parametrize("method", ["awq", "gptq", "nvfp4"])
def test_a_linear_after_its_dequant_is_never_a_programmatic_dependent(monkeypatch, method: str) -> None:
    """A PDL GEMV reads W before it waits for the kernel before it; after a dequant that kernel writes W."""
    seen: list[bool] = []
    w = torch.zeros(4, 8)

    def fake_linear(snapshot, x, weight, bias=None):  # type: ignore[no-untyped-def]
        seen.append(snapshot.enabled("VT_GEMV_PDL"))
        return x @ weight.T

    # a composite arm runs its parts as the table's ops, looked up in TABLE at the call
    monkeypatch.setitem(kernels.TABLE, "linear", fake_linear)
    monkeypatch.setitem(kernels.TABLE, f"dequant_{method}", lambda *args: w if method == "nvfp4" else w.T)
    x = torch.zeros(2, 8)
    arm = kernels.TABLE[f"{method}_linear"].arm("dequant_then_linear").kernel
    args = {"awq": (None, None, None, 128), "gptq": (None, None, None, None), "nvfp4": (None, None, 1.0)}[method]
    on = FlagSnapshot.defaults().with_(VT_GEMV_PDL=True)
    assert arm(on, x, *args).shape == (2, 4)
    assert arm(FlagSnapshot.defaults(), x, *args).shape == (2, 4)
    assert seen == [False, False]


def _composite_inputs() -> dict[str, tuple]:
    """CPU inputs of each op that has a composite arm (one run by the table's own ops)."""
    g = torch.Generator().manual_seed(0)
    t, hq, hkv, d, hidden, inter = 3, 4, 2, 16, 32, 24
    x, res, nw = torch.randn(t, hidden, generator=g), torch.randn(t, hidden, generator=g), torch.rand(hidden) + 0.5
    w, w_glu = torch.randn(40, hidden, generator=g), torch.randn(2 * inter, hidden, generator=g)
    cos, sin = torch.randn(t, d, generator=g), torch.randn(t, d, generator=g)
    q, k, v = (torch.randn(t, h, d, generator=g) for h in (hq, hkv, hkv))
    cache = torch.randn(4, 2, hkv, d, generator=g)
    kq, nq, group = 32, 16, 8  # a quantized layer: K, N, AWQ's group size

    def words(*shape: int) -> torch.Tensor:  # packed int32 fields: any bits are values
        return torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32, generator=g)

    xq, scales = torch.randn(1, kq, generator=g), torch.rand(kq // group, nq, generator=g) + 0.1
    nvfp4 = (
        torch.randint(0, 256, (nq, kq // 2), dtype=torch.uint8, generator=g),
        torch.rand(nq, kq // 16, generator=g) + 0.1,
    )
    proj, mlp = MergedLinear(hidden, [16, 8, 8], True, torch.float32), Qwen3MLP(hidden, inter, torch.float32)
    for weight in (proj.weight, proj.bias, mlp.gate_up_proj.weight, mlp.down_proj.weight):
        weight.copy_(torch.randn(weight.shape, generator=g))  # the parts' weights are views into these
    return {
        "norm_qkv": (x, res, nw, 1e-6, proj),
        "norm_mlp": (x, res, nw, 1e-6, mlp),
        "gated_mlp": (x, mlp),
        "awq_linear": (xq, words(kq, nq // 8), words(kq // group, nq // 8), scales, group),
        "gptq_linear": (xq, words(kq // 8, nq), words(kq // group, nq // 8), scales, torch.arange(kq) // group),
        "nvfp4_linear": (xq, nvfp4[0], nvfp4[1].to(torch.float8_e4m3fn), torch.tensor(0.5)),
        "qk_norm_rope": (q, torch.rand(d, generator=g) + 0.5, cos, sin, 1e-6),
        "add_rms_norm_linear": (x, res, nw, 1e-6, w, torch.randn(40, generator=g)),
        "silu_mul_linear": (torch.randn(t, 2 * inter, generator=g), torch.randn(40, inter, generator=g)),
        "linear_silu_mul": (x, w_glu),
        "add_rms_norm_linear_silu_mul": (x, None, nw, 1e-6, w_glu),
        "qkv_norm_rope_store": (
            q,
            k,
            v,
            nw[:d],
            nw[-d:],
            cos,
            sin,
            1e-6,
            cache,
            cache.clone(),
            torch.tensor([5, -1, 0]),
        ),
    }


def _outputs(out: object, args: tuple) -> list[torch.Tensor]:
    """An op's outputs, and for the KV store the caches it wrote."""
    outs = list(out) if isinstance(out, tuple) else [out]
    return outs + [a for a in args[8:10]] if len(args) == 11 else outs


# (op, composite arm) -> the table's ops it runs, each once (on the CPU: their references)
PARTS = {
    ("norm_qkv", "prologue"): {"add_rms_norm_linear"},
    **{("norm_qkv", arm): {"fused_add_rms_norm", "linear"} for arm in ("merged", "separate")},
    ("norm_mlp", "prologue_glu"): {"add_rms_norm_linear_silu_mul", "linear"},
    ("norm_mlp", "prologue"): {"add_rms_norm_linear", "silu_mul_linear"},
    **{("norm_mlp", arm): {"fused_add_rms_norm", "linear", "silu_mul_linear"} for arm in ("merged", "separate")},
    **{("gated_mlp", arm): {"linear", "silu_mul_linear"} for arm in ("merged", "separate")},
    ("qk_norm_rope", "norm_then_rope"): {"qk_norm", "apply_rope_neox"},
    ("add_rms_norm_linear", "norm_then_linear"): {"fused_add_rms_norm", "linear"},
    ("silu_mul_linear", "act_then_linear"): {"silu_and_mul", "linear"},
    ("linear_silu_mul", "linear_then_act"): {"linear", "silu_and_mul"},
    ("add_rms_norm_linear_silu_mul", "norm_gemv_then_act"): {"add_rms_norm_linear", "silu_and_mul"},
    ("add_rms_norm_linear_silu_mul", "norm_then_glu"): {"rms_norm", "linear_silu_mul"},
    ("qkv_norm_rope_store", "separate"): {"qk_norm_rope", "store_kv"},
    **{(f"{m}_linear", "dequant_then_linear"): {f"dequant_{m}", "linear"} for m in ("awq", "gptq", "nvfp4")},
}


def test_every_composite_arm_runs_the_references_bits_by_the_tables_own_ops() -> None:
    inputs = _composite_inputs()
    composites = {(op.name, a.name) for op in kernels.TABLE.values() for a in op.arms if a.composite}
    # the whole layer's and model's arms take a model layer or model and a step: tests/engine/test_decode_layer_op.py
    whole = {("decode_layer", "chain"), ("decode_layer", "persistent"), ("decode_model", "chain")}
    assert composites - whole - {("decode_model", "persistent_step")} == set(PARTS)
    for name, arm in sorted(PARTS):
        op, args = kernels.TABLE[name], inputs[name]
        ref_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        want = _outputs(op.reference(*ref_args), ref_args)
        kernels.reset_counts()
        got = _outputs(op.run_arm(arm, *args), args)
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), (name, arm)
        ran = kernels.counts().ran
        assert ran == {(name, arm): 1, **{(o, "reference"): ran[(o, "reference")] for o in PARTS[name, arm]}}
        assert all(ran[(o, "reference")] >= 1 for o in PARTS[name, arm]), (name, arm, ran)


def test_each_pdl_arm_stands_before_its_twin_with_its_pdl_flag_added() -> None:
    seen = set()
    for op in kernels.TABLE.values():
        for i, arm in enumerate(op.arms):
            if not arm.name.endswith("_pdl"):
                continue
            twin = op.arms[i + 1]
            assert twin.name == arm.name.removesuffix("_pdl"), (op.name, arm.name)
            if op.name == "paged_decode_attention":  # the P.V pass a dependent of the scores pass
                assert arm.flags == ("VT_ATTN_PDL", *twin.flags), arm.name
                seen.add("VT_ATTN_PDL")
                continue
            assert arm.flags == (*twin.flags[:-1], "VT_GEMV_PDL", twin.flags[-1]), (op.name, arm.name)
            assert arm.needs == twin.needs and arm.kernel.keywords["pdl"] is True, (op.name, arm.name)
            assert getattr(twin.kernel, "keywords", {}).get("pdl") is None, (op.name, twin.name)
            seen.add("VT_GEMV_PDL")
    assert seen == {"VT_GEMV_PDL", "VT_ATTN_PDL"}
