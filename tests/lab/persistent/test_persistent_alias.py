"""A persistent step whose layers reuse one scratch tensor (`build_step(..., shared=...)`, what the step's arm does
with the scores): lab/persistent/check.py proves each rewrite by versions (read after write, write after write,
write after read), shown on hand-made three-task tables, each rule failing on its seeded race and passing once the
missing wait is added; a three-layer step sharing its scores, or every scratch buffer, passes the check and is
bitwise the engine's layers in every interleaving drawn; the model step the arm launches likewise; and a dropped
cross-layer wait is reported as a write-after-read on the shared scores, which the unshared step does not have."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.cuda.persistent_schedule import Kind, LayerShape, Region, Schedule, build_model_step, build_step
from lab.persistent import case as C
from lab.persistent.__main__ import LENS, TILES
from lab.persistent.check import check
from lab.persistent.sim import simulate

TINY = LayerShape(8, 1, 1, 8, 8, (1,), qkv_cols=8)
BUF = Region("buf", (0, 1), (0, 8))
SCRATCH = frozenset({"res1", "q", "k", "v", "q_rot", "scores", "attn", "res2", "act", "mlp", "out"})


def _table(*tasks: tuple[Kind, list[int], str]) -> Schedule:
    """Tasks in queue order, each (kind, the tasks it waits for, 'r' reads buf / 'w' writes it), each its own counter."""
    sch = Schedule(TINY)
    for kind, waits, access in tasks:
        done = sch.counter(f"c{len(sch.tasks)}")
        reads, writes = ([BUF], []) if access == "r" else ([], [BUF])
        sch.add(kind, (0,), [(w, 1) for w in waits], done, reads, writes)
    return sch


def test_a_rewrite_must_wait_for_the_readers_of_the_version_it_replaces():
    race = _table((Kind.QKV, [], "w"), (Kind.SCORES, [0], "r"), (Kind.QKV, [0], "w"))
    assert check(race) == ["task 2 (QKV) writes buf that task 1 (SCORES) reads, without waiting for it"]
    assert check(_table((Kind.QKV, [], "w"), (Kind.SCORES, [0], "r"), (Kind.QKV, [1], "w"))) == []


def test_a_rewrite_must_wait_for_the_write_it_replaces():
    race = _table((Kind.QKV, [], "w"), (Kind.GATE_UP, [], "w"))
    assert check(race) == ["task 1 (GATE_UP) writes buf over task 0 (QKV)'s write without waiting for it"]
    assert check(_table((Kind.QKV, [], "w"), (Kind.GATE_UP, [0], "w"))) == []


def test_a_read_must_wait_for_the_version_it_reads():
    stale = _table((Kind.QKV, [], "w"), (Kind.GATE_UP, [0], "w"), (Kind.SCORES, [0], "r"))
    assert check(stale) == ["task 2 (SCORES) reads buf written by task 1 (GATE_UP) without waiting for it"]
    assert check(_table((Kind.QKV, [], "w"), (Kind.GATE_UP, [0], "w"), (Kind.SCORES, [1], "r"))) == []


@pytest.mark.parametrize("shared", [frozenset({"scores"}), SCRATCH], ids=["scores", "every-scratch"])
def test_a_step_sharing_its_scratch_is_proven_and_bitwise_the_engines_layers(shared):
    case = C.make(C.SMALL, LENS[8], seed=9, layers=3)
    sch = build_step(case.shape(False, **TILES), 3, shared)
    names = sch.buffers()
    assert "scores" in names and not any(n.endswith(".scores") for n in names)
    assert check(sch) == []
    for seed, sms in enumerate((3, 16, 64)):
        ref_step, sim_step = case.fresh_step(), case.fresh_step()
        ref = C.reference(case, ref_step)  # keyed L2.mlp, L2.res2, L2.out
        run = simulate(sch, case.weights, sim_step, sms=sms, seed=seed)
        for key, want in ref.items():
            assert torch.equal(run.buffers[sch.name(2, key.split(".")[-1])], want), (key, seed)
        assert all(torch.equal(a, b) for x, y in zip(sim_step.caches(), ref_step.caches()) for a, b in zip(x, y))


def test_the_step_the_arm_launches_shares_its_scores_soundly():
    """`build_model_step` without a head, the layers sharing the scores: the persistent step arm's table."""
    case = C.make_model(C.SMALL, LENS[8], seed=3, layers=3, vocab=64)
    sch = build_model_step(case.shape(True, **TILES), 3, 64, 0, frozenset({"scores"}))
    assert check(sch) == [] and not any(t.kind == Kind.HEAD for t in sch.tasks)
    for seed, sms in enumerate((5, 32)):
        ref_step, sim_step = case.fresh_step(True), case.fresh_step(True)
        want = C.reference_model(case, ref_step)["final"]
        run = simulate(sch, case.weights, sim_step, sms=sms, seed=seed, model=case.head)
        assert torch.equal(run.buffers["final"], want), seed


def test_a_dropped_cross_layer_wait_races_on_the_shared_scores_only_when_shared():
    case = C.make(C.SMALL, LENS[8], seed=9, layers=2)

    def dropped(shared: frozenset[str]) -> list[str]:
        sch = build_step(case.shape(False, **TILES), 2, shared)
        tasks = list(sch.tasks)
        for t in tasks:  # layer 1's norms and its tiles no longer wait for layer 0: every task of layer 1 may start
            if t.layer == 1:
                tasks[t.index] = replace(t, waits=tuple(w for w in t.waits if not sch.counters[w[0]].startswith("L0.")))
        return check(replace(sch, tasks=tasks))

    war = [p for p in dropped(frozenset({"scores"})) if "writes scores that" in p]
    assert war and all(p.endswith("reads, without waiting for it") for p in war)
    assert not [p for p in dropped(frozenset()) if "that task" in p and "reads, without" in p]


def test_a_layer_that_misses_cells_of_a_shared_buffer_reads_stale_values_and_is_caught():
    """Layer 1's first score split writing nothing (its region emptied): its softmax would read layer 0's logits in
    those cells. Shared, the older version is no cover; unshared, the cells are plainly unwritten."""
    case = C.make(C.SMALL, LENS[1], seed=9, layers=2)
    for shared in (frozenset({"scores"}), frozenset()):
        sch = build_step(case.shape(False, **TILES), 2, shared)
        tasks = list(sch.tasks)
        split = next(t for t in tasks if t.kind == Kind.SCORES and t.layer == 1)
        empty = Region(split.writes[0].buffer, split.writes[0].rows, (0, 0))
        tasks[split.index] = replace(split, writes=(empty,))
        problems = check(replace(sch, tasks=tasks))
        softmax = next(t.index for t in tasks if t.kind == Kind.ATTN_OUT and t.layer == 1)
        assert f"task {softmax} (ATTN_OUT) reads cells of {split.writes[0].buffer} that no task writes" in problems
