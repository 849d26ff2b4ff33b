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


def test_a_computed_full_block_is_shared_by_a_prompt_with_the_same_prefix() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = list(range(10))  # blocks [0..3], [4..7] full, [8, 9] partial
    assert bm.allocate_prompt(0, a, 10) == 0
    bm.mark_computed(0, a, 10)
    b = a[:8] + [50, 51, 52]
    assert bm.allocate_prompt(1, b, 3) == 8  # both full blocks from the cache
    assert bm.tables[1][:2] == bm.tables[0][:2] and bm.tables[1][2] not in bm.tables[0]
    c = a[:4] + [60] * 4 + [1]  # same first block, different second: the chain stops at the first miss
    assert bm.allocate_prompt(2, c, 5) == 4
    bm.free(0)
    bm.free(1)
    bm.free(2)
    assert bm.num_free == 8
    # freed but still registered: a later request hits it, and it is taken back from the free pool
    assert bm.allocate_prompt(3, a[:8] + [1], 1) == 8
    assert bm.num_free == 5
    bm.free(3)
    bm.check_empty()


def test_the_last_token_is_never_served_from_the_cache() -> None:
    bm = BlockManager(num_blocks=4, block_size=4)
    a = list(range(8))
    bm.allocate_prompt(0, a, 8)
    bm.mark_computed(0, a, 8)
    assert bm.allocate_prompt(1, a, 4) == 4  # the second block holds the last token: recomputed


def test_registered_free_blocks_are_evicted_only_when_no_plain_block_is_free() -> None:
    bm = BlockManager(num_blocks=3, block_size=2)
    a = [1, 2, 3]
    bm.allocate_prompt(0, a, 3)
    bm.mark_computed(0, a, 3)
    bm.free(0)  # block 0 registered, block 1 plain
    assert bm.allocate(1, 4) == [1, 2]  # plain blocks first: the cached one survives
    bm.free(1)
    assert bm.allocate_prompt(2, [1, 2, 9], 1) == 2 and bm.tables[2][0] == 0
    bm.free(2)
    assert sorted(bm.allocate(3, 6)) == [0, 1, 2]  # now it is evicted, and its registration with it
    bm.free(3)
    assert bm.allocate_prompt(4, [1, 2, 9], 3) == 0


def test_prefix_caching_off_shares_nothing() -> None:
    bm = BlockManager(num_blocks=8, block_size=2)
    bm.prefix_caching = False
    bm.allocate_prompt(0, [1, 2, 3], 3)
    bm.mark_computed(0, [1, 2, 3], 3)
    assert bm.allocate_prompt(1, [1, 2, 3], 3) == 0


def test_a_short_pool_changes_nothing() -> None:
    bm = BlockManager(num_blocks=2, block_size=2)
    assert bm.allocate_prompt(0, [1, 2, 3, 4, 5], 5) is None
    assert bm.num_free == 2 and 0 not in bm.tables
    bm.allocate_prompt(0, [1, 2], 2)
    assert not bm.grow(0, 6) and bm.tables[0] == [0]
    with pytest.raises(AssertionError, match="leaked blocks"):
        bm.check_empty()
