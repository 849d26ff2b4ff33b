"""A tensor is checked once a table call: the op's check (ranks, dtypes, sizes), then the arm's `supports` (what the
kernel needs past it), then the binding's launch, which checks nothing again. The bindings' checked entries stay
for direct calls (tests/engine/cuda)."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.cuda import ffi
from engine.cuda import gdn as cuda_gdn
from engine.cuda import gemm_small as cuda_gemm_small
from engine.cuda import gemv as cuda_gemv
from engine.cuda import gemv_stream as cuda_stream
from engine.cuda import kv_store as cuda_kv_store
from engine.cuda import moe as cuda_moe
from engine.cuda import norm as cuda_norm
from engine.cuda import paged_attn as cuda_paged_attn
from engine.cuda import paged_attn_onepass as cuda_onepass
from engine.cuda import paged_attn_tiled as cuda_tiled
from engine.cuda import prefill_attn as cuda_prefill
from engine.cuda import quant as cuda_quant
from engine.cuda import rope as cuda_rope
from engine.cuda import sample as cuda_sample
from engine.cuda import sample_rows as cuda_sample_rows
from engine.cuda import splitkv as cuda_splitkv
from engine.kernels import attention as attention_family
from engine.kernels import gemv as gemv_family

_H200 = kernels.Device(0, (9, 0), 227 * 1024, 132)  # an H200's capability, opt-in ceiling and SMs


def _kernel_of(op: kernels.Op, arm: str) -> object:
    kernel = op.arm(arm).kernel
    return kernel.func if isinstance(kernel, partial) else kernel


def test_the_norm_and_linear_arms_launch_without_checking_again() -> None:
    for op in (kernels.rms_norm, kernels.qk_norm):
        assert _kernel_of(op, "cuda") is cuda_norm.launch_rms_norm
    assert _kernel_of(kernels.fused_add_rms_norm, "cuda") is cuda_norm.launch_fused_add_rms_norm
    launches = {arm.name: _kernel_of(kernels.linear, arm.name) for arm in kernels.linear.arms}
    assert launches == {
        "gemv_stream_pdl": cuda_stream.launch_linear,
        "gemv_stream": cuda_stream.launch_linear,
        "gemv_pdl": cuda_gemv.launch_linear,
        "gemv": cuda_gemv.launch_linear,
        "gemm_small": cuda_gemm_small.launch_linear,
    }
    prologues = {cuda_stream.launch_add_rms_norm_linear, cuda_gemv.launch_add_rms_norm_linear}
    for op, extra in (
        (kernels.add_rms_norm_linear, {cuda_gemm_small.launch_add_rms_norm_linear}),  # by name
        (kernels.add_rms_norm_linear_silu_mul, set()),
    ):
        fused = {a.name: _kernel_of(op, a.name) for a in (*op.arms, *op.by_name) if not a.composite}
        assert set(fused.values()) == prologues | extra
    assert [a.name for a in kernels.silu_mul_linear.arms] == ["act_then_linear"]  # its prologue GEMV is retired
    glu = {a.name: _kernel_of(kernels.linear_silu_mul, a.name) for a in kernels.linear_silu_mul.arms[:4]}
    assert glu == {
        "glu_stream_pdl": cuda_stream.launch_linear,
        "glu_stream": cuda_stream.launch_linear,
        "glu_pdl": cuda_gemv.launch_linear_silu_mul,
        "glu": cuda_gemv.launch_linear_silu_mul,
    }


def test_the_norm_predicate_holds_what_the_ops_check_leaves_to_the_kernel() -> None:
    x, w = torch.ones(2, 8), torch.ones(8)
    assert cuda_norm.supports(x, w, 1e-6)
    assert not cuda_norm.supports(x, torch.ones(16)[::2], 1e-6)  # a strided weight: the kernel reads it densely
    assert not cuda_norm.supports(x, torch.ones(8, device="meta"), 1e-6)  # another device
    assert cuda_norm.supports_add(x, torch.ones(2, 8), w, 1e-6)
    assert not cuda_norm.supports_add(x, torch.ones(2, 8, device="meta"), w, 1e-6)


def test_the_gemv_predicate_holds_the_rows_the_layout_and_the_device() -> None:
    x, w = torch.ones(2, 64), torch.ones(16, 64)
    assert gemv_family.supports_rows(x, w)
    assert not gemv_family.supports_rows(torch.ones(cuda_gemv.MAX_ROWS + 1, 64), w)  # a prefill: the GEMM
    assert not gemv_family.supports_rows(x, torch.ones(64, 16).T)  # a transposed W
    assert not gemv_family.supports_rows(x, torch.ones(16, 64, device="meta"))
    assert not gemv_family.supports_rows(x, w, torch.ones(16, device="meta"))  # the bias on another device
    for fused in (gemv_family.supports_glu, gemv_family.supports_glu_stream):
        assert not fused(x, torch.ones(16, 64, device="meta"))  # W on another device: declined before its shape


def test_the_norm_prologue_predicate_holds_the_devices_and_a_contiguous_norm_weight() -> None:
    x, res, nw, w = torch.ones(1, 64), torch.ones(1, 64), torch.ones(64), torch.ones(16, 64)
    assert gemv_family.supports_norm_prologue(x, res, nw, 1e-6, w)
    assert gemv_family.supports_norm_prologue(x, None, nw, 1e-6, w)  # the first layer: no residual yet
    assert not gemv_family.supports_norm_prologue(x, res, torch.ones(128)[::2], 1e-6, w)  # a strided norm weight
    assert not gemv_family.supports_norm_prologue(x, torch.ones(1, 64, device="meta"), nw, 1e-6, w)
    assert not gemv_family.supports_norm_prologue(x, res, nw, 1e-6, w, torch.ones(16, device="meta"))


def test_the_rope_store_moe_and_gdn_arms_launch_without_checking_again() -> None:
    assert _kernel_of(kernels.apply_rope_neox, "cuda") is cuda_rope.launch_apply_rope_neox
    assert _kernel_of(kernels.qk_norm_rope, "fused") is cuda_rope.launch_qk_norm_rope
    assert _kernel_of(kernels.qkv_norm_rope_store, "fused") is cuda_rope.launch_qkv_norm_rope_store
    assert _kernel_of(kernels.store_kv, "cuda") is cuda_kv_store.launch_store_kv
    assert _kernel_of(kernels.moe_experts, "cuda") is cuda_moe.launch_experts
    assert _kernel_of(kernels.gated_delta_decode, "cuda") is cuda_gdn.launch_decode
    assert _kernel_of(kernels.greedy_argmax, "cuda") is cuda_sample.launch_greedy_argmax
    assert _kernel_of(kernels.sample_rows, "gumbel") is cuda_sample_rows.launch_sample_rows


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def test_the_rope_predicates_hold_an_even_head_dim_and_one_device() -> None:
    x, cs, w = torch.ones(2, 3, 8), torch.ones(2, 8), torch.ones(8)
    assert cuda_rope.supports(x, cs, cs) and cuda_rope.supports_norm(x, w, cs, cs, 1e-6)
    assert not cuda_rope.supports(torch.ones(2, 3, 7), torch.ones(2, 7), torch.ones(2, 7))  # an odd head_dim
    assert not cuda_rope.supports(x, _meta(cs), cs)
    assert not cuda_rope.supports_norm(x, torch.ones(16)[::2], cs, cs, 1e-6)  # a strided norm weight
    assert not cuda_rope.supports_norm(x, _meta(w), cs, cs, 1e-6)
    q, k = torch.ones(2, 4, 8), torch.ones(2, 2, 8)
    cache, slots = torch.ones(3, 4, 2, 8), torch.zeros(2, dtype=torch.int64)
    args = [q, k, k.clone(), w, w, cs, cs, 1e-6, cache, cache.clone(), slots]
    assert cuda_rope.supports_store(*args)
    for i in (2, 5, 8, 10):  # v, cos, k_cache, slot_mapping on another device
        assert not cuda_rope.supports_store(*args[:i], _meta(args[i]), *args[i + 1 :]), i
    assert not cuda_rope.supports_store(torch.ones(2, 4, 16)[..., ::2], *args[1:])  # a strided head_dim


def test_the_store_predicate_holds_the_row_layout_and_one_device() -> None:
    k, cache, slots = torch.ones(2, 2, 8), torch.ones(3, 4, 2, 8), torch.zeros(2, dtype=torch.int64)
    assert cuda_kv_store.supports(k, k, cache, cache, slots)
    assert not cuda_kv_store.supports(k, torch.ones(2, 8, 2).transpose(1, 2), cache, cache, slots)  # strided heads
    assert not cuda_kv_store.supports(k, k, cache, cache, _meta(slots))


def test_the_moe_and_gdn_predicates_hold_one_device_and_dense_weights() -> None:
    x, gate_up, down = torch.ones(2, 8), torch.ones(4, 12, 8), torch.ones(4, 8, 6)
    weights, ids = torch.ones(2, 2), torch.zeros(2, 2, dtype=torch.int64)
    assert cuda_moe.supports_experts(x, gate_up, down, weights, ids)
    assert not cuda_moe.supports_experts(x, _meta(gate_up), down, weights, ids)
    assert not cuda_moe.supports_experts(x, gate_up, torch.ones(4, 6, 8).transpose(1, 2), weights, ids)
    q, v, gb, state = torch.ones(2, 2, 8), torch.ones(2, 4, 8), torch.ones(2, 4), torch.ones(2, 4, 8, 8)
    assert cuda_gdn.supports_decode(q, q, v, gb, gb, state)
    assert not cuda_gdn.supports_decode(q, q, v, _meta(gb), gb, state)
    assert not cuda_gdn.supports_decode(q, q, v, gb, gb, torch.ones(2, 4, 8, 16)[..., ::2])  # a strided state


def test_the_gumbel_predicate_holds_unfiltered_rows_a_unit_stride_vocabulary_and_one_device() -> None:
    logits, rows, ids = torch.ones(2, 8), torch.ones(2), torch.zeros(2, dtype=torch.int64)
    args = [logits, rows, rows, rows, ids, ids]
    assert cuda_sample_rows.supports(*args, filtered=False)
    assert not cuda_sample_rows.supports(*args, filtered=True)
    assert not cuda_sample_rows.supports(torch.ones(8, 2).T, *args[1:], filtered=False)  # a strided vocabulary
    assert not cuda_sample_rows.supports(logits, rows, rows, rows, _meta(ids), ids, filtered=False)


def test_the_paged_decode_attention_arms_launch_without_checking_again() -> None:
    op = kernels.paged_decode_attention
    launches = {a.name: _kernel_of(op, a.name) for a in op.arms + op.by_name}
    tiled = ("tiled_fused", "tiled_pipelined_pdl", "tiled_pipelined", "tiled")
    assert {name: launches[name] for name in tiled} == dict.fromkeys(tiled, cuda_tiled.launch_decode)
    assert launches["generic"] is launches["warp_d128"] is cuda_paged_attn.launch_decode
    modes = {a.name: a.kernel.keywords for a in op.arms + op.by_name if isinstance(a.kernel, partial)}
    assert modes == {
        "tiled_fused": {"fused": True, "pipelined": False, "pdl": False},
        "tiled_pipelined_pdl": {"fused": False, "pipelined": True, "pdl": True},
        "tiled_pipelined": {"fused": False, "pipelined": True, "pdl": False},
        "generic": {"arm": cuda_paged_attn.GENERIC},
        "warp_d128": {"arm": cuda_paged_attn.WARP},
    }


def test_the_tiled_decode_predicate_holds_contiguous_inputs_on_one_device() -> None:
    q, cache = torch.ones(2, 8, 64, dtype=torch.bfloat16), torch.ones(4, 16, 2, 64, dtype=torch.bfloat16)
    tables, lens = torch.zeros(2, 3, dtype=torch.int32), torch.ones(2, dtype=torch.int32)
    args = [q, cache, cache.clone(), tables, lens]
    assert cuda_tiled.supports_inputs(*args) and attention_family.supports_tiled(*args, 0.125)
    for i in range(1, 5):  # a cache, the tables or the lengths on another device
        assert not cuda_tiled.supports_inputs(*args[:i], _meta(args[i]), *args[i + 1 :]), i
    assert not cuda_tiled.supports_inputs(torch.ones(2, 8, 128, dtype=torch.bfloat16)[..., ::2], *args[1:])
    assert not cuda_tiled.supports_inputs(q, torch.ones(4, 2, 16, 64, dtype=torch.bfloat16).transpose(1, 2), *args[2:])
    assert not attention_family.supports_tiled(q.float(), cache.float(), cache.float(), tables, lens)  # fp32: generic
    assert not attention_family.supports_tiled(q, cache, _meta(cache), tables, lens)  # the shape fits, the device not
    # the variants decline inputs the launch cannot take before asking the CUDA library for their splits
    for variant in (
        attention_family.supports_tiled_fused,
        attention_family.supports_tiled_pipelined,
        attention_family.supports_tiled_pdl,
    ):
        assert not variant(q, cache, cache, tables, _meta(lens), 0.125)


def test_the_generic_and_warp_decode_predicates_hold_their_shapes_and_the_launchs_inputs() -> None:
    op = kernels.paged_decode_attention
    generic, warp = op.arm("generic").supports, op.arm("warp_d128").supports
    q, cache = torch.ones(2, 8, 128), torch.ones(4, 16, 2, 128)
    args = [q, cache, cache.clone(), torch.zeros(2, 3, dtype=torch.int32), torch.ones(2, dtype=torch.int32), 0.125]
    assert generic(*args) and warp(*args)
    for i in range(1, 5):  # a cache, the tables or the lengths on another device
        assert not generic(*args[:i], _meta(args[i]), *args[i + 1 :]), i
    assert not generic(torch.ones(2, 8, 256)[..., ::2], *args[1:])  # a strided q
    assert not warp(torch.ones(2, 8, 64), torch.ones(4, 16, 2, 64), torch.ones(4, 16, 2, 64), *args[3:])  # d 64
    assert not generic(torch.ones(2, 8, 264), torch.ones(4, 16, 2, 264), torch.ones(4, 16, 2, 264), *args[3:])


def test_the_varlen_attention_arms_run_their_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, torch.Tensor]] = []
    for name in ("launch_prefill", "launch_extend"):
        monkeypatch.setattr(cuda_prefill, name, lambda q, *a, name=name: ran.append((name, a[-3])) or q)
    q, k = torch.ones(5, 4, 64, dtype=torch.bfloat16), torch.ones(5, 2, 64, dtype=torch.bfloat16)
    kernels.prefill_attention.arm("mma").kernel(q, k, k, [2, 3], 0.125)
    cache, tables = torch.ones(4, 16, 2, 64, dtype=torch.bfloat16), torch.zeros(2, 3, dtype=torch.int64)
    kernels.extend_attention.arm("mma").kernel(q, cache, cache, tables, [2, 3], [4, 0], 0.125)
    assert [name for name, _ in ran] == ["launch_prefill", "launch_extend"]
    assert ran[0][1].tolist() == [[2, 3]] and ran[1][1].tolist() == [[2, 3], [4, 0]]  # the lengths, as the kernel's


def test_the_varlen_predicates_hold_packed_heads_the_layouts_and_one_device() -> None:
    q, k = torch.ones(5, 4, 64, dtype=torch.bfloat16), torch.ones(5, 2, 64, dtype=torch.bfloat16)
    lens = torch.ones(2, 2, dtype=torch.int32)
    prefill = kernels.prefill_attention.arm("mma").supports
    assert prefill(q, k, k, [2, 3], 0.125) and prefill(q, k, k, [2, 3], 0.125, None, lens)
    rows = torch.ones(5, 8, 64, dtype=torch.bfloat16)[:, :4]  # strided rows, packed heads: the kernel takes them
    assert prefill(rows, k, k, [2, 3], 0.125)
    assert not prefill(torch.ones(5, 64, 4, dtype=torch.bfloat16).transpose(1, 2), k, k, [2, 3], 0.125)
    assert not prefill(q, k, _meta(k), [2, 3], 0.125)
    assert not prefill(q, k, k, [2, 3], 0.125, None, torch.ones(2, 4, dtype=torch.int32)[:, ::2])
    cache, tables = torch.ones(4, 16, 2, 64, dtype=torch.bfloat16), torch.zeros(2, 3, dtype=torch.int32)
    extend = kernels.extend_attention.arm("mma").supports
    args = [q, cache, cache.clone(), tables, [2, 3], [4, 0], 0.125]
    assert extend(*args) and extend(*args, None, lens)
    for i in (1, 2, 3):  # a cache or the tables on another device
        assert not extend(*args[:i], _meta(args[i]), *args[i + 1 :]), i
    assert not extend(q, cache, cache.float(), *args[3:])  # V's dtype is not the op's check's
    assert not extend(q, torch.ones(4, 2, 16, 64, dtype=torch.bfloat16).transpose(1, 2), *args[2:])
    assert not extend(q, cache, cache, torch.zeros(3, 2, dtype=torch.int32).T, *args[4:])
    assert not extend(*args, None, torch.ones(2, 4, dtype=torch.int32)[:, ::2])


def test_the_awq_dequant_arm_launches_and_its_predicate_holds_dense_tensors_on_one_device() -> None:
    assert _kernel_of(kernels.dequant_awq, "cuda") is cuda_quant.launch_dequant_awq
    qweight, qzeros = torch.zeros(64, 2, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32)
    scales = torch.ones(2, 16, dtype=torch.bfloat16)
    args = [qweight, qzeros, scales, 32]
    assert cuda_quant.supports_dequant_awq(*args) and cuda_quant.supports_dequant_awq(*args, torch.float32)
    assert not cuda_quant.supports_dequant_awq(*args, torch.float64)  # an output dtype the kernel does not write
    for i in (1, 2):  # qzeros or scales on another device
        assert not cuda_quant.supports_dequant_awq(*args[:i], _meta(args[i]), *args[i + 1 :]), i
    assert not cuda_quant.supports_dequant_awq(torch.zeros(2, 64, dtype=torch.int32).T, qzeros, scales, 32)
    assert not cuda_quant.supports_dequant_awq(qweight, qzeros, torch.ones(16, 2, dtype=torch.bfloat16).T, 32)


def test_the_nvfp4_dequant_arm_runs_its_launch_and_its_predicate_holds_dense_tensors_on_one_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(cuda_quant, "launch_dequant_nvfp4", lambda packed, bs, gs, dtype: ran.append(gs) or packed)
    packed, scales = torch.zeros(4, 16, dtype=torch.uint8), torch.zeros(4, 2, dtype=torch.float8_e4m3fn)
    kernels.dequant_nvfp4.arm("cuda").kernel(packed, scales, torch.tensor([0.5]), torch.bfloat16)
    assert ran == [0.5]  # a host global scale goes by value: no device copy
    assert cuda_quant.supports_dequant_nvfp4(packed, scales, 0.5, torch.bfloat16)
    assert not cuda_quant.supports_dequant_nvfp4(packed, _meta(scales), 0.5, torch.bfloat16)
    assert not cuda_quant.supports_dequant_nvfp4(torch.zeros(16, 4, dtype=torch.uint8).T, scales, 0.5, torch.bfloat16)
    assert not cuda_quant.supports_dequant_nvfp4(
        packed, torch.zeros(2, 4, dtype=torch.float8_e4m3fn).T, 1.0, torch.half
    )


def test_the_gptq_dequant_arm_launches_and_its_predicate_holds_4_bits_and_dense_tensors_on_one_device() -> None:
    assert _kernel_of(kernels.dequant_gptq, "cuda") is cuda_quant.launch_dequant_gptq
    qweight, qzeros = torch.zeros(8, 16, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32)
    scales, g_idx = torch.ones(2, 16, dtype=torch.float16), torch.zeros(128, 2, dtype=torch.int64)[:, 0]
    args = [qweight, qzeros, scales, g_idx]
    assert cuda_quant.supports_dequant_gptq(*args)  # a strided int64 g_idx: the launch makes it int32
    assert not cuda_quant.supports_dequant_gptq(*args, 8)  # 8-bit weights: the reference
    assert not cuda_quant.supports_dequant_gptq(*args, 4, 2, torch.float64)
    for i in (1, 2, 3):  # qzeros, scales or g_idx on another device
        assert not cuda_quant.supports_dequant_gptq(*args[:i], _meta(args[i]), *args[i + 1 :]), i
    assert not cuda_quant.supports_dequant_gptq(torch.zeros(16, 8, dtype=torch.int32).T, *args[1:])


class _FakeLib:
    """A CUDA library stand-in that records each launch (symbol, argument count) and returns success, so an arm's
    whole table path runs on the CPU: the op's check, the arm's predicate, then its launch."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, symbol: str) -> object:
        return lambda *args: self.calls.append((symbol, len(args))) or 0


def _counted(monkeypatch: pytest.MonkeyPatch, module: object, *names: str) -> dict[str, int]:
    """Count the calls of the binding's checks `names` (they still run): a launch behind a predicate makes none."""
    seen = dict.fromkeys(names, 0)
    for name in names:
        check = getattr(module, name)

        def counting(*args: object, name: str = name, check: object = check, **kwargs: object) -> object:
            seen[name] += 1
            return check(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(module, name, counting)
    return seen


@pytest.fixture
def quant_lib(monkeypatch: pytest.MonkeyPatch) -> _FakeLib:
    lib = _FakeLib()
    monkeypatch.setattr(cuda_quant, "_lib", lambda: lib)
    monkeypatch.setattr(cuda_quant, "_COUNTERS", {})
    monkeypatch.setattr(ffi, "stream", lambda device: None)
    return lib


def _awq() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    return torch.zeros(64, 2, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32), torch.ones(2, 16), 32


def test_the_quant_gemv_arms_launch_without_checking_again(
    monkeypatch: pytest.MonkeyPatch, quant_lib: _FakeLib
) -> None:
    for op, launch in (
        (kernels.awq_linear, cuda_quant.launch_awq_linear),
        (kernels.gptq_linear, cuda_quant.launch_gptq_linear),
        (kernels.nvfp4_linear, cuda_quant.launch_nvfp4_linear),
    ):
        assert _kernel_of(op, "gemv") is launch, op.name
    seen = _counted(monkeypatch, cuda_quant, "_int4", "_group", "_g_idx", "_nvfp4", "_check_gemv_io")
    x, bias = torch.ones(1, 64), torch.ones(32)[::2]  # a strided bias: the launch hands it over contiguous
    assert kernels.awq_linear.run_arm("gemv", x, *_awq(), bias).shape == (1, 16)
    gptq = (torch.zeros(8, 16, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32), torch.ones(2, 16))
    assert kernels.gptq_linear.run_arm("gemv", x[0], *gptq, torch.zeros(64, dtype=torch.int64)).shape == (16,)
    packed, scales = torch.zeros(16, 32, dtype=torch.uint8), torch.zeros(16, 4, dtype=torch.float8_e4m3fn)
    assert kernels.nvfp4_linear.run_arm("gemv", x, packed, scales, torch.tensor([0.5])).shape == (1, 16)
    assert [symbol for symbol, _ in quant_lib.calls if "gemv" in symbol] == [
        "vt_quant_gemv_max_splits",
        "vt_quant_gemv_max_tiles",
        "vt_quant_awq_gemv",
        "vt_quant_gemv_max_splits",
        "vt_quant_gemv_max_tiles",
        "vt_quant_gptq_gemv",
        "vt_quant_nvfp4_gemv",
    ]
    assert seen == dict.fromkeys(seen, 0)
    cuda_quant.awq_linear(x, *_awq(), bias)  # the direct entry checks each tensor once
    assert seen == {"_int4": 1, "_group": 1, "_g_idx": 0, "_nvfp4": 0, "_check_gemv_io": 1}


def test_the_quant_gemv_predicates_hold_one_row_dense_weights_the_bias_and_one_device() -> None:
    x, awq, bias = torch.ones(1, 1, 64), _awq(), torch.ones(16)
    assert cuda_quant.supports_awq_linear(x, *awq) and cuda_quant.supports_awq_linear(x, *awq, torch.ones(32)[::2])
    assert not cuda_quant.supports_awq_linear(torch.ones(2, 64), *awq)  # two rows: dequant, then the linear op
    for i in range(3):  # a weight on another device, or not contiguous
        assert not cuda_quant.supports_awq_linear(x, *awq[:i], _meta(awq[i]), *awq[i + 1 :]), i
    assert not cuda_quant.supports_awq_linear(x, awq[0], awq[1], torch.ones(16, 2).T, 32)
    for bad in (bias.double(), torch.ones(17), torch.ones(1, 16), _meta(bias)):  # the op's check leaves the bias
        assert not cuda_quant.supports_awq_linear(x, *awq, bad), bad
    gptq = (torch.zeros(8, 16, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32), torch.ones(2, 16))
    g_idx = torch.zeros(128, dtype=torch.int64)[::2]  # any stride: the launch makes it contiguous int32
    assert cuda_quant.supports_gptq_linear(x, *gptq, g_idx, 4, 2, bias)
    assert not cuda_quant.supports_gptq_linear(x, *gptq, g_idx, 8)  # 8-bit weights: dequant, then the linear op
    assert not cuda_quant.supports_gptq_linear(x, *gptq, _meta(g_idx))
    assert not cuda_quant.supports_gptq_linear(x, gptq[0], gptq[1], gptq[2], g_idx, 4, 1, torch.ones(8))
    packed, scales = torch.zeros(16, 32, dtype=torch.uint8), torch.zeros(16, 4, dtype=torch.float8_e4m3fn)
    for scale in (0.5, torch.tensor([0.5]), torch.tensor(0.5)):  # by value, or a tensor on x's device
        assert cuda_quant.supports_nvfp4_linear(x, packed, scales, scale, bias), scale
    assert not cuda_quant.supports_nvfp4_linear(x, packed, scales, torch.ones(1, device="meta"))
    assert not cuda_quant.supports_nvfp4_linear(x, packed, _meta(scales), 0.5)
    assert not cuda_quant.supports_nvfp4_linear(torch.ones(3, 64), packed, scales, 0.5)


def test_the_one_pass_and_split_kv_arms_launch_without_checking_again(monkeypatch: pytest.MonkeyPatch) -> None:
    op = kernels.paged_decode_attention
    assert _kernel_of(op, "tiled_onepass") is cuda_onepass.launch_decode
    assert _kernel_of(op, "splitkv_swap") is cuda_splitkv.launch_decode
    libs = {module: _FakeLib() for module in (cuda_onepass, cuda_splitkv)}
    for module, lib in libs.items():
        monkeypatch.setattr(module, "_lib", lambda lib=lib: lib)
    monkeypatch.setattr(ffi, "stream", lambda device: None)
    monkeypatch.setattr(cuda_onepass, "num_splits", lambda *shape: 1)
    monkeypatch.setattr(cuda_splitkv, "sm_count", lambda device: 132)
    seen = _counted(monkeypatch, cuda_paged_attn, "check_inputs")
    seen |= _counted(monkeypatch, cuda_tiled, "check_inputs")
    q, cache = torch.ones(2, 8, 64, dtype=torch.bfloat16), torch.ones(4, 16, 2, 64, dtype=torch.bfloat16)
    args = [q, cache, cache.clone(), torch.zeros(2, 3, dtype=torch.int32), torch.ones(2, dtype=torch.int32), 0.125]
    with kernels.on_device(_H200):  # the one pass asks the table's device whether its block fits
        assert op.run_arm("tiled_onepass", *args).shape == q.shape
    assert op.run_arm("splitkv_swap", *args).shape == q.shape
    assert libs[cuda_onepass].calls == [("vt_paged_attn_onepass_decode", 21)]
    assert [s for s, _ in libs[cuda_splitkv].calls] == [
        "vt_splitkv_num_splits",
        "vt_splitkv_partial",
        "vt_splitkv_combine",
    ]
    assert seen == {"check_inputs": 0}
    cuda_onepass.decode(*args)  # the direct entries check each tensor once
    cuda_splitkv.decode(*args)
    assert seen == {"check_inputs": 2}


def test_the_one_pass_and_split_kv_predicates_hold_contiguous_inputs_on_one_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cuda_onepass, "num_splits", lambda *shape: 1)
    op = kernels.paged_decode_attention
    onepass, swap = op.arm("tiled_onepass").supports, op.arm("splitkv_swap").supports
    q, cache = torch.ones(2, 8, 64, dtype=torch.bfloat16), torch.ones(4, 16, 2, 64, dtype=torch.bfloat16)
    args = [q, cache, cache.clone(), torch.zeros(2, 3, dtype=torch.int32), torch.ones(2, dtype=torch.int32), 0.125]
    assert not onepass(*args)  # no device whose shared memory holds its block
    with kernels.on_device(_H200):
        assert onepass(*args) and swap(*args)
        for i in range(1, 5):  # a cache, the tables or the lengths on another device
            assert not onepass(*args[:i], _meta(args[i]), *args[i + 1 :]), i
            assert not swap(*args[:i], _meta(args[i]), *args[i + 1 :]), i
        strided = torch.ones(2, 8, 128, dtype=torch.bfloat16)[..., ::2]
        assert not onepass(strided, *args[1:]) and not swap(strided, *args[1:])
        half = [q.half(), cache.half(), cache.half(), *args[3:]]
        assert onepass(*half) and not swap(*half)  # fp16: the group swap takes fp32 and bf16 only
        assert not swap(*args[:3], args[3][:, :0], *args[4:])  # a table that addresses no token
        assert not onepass(q.float(), cache.float(), cache.float(), *args[3:])  # fp32: the one pass takes 16-bit only


def test_the_extend_decode_rows_arm_launches_the_generic_kernel_without_checking_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[tuple[torch.Tensor, ...]] = []
    monkeypatch.setattr(
        cuda_paged_attn, "launch_decode", lambda q, kc, vc, t, ctx, *rest, **kw: ran.append((q, t, ctx)) or q
    )
    seen = _counted(monkeypatch, cuda_paged_attn, "check_inputs", "paged_decode_attention")
    cache = torch.ones(8, 16, 2, 64, dtype=torch.bfloat16)
    tables = torch.arange(6).reshape(2, 3)
    op = kernels.extend_attention
    strided_q = torch.ones(5, 64, 4, dtype=torch.bfloat16).transpose(1, 2)
    op.run_arm("decode_rows", strided_q, cache, cache.clone(), tables, [2, 3], [4, 0], 0.125)
    ((got_q, got_tables, ctx),) = ran
    assert got_q.is_contiguous() and got_tables.dtype == torch.int32 and got_tables[:, 0].tolist() == [0, 0, 3, 3, 3]
    assert ctx.tolist() == [5, 6, 1, 2, 3]  # each token's position + 1
    assert seen == {"check_inputs": 0, "paged_decode_attention": 0}


def test_the_extend_decode_rows_predicate_holds_the_caches_and_the_table() -> None:
    rows = kernels.extend_attention.arm("decode_rows").supports
    q, cache = torch.ones(5, 4, 64), torch.ones(8, 16, 2, 64)
    args = [q, cache, cache.clone(), torch.zeros(2, 3, dtype=torch.int64), [2, 3], [4, 0], 0.125]
    assert rows(*args) and rows(torch.ones(5, 64, 4).transpose(1, 2), *args[1:])  # any q: the adapter packs it
    for i in (1, 2, 3):  # a cache or the tables on another device
        assert not rows(*args[:i], _meta(args[i]), *args[i + 1 :]), i
    assert not rows(q, cache, cache.double(), *args[3:])  # V's dtype is not the op's check's
    assert not rows(q, torch.ones(8, 2, 16, 64).transpose(1, 2), *args[2:])  # a strided cache
    assert not rows(*args[:3], torch.zeros(2, dtype=torch.int64), *args[4:])  # a table of one row per sequence only
    assert not rows(torch.ones(5, 4, 264), torch.ones(8, 16, 2, 264), torch.ones(8, 16, 2, 264), *args[3:])  # d 264
