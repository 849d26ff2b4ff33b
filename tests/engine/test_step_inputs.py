"""The decode step's packed input buffers: what the device views hold after a fill, padding included."""

from __future__ import annotations

import pytest
import torch

from engine.step_inputs import StepInputs


def test_fill_writes_every_input_and_pads_the_rest() -> None:
    s = StepInputs(4, 3, torch.device("cpu"))
    s.fill([11, 12], [5, 70], [37, 141], [[2], [9, 4, 6]])
    v = s.upload()
    assert v["input_ids"].tolist() == [11, 12, 0, 0]
    assert v["positions"].tolist() == [5, 70, 0, 0]
    assert v["slot_mapping"].tolist() == [37, 141, -1, -1]  # padded rows store nothing
    assert v["context_lens"].tolist() == [6, 71, 1, 1]
    assert v["block_tables"].tolist() == [[2, 0, 0], [9, 4, 6], [0, 0, 0], [0, 0, 0]]
    assert (v["input_ids"].dtype, v["context_lens"].dtype, v["block_tables"].dtype) == (
        torch.int64,
        torch.int32,
        torch.int32,
    )


def test_a_refill_leaves_nothing_of_the_previous_step() -> None:
    s = StepInputs(2, 3, torch.device("cpu"))
    s.fill([1, 2], [3, 4], [5, 6], [[7, 8, 9], [10, 11]])
    s.fill([13], [14], [15], [[16]])  # fewer rows and a shorter table: the old values must not survive
    v = s.upload()
    assert v["block_tables"].tolist() == [[16, 0, 0], [0, 0, 0]]
    assert (v["input_ids"].tolist(), v["slot_mapping"].tolist(), v["context_lens"].tolist()) == (
        [13, 0],
        [15, -1],
        [15, 1],
    )


def test_the_device_views_are_fixed_tensors() -> None:
    # a captured graph reads the same tensors every replay: fill must write in place
    s = StepInputs(1, 2, torch.device("cpu"))
    before = {k: t.data_ptr() for k, t in s.device_views.items()}
    s.fill([3], [0], [0], [[1]])
    assert {k: t.data_ptr() for k, t in s.upload().items()} == before


@pytest.mark.parametrize(
    "args, message",
    [
        (([1, 2], [0], [0, 1], [[0], [0]]), "2 tokens, 1 positions"),
        (([1, 2, 3], [0, 0, 0], [0, 1, 2], [[0], [0], [0]]), "for a padded batch of 2"),
        (([1], [0], [0], [[0, 1, 2]]), "row 0 has 3 blocks, the table holds 2"),
    ],
)
def test_bad_fills_are_named(args, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StepInputs(2, 2, torch.device("cpu")).fill(*args)


def test_a_grown_or_replaced_table_is_rewritten_and_an_unchanged_one_kept() -> None:
    s = StepInputs(3, 4, torch.device("cpu"))
    a, b, c = [5], [6, 7, 8], [9, 10]
    s.fill([1, 2, 3], [0, 0, 0], [0, 0, 0], [a, b, c])
    a.append(11)  # a's sequence took a block (BlockManager.grow extends its list)
    s.fill([1, 2, 3], [0, 0, 0], [0, 0, 0], [a, [12], b])  # row 1 a new, shorter table; row 2 another list
    assert s.upload()["block_tables"].tolist() == [[5, 11, 0, 0], [12, 0, 0, 0], [6, 7, 8, 0]]
    s.fill([1], [0], [0], [a])  # rows 1 and 2 now padding: block 0 only
    assert s.upload()["block_tables"].tolist() == [[5, 11, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    fresh = StepInputs(3, 4, torch.device("cpu"))
    fresh.fill([1], [0], [0], [list(a)])
    assert fresh.upload()["block_tables"].tolist() == s.upload()["block_tables"].tolist()


def test_the_state_slots_pad_with_the_scratch_slot() -> None:
    s = StepInputs(3, 2, torch.device("cpu"), state_scratch=9)
    s.fill([1, 2], [0, 4], [0, 4], [[0], [1]], [3, 0])
    assert s.upload()["state_index"].tolist() == [3, 0, 9]
    with pytest.raises(ValueError, match="2 rows need their 2 recurrent-state slots"):
        s.fill([1, 2], [0, 4], [0, 4], [[0], [1]])
