"""Split-KV decode sizes its split count from the block tables' static capacity: no host read of
context_lens (CPU, on meta tensors, whose values cannot be read), so the decode step stays capturable."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.cuda import splitkv

BATCH, HQ, HKV, D, BLOCK, MAX_BLOCKS, NUM_BLOCKS = 3, 8, 2, 128, 16, 37, 83


def meta_inputs(max_blocks: int = MAX_BLOCKS) -> tuple[torch.Tensor, ...]:
    """Decode inputs on the meta device: shapes and dtypes only, so any read of a value raises."""
    meta = torch.device("meta")
    q = torch.empty(BATCH, HQ, D, dtype=torch.bfloat16, device=meta)  # q: [batch, Hq, D]
    k = torch.empty(NUM_BLOCKS, BLOCK, HKV, D, dtype=torch.bfloat16, device=meta)  # [num_blocks, block, Hkv, D]
    tables = torch.empty(BATCH, max_blocks, dtype=torch.int32, device=meta)  # [batch, max_blocks]
    lens = torch.empty(BATCH, dtype=torch.int32, device=meta)  # [batch]
    return q, k, torch.empty_like(k), tables, lens


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Replace the compiled pieces (split heuristic, partial and combine launches) with recorders."""
    seen: list[dict] = []

    def fake_num_splits(rows: int, max_context: int, sm_count: int) -> int:
        seen.append({"rows": rows, "max_context": max_context, "sm_count": sm_count})
        return 5

    def fake_partial(q, k_cache, v_cache, block_tables, context_lens, scale, splits, window=None):
        seen[-1].update(splits=splits, window=window)
        b, hq, d = q.shape
        return (
            torch.empty(b, splits, hq, d, dtype=torch.float32, device=q.device),
            torch.empty(b, splits, hq, dtype=torch.float32, device=q.device),
        )

    def fake_combine(o_part, lse, dtype):
        b, _, hq, d = o_part.shape
        return torch.empty(b, hq, d, dtype=dtype, device=o_part.device)

    monkeypatch.setattr(splitkv, "num_splits", fake_num_splits)
    monkeypatch.setattr(splitkv, "launch_partial", fake_partial)
    monkeypatch.setattr(splitkv, "launch_combine", fake_combine)
    monkeypatch.setattr(splitkv, "sm_count", lambda device: 132)
    return seen


def test_meta_tensors_refuse_a_host_read() -> None:
    """The probe has teeth: the old sizing, int(context_lens.max()), fails on these inputs."""
    *_, lens = meta_inputs()
    with pytest.raises((RuntimeError, NotImplementedError)):
        int(lens.max())


@pytest.mark.parametrize("max_blocks", [MAX_BLOCKS, 5])
def test_decode_sizes_splits_from_the_table_capacity(launches: list[dict], max_blocks: int) -> None:
    q, k, v, tables, lens = meta_inputs(max_blocks)
    out = splitkv.decode(q, k, v, tables, lens, 0.09, sliding_window=41)
    assert out.shape == (BATCH, HQ, D) and out.dtype == torch.bfloat16
    assert launches == [
        {
            "rows": BATCH * HKV,  # the group swap packs a KV group's query heads as rows
            "max_context": max_blocks * BLOCK,
            "sm_count": 132,
            "splits": 5,
            "window": 41,
        }
    ]


def test_explicit_max_context_overrides_the_capacity(launches: list[dict]) -> None:
    q, k, v, tables, lens = meta_inputs()
    splitkv.decode(q, k, v, tables, lens, 0.09, max_context=1000)
    assert launches[0]["max_context"] == 1000
    with pytest.raises(ValueError, match="max_context: expected >= 1, got 0"):
        splitkv.decode(q, k, v, tables, lens, 0.09, max_context=0)


def test_the_table_runs_split_kv_without_a_host_read(launches: list[dict]) -> None:
    q, k, v, tables, lens = meta_inputs()
    # the table's entry check and the arm both read shapes only (meta tensors have no values)
    out = kernels.paged_decode_attention.run_arm("splitkv_swap", q, k, v, tables, lens, 0.09, None)
    assert out.shape == (BATCH, HQ, D)
    assert launches == [
        {
            "rows": BATCH * HKV,
            "max_context": MAX_BLOCKS * BLOCK,
            "sm_count": 132,
            "splits": 5,
            "window": None,
        }
    ]


def test_capacity_names_bad_shapes() -> None:
    q, k, _, tables, _ = meta_inputs()
    assert splitkv.capacity(tables, k) == MAX_BLOCKS * BLOCK
    with pytest.raises(ValueError, match=r"block_tables \(3,\) / k_cache"):
        splitkv.capacity(tables[:, 0], k)
