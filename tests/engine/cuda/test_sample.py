"""Tests for the sampling kernels (engine/cuda/sample.cu): argmax bitwise against torch.argmax, top-k/top-p in law."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import FlagSnapshot
from engine.ops.sample import greedy_argmax, sample_top_k_top_p
from lab.gates.cases.sample import kept_set

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path(build.NVCC).exists(),
    reason="nvcc not found: the CUDA sources cannot be compiled here",
)
gpu = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
CHUNK = 2048  # kArgmaxChunk in sample.cuh: vocab sizes below straddle it
VOCABS = [1, 7, 2047, 2048, 2049, 6 * 2048 + 5, 151_936]

FAMILY = "sample"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the sampling kernels"


@needs_nvcc
def test_launchers_reject_bad_arguments_before_any_launch(compiled):
    p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    argmax = compiled.vt_sample_argmax
    argmax.argtypes = [p, p, p, p, i, i, ll, i, p]
    compiled.vt_sample_last_error.restype = ctypes.c_char_p
    assert argmax(None, None, None, None, 2, 0, 0, 1, None) == 1000
    assert compiled.vt_sample_last_error() == b"sample: vocab must be > 0 (got 0)"
    assert argmax(None, None, None, None, 2, 100, 99, 1, None) == 1000
    assert compiled.vt_sample_last_error() == b"sample: logits row stride 99 < vocab 100"
    compiled.vt_sample_argmax_chunks.argtypes = [i]
    assert [compiled.vt_sample_argmax_chunks(v) for v in (1, CHUNK, CHUNK + 1, 151_936)] == [1, 1, 2, 75]


def test_binding_rejects_a_cpu_tensor():
    from engine.cuda import sample

    with pytest.raises(ValueError, match="logits: expected a CUDA tensor, got device cpu"):
        sample.greedy_argmax(torch.randn(2, 9))


def test_kept_set_follows_the_top_k_and_top_p_cuts():
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, -1.0]])
    assert kept_set(logits, 2, 1.0, 1.0).tolist() == [[True, False, True, True, False]]  # tie at the k-th kept
    assert kept_set(logits, 0, 0.5, 1.0).tolist() == [[True, False, False, False, False]]
    assert kept_set(logits, 0, 0.7, 1.0).tolist() == [[True, False, True, True, False]]


@pytest.mark.parametrize("top_k,top_p,temperature", [(5, 1.0, 1.0), (0, 0.6, 0.8), (9, 0.9, 1.5)])
def test_kept_set_holds_every_reference_draw(top_k, top_p, temperature):
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(top_k)) * 2
    gen = torch.Generator().manual_seed(1)
    draws = torch.stack([sample_top_k_top_p(logits, top_k, top_p, temperature, gen) for _ in range(300)], dim=1)
    keep = kept_set(logits, top_k, top_p, temperature)
    assert bool(keep.gather(1, draws).all())
    assert torch.equal(keep, torch.zeros_like(keep).scatter(1, draws, True))  # and the draws cover it


@gpu
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_is_torch_argmax(cuda, vocab, dtype):
    from engine.cuda import sample

    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(5, vocab, generator=g).to(dtype).to(cuda)
    assert torch.equal(sample.greedy_argmax(logits), greedy_argmax(logits))


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_ties_nan_and_infinities_follow_torch(cuda, dtype):
    from engine.cuda import sample

    vocab = 3 * CHUNK + 17
    logits = torch.randn(8, vocab, device=cuda).to(dtype)
    logits[0, [5, CHUNK + 3, 2 * CHUNK + 1]] = 50  # a tie across chunks: the lowest index
    logits[1, [CHUNK + 9, CHUNK + 2]] = 50  # a tie inside one chunk, indices out of order
    logits[2, [3 * CHUNK + 4, 40]] = float("nan")  # the first NaN wins over any number
    logits[2, 7] = float("inf")
    logits[3] = float("-inf")  # all equal: index 0
    logits[4, :] = 0.0
    logits[4, [100, 2 * CHUNK]] = torch.tensor([-0.0, 0.0], dtype=dtype, device=cuda)  # -0 == +0: index 0 wins
    logits[5, vocab - 1] = float("inf")  # the last element of a partial chunk
    logits[6, CHUNK - 1] = float("nan")
    logits[6, CHUNK] = float("nan")
    logits[7] = float("nan")
    got, want = sample.greedy_argmax(logits), greedy_argmax(logits)
    assert got.tolist() == want.tolist()
    assert got.tolist() == [5, CHUNK + 2, 40, 0, 0, vocab - 1, CHUNK - 1, 0]


@gpu
def test_argmax_reads_strided_rows(cuda):
    from engine.cuda import sample

    wide = torch.randn(4, 5000, device=cuda, dtype=torch.bfloat16)
    logits = wide[:, 100:4200]
    assert torch.equal(sample.greedy_argmax(logits), greedy_argmax(logits))


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("top_k,top_p,temperature", [(0, 1.0, 1.0), (20, 1.0, 0.8), (0, 0.9, 1.0), (50, 0.7, 1.3)])
def test_samples_stay_in_the_kept_set_and_repeat_per_seed(cuda, dtype, top_k, top_p, temperature):
    from engine.cuda import sample

    vocab, rows = 3001, 64
    g = torch.Generator().manual_seed(top_k + vocab)
    logits = (torch.randn(rows, vocab, generator=g) * 3).to(dtype).to(cuda)
    loose = 1.0 if top_p == 1.0 else min(1.0, top_p + 1e-3)  # fixed-point mass may move the cut at a near-tie
    allowed = kept_set(logits.float().cpu(), top_k, loose, temperature)
    draws = [sample.sample_top_k_top_p(logits, top_k, top_p, temperature, seed) for seed in range(6)]
    for d in draws:
        assert bool(allowed[torch.arange(rows), d.cpu()].all())
    assert torch.equal(draws[0], sample.sample_top_k_top_p(logits, top_k, top_p, temperature, 0))
    assert any(not torch.equal(draws[0], d) for d in draws[1:])


@gpu
@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (3, 1.0), (0, 0.8)])
def test_sample_frequencies_follow_the_renormalized_softmax(cuda, top_k, top_p):
    from engine.cuda import sample

    logits = torch.tensor([1.0, 0.2, -0.5, 2.0, 0.0, 1.5, -2.0, 0.7])
    temperature, rows = 0.9, 40_000
    keep = kept_set(logits[None], top_k, top_p, temperature)[0]
    want = torch.softmax(torch.where(keep, logits.double() / temperature, float("-inf")), -1)
    batch = logits.to(cuda).expand(rows, -1)  # every row is an independent draw (the row is in the counter)
    got = torch.bincount(sample.sample_top_k_top_p(batch, top_k, top_p, temperature, 1234).cpu(), minlength=8)
    freq = got.double() / rows
    assert bool((freq[~keep] == 0).all())
    assert (freq - want).abs().max().item() < 0.012  # about 5 standard deviations at 40,000 draws


@gpu
def test_the_table_runs_the_kernels_only_under_their_flags(cuda):
    logits = torch.randn(3, 1000, device=cuda, dtype=torch.bfloat16)
    base = FlagSnapshot.defaults()
    kernels.reset_counts()
    assert torch.equal(kernels.greedy_argmax(base, logits), greedy_argmax(logits))
    kernels.sample_top_k_top_p(base, logits, 20, 0.9, 1.0, torch.Generator().manual_seed(0))  # VT_SAMPLE_KERNEL off
    on = base.with_(VT_SAMPLE_KERNEL=True)
    a = kernels.sample_top_k_top_p(on, logits, 20, 0.9, 1.0, torch.Generator().manual_seed(3))
    b = kernels.sample_top_k_top_p(on, logits, 20, 0.9, 1.0, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)  # the same generator state: the same seed, the same tokens
    assert kernels.counts().ran == {
        ("greedy_argmax", "cuda"): 1,
        ("sample_top_k_top_p", "reference"): 1,
        ("sample_top_k_top_p", "cuda"): 2,
    }


def test_binding_argtypes_match_the_launchers():
    from engine.cuda import sample
    from tests.engine.cuda.signatures import exported

    launchers = exported(build.CUDA_DIR / "sample.cu")
    assert set(sample.SIGNATURES) == set(launchers) - {"vt_sample_last_error"}
    for name, argtypes in sample.SIGNATURES.items():
        assert argtypes == launchers[name], name
