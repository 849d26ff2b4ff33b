"""The paged KV block manager: allocation, growth across block boundaries, out-of-blocks, reuse."""
from __future__ import annotations

import pytest

from engine.block_manager import BlockManager, OutOfBlocksError


def test_allocate_and_slots_follow_the_block_table() -> None:
    bm = BlockManager(num_blocks=7, block_size=5)
    assert bm.allocate(0, 3) == [0]
    assert bm.allocate(1, 11) == [1, 2, 3]  # ceil(11 / 5)
    bm.free(0)
    assert bm.allocate(2, 6) == [0, 4]  # a freed block is reused first: a non-contiguous table
    assert [bm.slot(2, p) for p in (0, 4, 5)] == [0, 4, 20]
    assert [bm.slot(1, p) for p in (0, 10)] == [5, 15]
    assert bm.num_free == 2
    with pytest.raises(IndexError, match="sequence 2: position 10 outside its 2 blocks"):
        bm.slot(2, 10)


def test_append_takes_a_block_exactly_at_the_boundary() -> None:
    bm = BlockManager(num_blocks=4, block_size=3)
    bm.allocate(9, 2)
    assert bm.append_token(9) == 2  # position 2 still in block 0
    assert bm.tables[9] == [0]
    assert bm.append_token(9) == 3  # position 3 opens block 1
    assert bm.tables[9] == [0, 1] and bm.lengths[9] == 4


def test_out_of_blocks_names_the_sequence_and_counts() -> None:
    bm = BlockManager(num_blocks=3, block_size=4)
    bm.allocate(0, 8)
    with pytest.raises(OutOfBlocksError, match=r"sequence 1 needs 2 blocks for 5 tokens, 1 of 3 free"):
        bm.allocate(1, 5)
    bm.allocate(1, 4)
    with pytest.raises(OutOfBlocksError, match=r"sequence 0 needs a block at token 8, 0 of 3 free"):
        bm.append_token(0)


def test_free_returns_blocks_for_reuse() -> None:
    bm = BlockManager(num_blocks=3, block_size=2)
    bm.allocate(0, 5)
    with pytest.raises(OutOfBlocksError):
        bm.allocate(1, 1)
    bm.free(0)
    assert bm.num_free == 3 and 0 not in bm.tables
    assert bm.allocate(1, 6) == [0, 1, 2]


def test_bad_use_is_an_error() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        BlockManager(0, 16)
    bm = BlockManager(2, 2)
    bm.allocate(0, 1)
    with pytest.raises(ValueError, match="sequence 0 already has blocks"):
        bm.allocate(0, 1)
    with pytest.raises(KeyError, match="sequence 5 has no blocks"):
        bm.append_token(5)
