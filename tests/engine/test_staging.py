"""A step's staged inputs: what the device views hold after a decode or a mixed step is staged and uploaded,
padding included, and that the views change only through the one copy."""

from __future__ import annotations

import pytest
import torch

from engine.penalties import RowProcessors
from engine.sampler import NO_EXTRAS, StepExtras
from engine.staging import StepRow, StepStaging

CPU = torch.device("cpu")
VOCAB = 50


def rows(tokens: list[int], starts: list[int], tables: list[list[int]], **kw: object) -> list[StepRow]:
    return [StepRow([t], s, b, **kw) for t, s, b in zip(tokens, starts, tables)]  # type: ignore[arg-type]


def decode(s: StepStaging, rs: list[StepRow], padded: int, max_blocks: int = 3, bs: int = 4, **kw) -> dict:
    s.stage_decode(rs, padded, bs, max_blocks, StepExtras.of(rs), VOCAB, **kw)
    return s.upload()


def test_a_decode_step_writes_every_input_and_pads_the_rest() -> None:
    v = decode(StepStaging(CPU), rows([11, 12], [5, 10], [[2, 3], [9, 4, 6]]), 4)
    assert v["input_ids"].tolist() == [11, 12, 0, 0]
    assert v["positions"].tolist() == [5, 10, 0, 0]
    assert v["slot_mapping"].tolist() == [3 * 4 + 1, 6 * 4 + 2, -1, -1]  # padded rows store nothing
    assert v["context_lens"].tolist() == [6, 11, 1, 1]
    assert v["block_tables"].tolist() == [[2, 3, 0], [9, 4, 6], [0, 0, 0], [0, 0, 0]]
    assert v["temperature"].tolist() == [0.0] * 4  # greedy rows and greedy padding
    assert [t.dtype for t in (v["input_ids"], v["context_lens"], v["block_tables"], v["top_p"])] == [
        torch.int64,
        torch.int32,
        torch.int32,
        torch.float32,
    ]
    assert "state_index" not in v and "proc_tokens" not in v


def test_the_sampling_inputs_pad_with_greedy_rows() -> None:
    rs = rows([1, 2], [0, 0], [[0], [1]])
    for r, (t, k, p, seed, step) in zip(rs, [(0.5, 3, 0.9, 2**64 - 1, 0), (1.0, -1, 1.0, 7, 5)]):
        r.temperature, r.top_k, r.top_p, r.seed, r.step = t, k, p, seed, step
    v = decode(StepStaging(CPU), rs, 4)
    assert v["temperature"].tolist() == [0.5, 1.0, 0.0, 0.0]
    assert v["top_k"].tolist() == [3, -1, -1, -1]
    assert v["top_p"].tolist() == pytest.approx([0.9, 1.0, 1.0, 1.0])
    assert v["seeds"].tolist() == [-1, 7, 0, 0]  # a seed's low 64 bits, as a signed int64
    assert v["steps"].tolist() == [0, 5, 0, 0]


def test_the_processors_are_staged_with_the_step_and_padded_neutral() -> None:
    procs = RowProcessors(presence=0.5, repetition=1.5, min_p=0.1, prompt=[4, 5], output=[7, 7], banned=frozenset({9}))
    rs = rows([1, 2], [0, 0], [[0], [1]])
    rs[0].processors = procs
    extras = StepExtras.of(rs)
    assert (extras.proc_width, extras.penalize) == (8, True)  # 2 output + 2 prompt + 1 banned: 8 columns
    v = decode(StepStaging(CPU), rs, 3)
    assert v["proc_tokens"].tolist()[0] == [7, 7, 4, 5, 9, VOCAB, VOCAB, VOCAB]
    assert v["proc_tokens"].tolist()[1:] == [[VOCAB] * 8] * 2 and v["proc_weights"].tolist()[1:] == [[0] * 8] * 2
    assert v["proc_weights"].tolist()[0][:5] == [1, 1, 1 << 20, 1 << 20, 1 << 40]
    assert (v["proc_presence"].tolist(), v["proc_repetition"].tolist()) == ([0.5, 0.0, 0.0], [1.5, 1.0, 1.0])
    assert v["proc_min_p"].tolist() == pytest.approx([0.1, 0.0, 0.0])


def test_a_restage_leaves_nothing_of_the_previous_step() -> None:
    s = StepStaging(CPU)
    decode(s, rows([1, 2], [3, 4], [[7, 8, 9], [10, 11]]), 2)
    v = decode(s, rows([13], [1], [[16]]), 2)  # fewer rows and a shorter table: the old values must not survive
    assert v["block_tables"].tolist() == [[16, 0, 0], [0, 0, 0]]
    assert (v["input_ids"].tolist(), v["slot_mapping"].tolist(), v["context_lens"].tolist()) == (
        [13, 0],
        [16 * 4 + 1, -1],
        [2, 1],
    )


def test_the_device_views_change_only_through_the_upload() -> None:
    # a captured graph reads the same tensors every replay, and reads what the last upload sent: the CPU
    # staging keeps a device buffer of its own, so a host write the step would miss shows here
    s = StepStaging(CPU)
    v = decode(s, rows([3], [0], [[1]]), 1, max_blocks=2)
    before = {k: t.data_ptr() for k, t in v.items()}
    s.stage_decode(rows([5], [1], [[1]]), 1, 4, 2, NO_EXTRAS, VOCAB)
    s.set_tokens([6])
    assert v["input_ids"].tolist() == [3] and v["positions"].tolist() == [0]  # staged, not sent
    after = s.upload()
    assert {k: t.data_ptr() for k, t in after.items()} == before
    assert (after["input_ids"].tolist(), after["positions"].tolist()) == ([6], [1])


def test_bad_steps_are_named() -> None:
    with pytest.raises(ValueError, match="3 rows for a padded batch of 2"):
        decode(StepStaging(CPU), rows([1, 2, 3], [0, 0, 0], [[0], [0], [0]]), 2)
    with pytest.raises(ValueError, match="row 0 has 3 blocks, the table holds 2"):
        decode(StepStaging(CPU), rows([1], [0], [[0, 1, 2]]), 2, max_blocks=2)


def test_a_grown_or_replaced_table_is_rewritten_and_an_unchanged_one_kept() -> None:
    s = StepStaging(CPU)
    a, b, c = [5], [6, 7, 8], [9, 10]
    decode(s, rows([1, 2, 3], [0, 0, 0], [a, b, c]), 3, max_blocks=4)
    a.append(11)  # a's sequence took a block (BlockManager.grow extends its list)
    v = decode(s, rows([1, 2, 3], [0, 0, 0], [a, [12], b]), 3, max_blocks=4)  # row 1 new and shorter, row 2 moved
    assert v["block_tables"].tolist() == [[5, 11, 0, 0], [12, 0, 0, 0], [6, 7, 8, 0]]
    v = decode(s, rows([1], [0], [a]), 3, max_blocks=4)  # rows 1 and 2 now padding: block 0 only
    assert v["block_tables"].tolist() == [[5, 11, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    fresh = decode(StepStaging(CPU), rows([1], [0], [list(a)]), 3, max_blocks=4)
    assert fresh["block_tables"].tolist() == v["block_tables"].tolist()


def test_the_state_slots_pad_with_the_scratch_slot_and_the_fresh_ones_are_reset() -> None:
    s = StepStaging(CPU)
    rs = rows([1, 2], [0, 4], [[0], [1, 2]])
    rs[0].state_slot, rs[1].state_slot = 3, 0
    v = decode(s, rs, 3, state_scratch=9)
    assert v["state_index"].tolist() == [3, 0, 9]
    assert (s.resets, v["reset_slots"].tolist()) == (1, [3, 9, 9])  # row 0 starts at token 0: its slot is zeroed
    rs[0].start = 1
    assert (decode(s, rs, 3, state_scratch=9)["reset_slots"].tolist(), s.resets) == ([9, 9, 9], 0)


def test_a_mixed_step_stages_every_token_and_the_chunks_lengths() -> None:
    s = StepStaging(CPU)
    rs = [StepRow([40], 6, [2, 3], state_slot=1), StepRow([7, 8, 9], 0, [5], state_slot=0),
          StepRow([1, 2], 4, [6, 4], temperature=0.5, state_slot=2)]  # fmt: skip
    s.stage_mixed(rs, 1, 4, NO_EXTRAS, VOCAB, state_scratch=9)
    v = s.upload()
    assert v["input_ids"].tolist() == [40, 7, 8, 9, 1, 2]
    assert v["positions"].tolist() == [6, 0, 1, 2, 4, 5]
    assert v["slot_mapping"].tolist() == [3 * 4 + 2, 20, 21, 22, 4 * 4 + 0, 4 * 4 + 1]
    assert v["last"].tolist() == [0, 3, 5]  # each row's last token: the one its next token is sampled from
    assert v["context_lens"].tolist() == [7]  # the decode row's
    assert v["device_lens"].tolist() == [[3, 2], [0, 4]]  # the chunks' lengths, then their cached prefixes
    assert v["block_tables"].tolist() == [[2, 3], [5, 0], [6, 4]]
    assert v["state_index"].tolist() == [1]  # the decode row's state slot; the chunks' go by list
    assert (s.resets, v["reset_slots"].tolist()) == (1, [0, 9, 9])  # the chunk at token 0 starts from zeros
    assert v["temperature"].tolist() == [0.0, 0.0, 0.5]
    # the next mixed step, of other sizes, is laid out anew in the same staging
    s.stage_mixed([StepRow([3, 4], 0, [1])], 0, 4, NO_EXTRAS, VOCAB)
    v = s.upload()
    assert (v["input_ids"].tolist(), v["block_tables"].tolist(), v["context_lens"].tolist()) == ([3, 4], [[1]], [])


@pytest.mark.gpu
def test_the_pinned_copy_to_a_cuda_device_sends_what_the_cpu_staging_holds() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the pinned staging and its asynchronous copy need one")
    cuda, cpu = StepStaging(torch.device("cuda")), StepStaging(CPU)
    procs = RowProcessors(frequency=0.3, min_p=0.2, output=[4, 4, 6])
    for step in range(3):  # the same stagings restaged: each waits for its last copy before rewriting the host
        rs = rows([1 + step, 2], [step, 5], [[0, 1], [3, 2]], temperature=0.5, seed=step)
        rs[1].processors = procs
        got, want = decode(cuda, rs, 4, state_scratch=7), decode(cpu, rs, 4, state_scratch=7)
        assert {k: t.cpu().tolist() for k, t in got.items()} == {k: t.tolist() for k, t in want.items()}
    mixed = [StepRow([9], 3, [1]), StepRow([5, 6, 7], 0, [2])]
    cuda.stage_mixed(mixed, 1, 4, NO_EXTRAS, VOCAB)
    cpu.stage_mixed(mixed, 1, 4, NO_EXTRAS, VOCAB)
    got, want = cuda.upload(), cpu.upload()
    assert {k: t.cpu().tolist() for k, t in got.items()} == {k: t.tolist() for k, t in want.items()}
