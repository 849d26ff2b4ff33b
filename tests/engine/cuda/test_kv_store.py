"""The paged KV store kernel against engine.ops.kv_store.store_kv (GPU), and the binding's checks (CPU)."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.ops import kv_store as ref
from lab.gates import numerics
from lab.gates.cases import attention as cases

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the kernels run on a GPU")
KV = [c for c in cases.CASES if c.name.startswith("kv_store/")]


def test_binding_errors_name_the_tensor() -> None:
    from engine.cuda import kv_store

    x = cases.kv_inputs(1, torch.device("cpu"), dtype=torch.bfloat16, d=64, bs=16)
    with pytest.raises(ValueError, match="k: heads and head_dim must be contiguous"):
        kv_store.store_kv(x["k"].transpose(1, 2), x["v"], x["k_cache"], x["v_cache"], x["slots"])
    with pytest.raises(TypeError, match="v: expected dtype torch.bfloat16"):
        kv_store.store_kv(x["k"], x["v"].float(), x["k_cache"], x["v_cache"], x["slots"])
    with pytest.raises(ValueError, match="slot_mapping: 36 entries for 37 tokens"):
        kv_store.store_kv(x["k"], x["v"], x["k_cache"], x["v_cache"], x["slots"][1:])


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", KV, ids=lambda c: c.name)
def test_store_matches_reference_bitwise(case) -> None:
    x = case.make(0, torch.device("cuda"))
    got = numerics.compare(case.kernel(x), case.reference_output(x), numerics.TOLERANCES["exact"])
    assert got.passed and got.bitwise_equal_pct == 100.0, got


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("pad", [3, 8])  # 3: rows not 16-byte aligned (scalar path); 8: aligned (vector path)
def test_strided_tokens_and_skipped_slots(pad: int) -> None:
    from engine.cuda import kv_store

    x = cases.kv_inputs(2, torch.device("cuda"), dtype=torch.bfloat16, d=128, bs=16)
    tokens, heads, d = x["k"].shape
    wide = torch.randn(tokens, heads * d + pad, device="cuda").to(torch.bfloat16)
    k = wide.as_strided((tokens, heads, d), (heads * d + pad, d, 1))
    kc, vc = x["k_cache"].clone(), x["v_cache"].clone()
    rk, rv = x["k_cache"].clone(), x["v_cache"].clone()
    kv_store.store_kv(k, x["v"], kc, vc, x["slots"].int())
    ref.store_kv(k.contiguous(), x["v"], rk, rv, x["slots"])
    assert torch.equal(kc, rk) and torch.equal(vc, rv)
    untouched = x["slots"] < 0
    assert untouched.sum() == 5  # the padding tokens wrote nothing: the caches equal the reference's


@needs_gpu
@pytest.mark.gpu
def test_public_op_runs_the_kernel_on_a_gpu() -> None:
    x = cases.kv_inputs(4, torch.device("cuda"), dtype=torch.float32, d=64, bs=16)
    kc, vc = x["k_cache"].clone(), x["v_cache"].clone()
    kernels.reset_counts()
    kernels.store_kv(FlagSnapshot.defaults(), x["k"], x["v"], kc, vc, x["slots"])  # the CUDA store here
    expected = cases.ref_kv_store(x)  # the torch copy
    assert kernels.counts().ran == {("store_kv", "cuda"): 1} and torch.equal(torch.stack([kc, vc]), expected)
