"""The persistent decode layer's schedule (engine/cuda/persistent_schedule.py) run on virtual SMs (lab/persistent/sim.py): every
interleaving drawn is bitwise the engine's own Qwen3 layer in fp32 (its output, residual and K/V cache), at batch 1
and 8, as layer 0 and as a later layer, with a sliding window and at Qwen3-0.6B's shapes; a dropped counter wait is
caught statically and as a read-before-write or a wrong result; the time model's arithmetic. CPU only."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.cuda.persistent_schedule import Kind, Schedule, build, build_step, key_range
from lab.persistent import case as C
from lab.persistent.check import check
from lab.persistent.model import Machine, estimate, qwen3_0_6b, split_pv
from lab.persistent.sim import Deadlock, ReadBeforeWrite, simulate

TILES = dict(
    qkv_cols=32, o_cols=32, gu_cols=64, down_cols=48, key_splits=5
)  # odd tails: 640 = 10 x 64, 256 % 48; empty splits at context 1
LENS = {1: [37], 8: [37, 5, 64, 100, 1, 17, 33, 80]}  # block 16: one key, block edges, several chunks


def _equal_to_engine(case: C.Case, sch: Schedule, first: bool, sms: int, seed: int) -> dict[str, bool]:
    ref_step, sim_step = case.fresh_step(first), case.fresh_step(first)
    ref = C.reference(case, ref_step)
    run = simulate(sch, case.weights, sim_step, sms=sms, seed=seed)
    same = {k: torch.equal(run.buffers[k], ref[k]) for k in ref}
    same["k_cache"] = torch.equal(sim_step.k_cache, ref_step.k_cache)
    same["v_cache"] = torch.equal(sim_step.v_cache, ref_step.v_cache)
    return same


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("first", [False, True])
def test_every_interleaving_is_bitwise_the_engines_layer(batch: int, first: bool):
    case = C.make(C.SMALL, LENS[batch], seed=batch)
    sch = build(case.shape(first, **TILES))
    assert check(sch) == []
    orders = set()
    for seed, sms in enumerate((1, 3, 7, 16, 5, 64)):
        same = _equal_to_engine(case, sch, first, sms, seed)
        assert same == dict.fromkeys(("mlp", "res2", "out", "k_cache", "v_cache"), True), (seed, sms)
        orders.add(tuple(simulate(sch, case.weights, case.fresh_step(first), sms=sms, seed=seed).order))
    assert len(orders) == 6  # six different interleavings, not one order six times


def test_interleavings_overlap_tasks_and_finish_out_of_queue_order():
    case = C.make(C.SMALL, LENS[8], seed=3)
    sch = build(case.shape(False, **TILES))
    run = simulate(sch, case.weights, case.fresh_step(), sms=16, seed=0)
    assert run.max_overlap > 8 and run.order != sorted(run.order) and sorted(run.order) == list(range(len(sch.tasks)))
    assert simulate(sch, case.weights, case.fresh_step(), sms=1, seed=0).order == list(range(len(sch.tasks)))


def test_qwen3_0_6b_layer_and_a_sliding_window_are_bitwise_too():
    case = C.make(C.QWEN3_0_6B, [300], seed=4)
    sch = build(replace(qwen3_0_6b(1, 300), context_lens=(300,)))
    assert check(sch) == [] and len(sch.tasks) == 128 + 8 * 4 + 8 * 4 + 128 + 96 + 128
    assert all(_equal_to_engine(case, sch, False, 132, 0).values())
    windowed = C.make(C.SMALL, [37, 90], seed=5, window=16)
    assert windowed.weights[0].window == 16
    wsch = build(windowed.shape(False, **TILES))
    assert wsch.shape.window == 16 and check(wsch) == []
    assert all(_equal_to_engine(windowed, wsch, False, 4, 1).values())


@pytest.mark.parametrize("slices", [2, 4, 16])
def test_pv_slices_write_each_heads_columns_once_and_stay_bitwise(slices: int):
    """ATTN_OUT split over head_dim (`pv_slices`): the slices of a (sequence, KV head) partition each head's columns,
    o_proj waits for all of them, every interleaving is still the engine's layer; a table where one slice writes
    nothing is caught statically (o_proj reads attention cells no task writes)."""
    case = C.make(C.SMALL, LENS[8], seed=6)
    sch = build(case.shape(False, **{**TILES, "pv_slices": slices}))
    assert check(sch) == []
    d, g = 128, 4
    for seq, kv in ((0, 0), (7, 1)):
        tasks = [t for t in sch.tasks if t.kind == Kind.ATTN_OUT and t.args[:2] == (seq, kv)]
        assert [t.args[2:] for t in tasks] == [(p, slices) for p in range(slices)]
        cols = sorted(c for t in tasks for r in t.writes for c in range(*r.cols))
        assert cols == list(range(kv * g * d, (kv + 1) * g * d))  # every column of the group's heads, once
    o_proj = next(t for t in sch.tasks if t.kind == Kind.O_PROJ)
    assert o_proj.waits[0][1] == 8 * 2 * slices
    for seed, sms in enumerate((3, 16)):
        assert all(_equal_to_engine(case, sch, False, sms, seed).values()), (seed, sms)
    last = next(t.index for t in sch.tasks if t.kind == Kind.ATTN_OUT and t.args[2] == slices - 1)
    holed = replace(
        sch, tasks=[replace(t, writes=()) if t.index == last else t for t in sch.tasks]
    )  # it writes nothing
    assert any("(O_PROJ) reads cells of attn that no task writes" in p for p in check(holed))


def test_key_splits_cover_the_allowed_keys_once_and_the_table_holds_no_context_length():
    for n, window, splits in [(1, None, 5), (37, None, 5), (300, 16, 4), (1000, 256, 7), (5, 8, 3), (4096, None, 16)]:
        ranges = [key_range(n, window, i, splits) for i in range(splits)]
        begin = n - window if window and n > window else 0
        assert ranges[0][0] == begin and ranges[-1][1] == n
        assert all(a[1] == b[0] and a[0] <= a[1] for a, b in zip(ranges, ranges[1:])), ranges
        assert max(k1 - k0 for k0, k1 in ranges) - min(k1 - k0 for k0, k1 in ranges) <= 1  # even shares
    short, long = (replace(qwen3_0_6b(8, 1024), context_lens=lens) for lens in ((1,) * 8, (5, 4000, 77, 1, 2, 3, 9, 1)))
    assert check(build(long)) == [] and build(short).encode() == build(long).encode()  # one table, any lengths
    assert build(replace(short, window=100)).encode() == build(short).encode()
    assert build(replace(short, key_splits=2)).encode() != build(short).encode()


def _drop_wait(sch: Schedule, kind: Kind) -> tuple[Schedule, int]:
    """The first task of `kind` with its counter wait deleted: a dependency bug."""
    index = next(t.index for t in sch.tasks if t.kind == kind)
    tasks = list(sch.tasks)
    tasks[index] = replace(tasks[index], waits=())
    return Schedule(sch.shape, tasks, sch.counters, sch.expected), index


def test_a_dropped_wait_is_caught_statically_and_by_the_interleavings():
    case = C.make(C.SMALL, LENS[8], seed=6)
    sch = build(case.shape(False, **TILES))
    bad, index = _drop_wait(sch, Kind.O_PROJ)
    problems = check(bad)
    assert (
        problems[0]
        == f"task {index} (O_PROJ) reads attn written by task {index - 16} (ATTN_OUT) without waiting for it"
    )
    # every attention task it no longer waits for, and the first q/k/v tile, whose residual sum it adds (ordered
    # before it only through the attention it skipped), each named
    assert sum("reads attn written by" in p and "(ATTN_OUT)" in p for p in problems) == 16
    assert sum("reads res1 written by task 0 (QKV)" in p for p in problems) == 1 and len(problems) == 17
    caught = []
    for seed in range(10):
        try:
            simulate(bad, case.weights, case.fresh_step(), sms=16, seed=seed)
        except ReadBeforeWrite as exc:
            caught.append(seed)
            assert str(exc).startswith(f"seed {seed}: task {index} (O_PROJ (0, 32)) read attn[0:8, 0:1024] before")
    assert caught, "no interleaving ran o_proj before attention finished"
    # without the read check the same interleaving computes from the NaN of unwritten cells: a wrong layer
    same = _equal_to_engine_unchecked(case, bad, caught[0])
    assert same["mlp"] is False and same["out"] is False


def _equal_to_engine_unchecked(case: C.Case, sch: Schedule, seed: int) -> dict[str, bool]:
    ref = C.reference(case, case.fresh_step())
    run = simulate(sch, case.weights, case.fresh_step(), sms=16, seed=seed, check_reads=False)
    return {k: torch.equal(run.buffers[k], ref[k]) for k in ref}


def test_a_wait_no_task_can_satisfy_is_caught_statically_and_deadlocks():
    case = C.make(C.SMALL, LENS[1], seed=7)
    sch = build(case.shape(False, **TILES))
    index = next(t.index for t in sch.tasks if t.kind == Kind.GATE_UP)
    (counter, target), tasks = sch.tasks[index].waits[0], list(sch.tasks)
    tasks[index] = replace(tasks[index], waits=((counter, target + 1),))
    bad = Schedule(sch.shape, tasks, sch.counters, sch.expected)
    assert check(bad) == [f"task {index} (GATE_UP) waits for o_proj >= {target + 1}, but only {target} tasks signal it"]
    with pytest.raises(Deadlock, match="every SM waits"):
        simulate(bad, case.weights, case.fresh_step(), sms=4, seed=0)


def test_the_table_a_kernel_reads():
    sch = build(C.make(C.SMALL, LENS[1], seed=8).shape(False, **TILES))
    rows = sch.encode()
    assert len(rows) == len(sch.tasks) and {len(r) for r in rows} == {11}
    # layer 0, q columns 0-32 of the input's norm; no wait (the input is written before the table); signals qkv[0]
    assert rows[0] == [int(Kind.QKV), 0, 0, 0, 32, -1, -1, -1, -1, -1, 0]
    assert sch.tasks[0].writes[1].buffer == "res1" and all(len(t.writes) == 1 for t in sch.tasks[1:48])
    # the first score split of (sequence 0, KV head 0) of 5: waits for its group's 24 q/k/v tiles (4 q heads, k, v;
    # 4 tiles each), signals scores[0,0] (the counters after qkv[0] and qkv[1])
    score = next(r for r in rows if r[0] == Kind.SCORES)
    assert score == [int(Kind.SCORES), 0, 0, 0, 0, 5, 0, 24, -1, -1, 2]


def test_the_time_model_counts_the_floor_and_orders_the_arms():
    sch = build(qwen3_0_6b(1, 1024))
    m = Machine()
    one = estimate(sch, m, 1)
    params = 1024 * (2048 + 1024 + 1024) + 2048 * 1024 + 3 * 1024 * 3072  # q, k, v, o, gate, up, down
    assert one.floor_s == pytest.approx(params * 2 / 4.2e12)
    assert one.by_kind["QKV"][:3] == (128, 4096 * 1024 * 2, 0) and one.by_kind["SCORES"][2] == 1024 * 8 * 128 * 2
    step = estimate(sch, m, 4)
    barrier = estimate(sch, replace(m, barrier_s=3e-6), 4, barriers=True)
    assert step.critical_s <= step.makespan_s and step.floor_s == pytest.approx(4 * one.floor_s)
    assert barrier.fraction < step.fraction < 1.0
    per_layer = estimate(sch, replace(m, barrier_s=3e-6), 4, launch_per_layer=True)  # the decode_layer arm's launches
    assert barrier.fraction < per_layer.fraction < step.fraction and per_layer.floor_s == step.floor_s
    b32 = estimate(build(qwen3_0_6b(32, 1024)), m, 1)
    assert b32.floor_s == pytest.approx((params * 2 + 32 * 1024 * 8 * 128 * 2 * 2) / 4.2e12)  # K/V once at b > 1


def test_the_command_line_reports_equality_and_the_caught_bug(capsys):
    from lab.persistent.__main__ import main

    assert main(["--seeds", "3", "--batch", "1", "--sms", "5", "--layers", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "batch 1 layer 1+: 90 tasks, static check 0 problems; 3/3 interleavings bitwise equal to the engine's layer"
    )
    assert lines[2] == (
        "step of 2 layers at batch 8: 432 tasks, static check 0 problems; 3/3 interleavings bitwise equal to the "
        "engine's layers"
    )
    # o_proj reads the attention of 64 P.V slices (8 sequences x 2 KV heads x 4), each writing 4 heads' columns,
    # and the residual sum of the first q/k/v tile, ordered before it only through them: 257 reads named
    assert lines[3].startswith(
        "seeded bug (task 192, o_proj, without its wait on attention): static check 257 problems"
    )
    assert lines[-1] == "persistent layer: PASS"


def test_a_split_pv_spreads_the_same_bytes_over_more_tasks_and_helps_batch_1_in_the_model():
    sch = build(replace(qwen3_0_6b(1, 1024), pv_slices=1))  # whole heads' P.V, split over keys instead
    split = split_pv(sch, 8)
    assert check(split) == [] and len(split.tasks) == len(sch.tasks) + 8 * 8  # 8 ranges and a combine per head
    m = Machine()
    plain, spread = estimate(sch, m, 2), estimate(split, m, 2)
    assert spread.by_kind["ATTN_OUT"][2] == plain.by_kind["ATTN_OUT"][2] == 2 * 1024 * 8 * 128 * 2  # V once a layer
    assert spread.floor_s == plain.floor_s and spread.fraction > plain.fraction


def test_a_step_of_three_layers_is_bitwise_the_engines_layers_and_its_cross_layer_wait_matters():
    case = C.make(C.SMALL, LENS[8], seed=9, layers=3)
    sch = build_step(case.shape(False, **TILES), 3)
    assert check(sch) == [] and len(sch.tasks) == 3 * len(build(case.shape(False, **TILES)).tasks)
    assert sch.encode()[len(sch.tasks) // 3][:3] == [int(Kind.QKV), 1, 0]  # layer 1's first task: its first q tile
    for seed, sms in enumerate((3, 16, 64)):
        ref_step, sim_step = case.fresh_step(), case.fresh_step()
        ref = C.reference(case, ref_step)
        run = simulate(sch, case.weights, sim_step, sms=sms, seed=seed)
        assert {k: torch.equal(run.buffers[k], ref[k]) for k in ref} == dict.fromkeys(ref, True)
        assert all(torch.equal(a, b) for x, y in zip(sim_step.caches(), ref_step.caches()) for a, b in zip(x, y))
    # layer 1's first q/k/v tile without its wait on layer 0's down tiles
    first = next(t.index for t in sch.tasks if t.kind == Kind.QKV and t.layer == 1)
    tasks = list(sch.tasks)
    tasks[first] = replace(tasks[first], waits=())
    bad = Schedule(sch.shape, tasks, sch.counters, sch.expected, layers=3)
    assert check(bad)[0].startswith(f"task {first} (QKV) reads L0.mlp written by task ")
    caught = 0
    for seed in range(6):
        try:
            simulate(bad, case.weights, case.fresh_step(), sms=64, seed=seed)
        except ReadBeforeWrite as exc:
            caught += 1
            assert f"task {first} (QKV (0, 0, 32)) read L0.mlp[0:8, 0:256] before it was written" in str(exc)
    assert caught
