"""The scheduler without a model: budgets, chunking, admission, preemption order, and no leaked block on any path."""

from __future__ import annotations

import random

import pytest

from engine.block_manager import BlockManager
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence, Status


def seq(sid: int, prompt_len: int, max_tokens: int, **kw: object) -> Sequence:
    return Sequence(
        sid,
        sid,
        list(range(100 + sid, 100 + sid + prompt_len)),
        prompt_len,
        SamplingParams(max_tokens=max_tokens, **kw),
        seed=sid,
    )  # type: ignore[arg-type]


def fake_token(s: Sequence) -> int:
    return 7 + len(s.token_ids) % 5  # deterministic, never a stop token unless asked


def run(sched: Scheduler, check: bool = True, limit: int = 10_000) -> list[list[tuple[int, int]]]:
    """Step to completion with fake tokens, checking the block and state-slot accounting after every step."""
    steps = []
    for _ in range(limit):
        if not sched.has_work():
            return steps
        plan = sched.schedule()
        assert plan.rows, "no progress"
        assert sum(n for _, n in plan.rows) <= sched.max_num_batched_tokens
        assert len(sched.running) <= sched.max_num_seqs
        for s, n in plan.rows:  # every row's table covers what it computes
            assert len(sched.blocks.tables[s.seq_id]) * sched.blocks.block_size >= s.num_computed + n
        steps.append([(s.seq_id, n) for s, n in plan.rows])
        sched.postprocess(plan, [fake_token(s) for s, _ in plan.rows])
        if check:
            held = {b for t in sched.blocks.tables.values() for b in t}
            assert sched.blocks.num_free + len(held) == sched.blocks.num_blocks
            slots = [s.state_slot for s in sched.running]
            if sched.num_state_slots:  # each running sequence its own slot; no one else holds one
                assert len(set(slots)) == len(slots) and all(0 <= x < sched.num_state_slots for x in slots)
                assert all(s.state_slot == -1 for s in sched.waiting)
            else:
                assert all(x == -1 for x in slots)
    raise AssertionError("did not finish")


def test_a_long_prompt_is_chunked_beside_decoding_rows() -> None:
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=4, max_num_batched_tokens=8)
    a, b = seq(0, 3, 4), seq(1, 20, 2)
    sched.add(a)
    sched.add(b)
    steps = run(sched)
    assert steps[0] == [(0, 3), (1, 5)]  # a's whole prompt, then as much of b's as the budget leaves
    assert steps[1] == [(0, 1), (1, 7)]  # a decodes beside b's next chunk
    assert steps[2] == [(0, 1), (1, 7)]
    assert steps[3] == [(0, 1), (1, 1)]  # b's last prompt token, and a's last
    assert a.output_ids and len(a.output_ids) == 4 and len(b.output_ids) == 2
    sched.blocks.check_empty()


def test_admission_waits_for_a_free_slot() -> None:
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=2, max_num_batched_tokens=64)
    seqs = [seq(i, 2, 3 - i % 2) for i in range(5)]
    for s in seqs:
        sched.add(s)
    steps = run(sched)
    assert [sid for sid, _ in steps[0]] == [0, 1]
    first_seen = {sid: next(i for i, st in enumerate(steps) if any(r[0] == sid for r in st)) for sid in range(5)}
    assert first_seen[2] > 0 and first_seen[2] <= first_seen[3] <= first_seen[4]
    assert all(len(s.output_ids) == s.params.max_tokens for s in seqs)


def test_the_latest_admitted_is_preempted_and_recomputed_first() -> None:
    sched = Scheduler(BlockManager(4, 2), max_num_seqs=4, max_num_batched_tokens=64)
    a, b = seq(0, 2, 4), seq(1, 2, 4)
    sched.add(a)
    sched.add(b)
    run(sched)
    assert b.stats["preemptions"] >= 1 and a.stats["preemptions"] == 0
    assert len(a.output_ids) == len(b.output_ids) == 4
    sched.blocks.check_empty()


def test_stop_tokens_and_eos_finish_with_stop() -> None:
    sched = Scheduler(BlockManager(16, 4), max_num_seqs=4, max_num_batched_tokens=64, eos_token_ids=frozenset({9}))
    # fake tokens are 7 + len % 5: prompt length 3 -> first token 10, then 11, 7, 8, 9
    stop, eos, ignore = seq(0, 3, 10, stop_token_ids=[11]), seq(1, 3, 10), seq(2, 3, 6, ignore_eos=True)
    for s in (stop, eos, ignore):
        sched.add(s)
    run(sched)
    assert (stop.output_ids, stop.finish_reason) == ([10, 11], "stop")
    assert (eos.output_ids, eos.finish_reason) == ([10, 11, 7, 8, 9], "stop")
    assert (len(ignore.output_ids), ignore.finish_reason) == (6, "length")


@pytest.mark.parametrize("seed", range(12))
def test_random_workloads_finish_with_every_block_free(seed: int) -> None:
    rng = random.Random(seed)
    block = rng.choice([1, 2, 4, 8])
    seqs = [seq(i, rng.randint(1, 30), rng.randint(1, 20)) for i in range(rng.randint(1, 12))]
    worst = max(-(-(len(s.token_ids) + s.params.max_tokens) // block) for s in seqs)
    blocks = BlockManager(worst + rng.randint(0, 3 * worst), block)
    sched = Scheduler(blocks, max_num_seqs=rng.randint(1, 6), max_num_batched_tokens=rng.randint(1, 40))
    for s in seqs:
        sched.add(s)
    run(sched)
    assert all(s.status is Status.FINISHED and len(s.output_ids) == s.params.max_tokens for s in seqs)
    blocks.check_empty()


def test_abort_frees_running_and_waiting_sequences() -> None:
    sched = Scheduler(BlockManager(8, 2), max_num_seqs=2, max_num_batched_tokens=4)
    for i in range(4):
        sched.add(seq(i, 5, 5))
    plan = sched.schedule()
    sched.postprocess(plan, [1] * len(plan.rows))
    assert sched.blocks.num_free < 8
    sched.abort_all()
    assert not sched.has_work()
    sched.blocks.check_empty()


@pytest.mark.parametrize("seed", range(12))
def test_random_workloads_with_state_slots_finish_with_every_slot_free(seed: int) -> None:
    rng = random.Random(100 + seed)
    block = rng.choice([1, 2, 4, 8])
    seqs = [seq(i, rng.randint(1, 30), rng.randint(1, 20)) for i in range(rng.randint(1, 12))]
    worst = max(-(-(len(s.token_ids) + s.params.max_tokens) // block) for s in seqs)
    blocks = BlockManager(worst + rng.randint(0, 3 * worst), block)
    max_seqs = rng.randint(1, 6)
    sched = Scheduler(blocks, max_seqs, rng.randint(1, 40), num_state_slots=rng.randint(1, max_seqs))
    for s in seqs:
        sched.add(s)
    run(sched)
    assert all(s.status is Status.FINISHED and s.state_slot == -1 for s in seqs)
    sched.check_empty()


def test_preemption_gives_the_state_slot_back_and_admission_waits_for_one() -> None:
    sched = Scheduler(BlockManager(4, 2), max_num_seqs=4, max_num_batched_tokens=64, num_state_slots=2)
    a, b, c = seq(0, 2, 4), seq(1, 2, 4), seq(2, 2, 1)
    for s in (a, b, c):
        sched.add(s)
    plan = sched.schedule()
    assert [(s.seq_id, s.state_slot) for s, _ in plan.rows] == [(0, 0), (1, 1)]  # c waits: two slots only
    sched.postprocess(plan, [7, 7])
    while not b.stats["preemptions"]:  # a and b grow until 4 blocks are short of both: b, the later, yields
        plan = sched.schedule()
        sched.postprocess(plan, [7] * len(plan.rows))
    assert b.status is Status.WAITING and b.state_slot == -1 and 1 in sched._free_slots
    run(sched)
    assert b.stats["preemptions"] >= 1
    sched.check_empty()


def test_check_empty_names_a_leaked_slot() -> None:
    sched = Scheduler(BlockManager(8, 2), max_num_seqs=2, max_num_batched_tokens=8, num_state_slots=2)
    s = seq(0, 2, 3)
    sched.add(s)
    sched.schedule()
    sched.blocks.free(s.seq_id)  # seeded violation: blocks freed, the slot kept
    with pytest.raises(AssertionError, match=r"leaked state slots: \[0\] held, 1 of 2 free"):
        sched.check_empty()
