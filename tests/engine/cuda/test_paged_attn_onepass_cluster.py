"""The one-pass attention's cluster combine (VT_ATTN_CLUSTER_COMBINE): when a launch takes it (2 to 8 splits, sm_90,
a cluster the device holds; the binding's copy of the rule held to the compiled one), the flag's scope and its count
(CPU), and on an sm_90 GPU the global combine's bits over head dims, groups, split counts, windows and dtypes, through
the table and replayed in a CUDA graph."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from engine import kernels
from engine.cuda import paged_attn_onepass as onepass
from engine.cuda import paged_attn_tiled as tiled
from engine.flags import FlagSnapshot
from engine.kernels.table import Arm, Op
from lab.gates.cases import attention as cases
from tests.engine.table_standins import H200, OnGpu

FAMILY = "paged_attn_onepass"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the one-pass attention kernel's cluster combine"
A100 = kernels.Device(0, (8, 0), 163 * 1024, 108)
FLAG = "VT_ATTN_CLUSTER_COMBINE"

needs_sm90 = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)),
    reason="no sm_90 GPU: thread-block clusters and distributed shared memory need one",
)


@pytest.mark.parametrize("major", [7, 8, 9, 10, 12])
def test_the_bindings_cluster_rule_is_the_kernels(compiled, major: int) -> None:
    for splits in range(12):
        want = bool(compiled.vt_paged_attn_onepass_cluster_rule(splits, major))
        assert onepass.cluster_rule(splits, (major, 0)) == want, (splits, major)
        assert want == (2 <= splits <= onepass.MAX_CLUSTER_SPLITS and major >= 9), (splits, major)


def test_the_cluster_combine_is_off_by_default_and_scoped() -> None:
    assert not FlagSnapshot.defaults().enabled(FLAG)
    assert not onepass.cluster_requested()
    with onepass.cluster_combine(True):
        assert onepass.cluster_requested()
        with onepass.cluster_combine(False):
            assert not onepass.cluster_requested()
        assert onepass.cluster_requested()
    assert not onepass.cluster_requested()


def test_a_launch_takes_it_only_when_asked_in_range_on_sm90_and_resident(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked, 2 to 8 splits, sm_90, and a cluster the device holds (the occupancy calculator's count, stood in);
    otherwise the global combine."""
    slots = {128: 16}
    device = [H200]
    monkeypatch.setattr(onepass, "probe", lambda index: device[0])
    monkeypatch.setattr(onepass, "cluster_slots", lambda splits, d, dtype, index: slots.get(d, 0))
    shape = tiled.Shape(1, 16, 8, 128, 16, 64, torch.bfloat16, 0)
    assert not onepass.uses_cluster(shape, 8)  # not asked
    with onepass.cluster_combine(True):
        assert all(onepass.uses_cluster(shape, s) for s in range(2, 9))
        assert not onepass.uses_cluster(shape, 1) and not onepass.uses_cluster(shape, 9)
        assert not onepass.uses_cluster(shape._replace(d=256), 8)  # no such cluster resident
        device[0] = A100
        assert not onepass.uses_cluster(shape, 8)


def test_the_tables_scope_asks_for_it_and_counts_the_calls_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the flag the arm's launch is asked for the cluster combine, and a call that launched it counts as the
    flag's (`arms_ran`, what the flip protocol asks of a flag); off, `choose` and `run_arm` neither ask nor count."""
    from engine.kernels import attention

    monkeypatch.setattr(onepass, "CLUSTER_LAUNCHES", Counter())
    seen = []

    def kernel(x: object) -> str:
        seen.append(onepass.cluster_requested())
        if seen[-1]:
            onepass.CLUSTER_LAUNCHES[8] += 1  # as launch_decode counts a cluster launch
        return "ran"

    arm = Arm("fast", (), lambda x: True, "anything", kernel)
    op = Op(lambda x: "reference", lambda x: None, [arm], scope=attention.decode_scope)
    on = FlagSnapshot.defaults().with_(**{FLAG: True})
    kernels.reset_counts()
    with kernels.on_device(H200):
        assert op(FlagSnapshot.defaults(), OnGpu(1)) == "ran"
        assert op.choose(on, OnGpu(1)) == "fast"
        assert kernels.arms_ran(FLAG) == 0
        assert op(on, OnGpu(1)) == "ran"
        assert op.run_arm("fast", OnGpu(1)) == "ran"  # the default flags' scope
        with onepass.cluster_combine(True):  # a call with the flag off inside a scope on: off for that call
            assert op(FlagSnapshot.defaults(), OnGpu(1)) == "ran"
    assert seen == [False, True, False, False]
    assert kernels.counts().settings == {("paged_decode_attention", FLAG): 1}
    assert kernels.arms_ran(FLAG) == 1
    kernels.reset_counts()


def _one_sequence(seed: int, ctx: int, hq: int, hkv: int, d: int, block: int) -> dict:
    """One sequence of `ctx` tokens over shuffled blocks, its table exactly that long (the rule's capacity)."""
    g = torch.Generator().manual_seed(seed)
    need = math.ceil(ctx / block)
    shape = (need + 2, block, hkv, d)
    return {
        "q": torch.randn(1, hq, d, generator=g).to(torch.bfloat16).cuda(),
        "k_cache": torch.randn(*shape, generator=g).to(torch.bfloat16).cuda(),
        "v_cache": torch.randn(*shape, generator=g).to(torch.bfloat16).cuda(),
        "block_tables": torch.randperm(need + 2, generator=g)[None, :need].to(torch.int32).cuda(),
        "context_lens": torch.tensor([ctx], dtype=torch.int32).cuda(),
        "scale": 1.0 / math.sqrt(d),
    }


@needs_sm90
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("d", "group", "window"), [(128, 2, None), (128, 8, 100), (64, 4, None), (64, 8, 300), (256, 1, None), (256, 8, 40)]
)
def test_the_cluster_combine_gives_the_global_combines_bits(
    dtype: torch.dtype, d: int, group: int, window: int | None
) -> None:
    """The same operations in the same order as fold_combine: equal outputs at every split count it takes, empty
    splits (a window shorter than a split) and short sequences among them."""
    x = cases.paged_inputs(
        d + group, torch.device("cuda"), dtype=dtype, ctx=1500, d=d, group=group, block_size=16, window=window
    )
    args = cases._args(x)
    for splits in (2, 3, 5, 8):
        want = onepass.decode(*args, window, splits=splits)
        before = onepass.CLUSTER_LAUNCHES.total()
        with onepass.cluster_combine(True):
            got = onepass.decode(*args, window, splits=splits)
        assert onepass.CLUSTER_LAUNCHES.total() == before + 1, "the cluster combine was not launched"
        assert torch.equal(got, want), (splits, float((got.float() - want.float()).abs().max()))


@needs_sm90
@pytest.mark.gpu
def test_the_device_holds_a_cluster_of_eight_at_every_head_dim() -> None:
    for d in onepass.HEAD_DIMS:
        for dtype in onepass.DTYPES:
            assert onepass.cluster_slots(8, d, dtype, 0) > 0, (d, dtype)
            assert onepass.cluster_slots(1, d, dtype, 0) == onepass.cluster_slots(9, d, dtype, 0) == 0


@needs_sm90
@pytest.mark.gpu
def test_the_flag_takes_it_through_the_table_at_the_short_context_shape() -> None:
    """Batch 1, context 1024, 16 query and 8 KV heads, head_dim 128 (8 splits on an H100 or H200): the table's
    one-pass arm under the flag launches the cluster combine, counted as the flag's, with the flag-off bits."""
    x = _one_sequence(3, 1024, 16, 8, 128, 16)
    args = cases._args(x)
    shape = tiled.Shape.of(x["q"], x["k_cache"], x["block_tables"])
    if not 2 <= onepass._splits(shape) <= onepass.MAX_CLUSTER_SPLITS:
        pytest.skip(f"this GPU's rule gives {onepass._splits(shape)} splits here: no cluster to combine in")
    off = FlagSnapshot.defaults()
    kernels.reset_counts()
    want = kernels.paged_decode_attention(off, *args)
    assert kernels.arms_ran(FLAG) == 0
    got = kernels.paged_decode_attention(off.with_(**{FLAG: True}), *args)
    assert kernels.counts().ran[("paged_decode_attention", "tiled_onepass")] == 2, kernels.render_counts()
    assert kernels.arms_ran(FLAG) == 1 and torch.equal(got, want)
    kernels.reset_counts()


@needs_sm90
@pytest.mark.gpu
def test_the_cluster_combine_replays_in_a_cuda_graph_with_new_lengths() -> None:
    x = cases.paged_inputs(
        6, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=128, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    with onepass.cluster_combine(True):
        onepass.decode(*args, splits=7)  # build, load and ask the occupancy outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = onepass.decode(*args, splits=7)
    x["context_lens"].copy_(torch.tensor([1500, 7, 1999], dtype=torch.int32))
    graph.replay()
    assert torch.equal(out, onepass.decode(*args, splits=7))
