"""The persistent launch's trace read back (lab/persistent/trace.py): the summary of hand-made traces of a real table
(two layers of a small Qwen3 shape with the model's ends) holds its accounting (run, wait and idle block-time add to
the span's; kinds' task counts and weight bytes are the table's; a layer's pace), and a trace that does not describe
a whole launch is refused with the task named. The CLI's argument errors, and its skip without CUDA. The trace as
the kernel fills it is tested on the GPU (tests/engine/cuda/test_persistent.py)."""

from __future__ import annotations

import pytest
import torch

from engine.cuda import persistent
from engine.cuda.persistent_schedule import Kind
from lab.persistent import trace as T

SHAPE = persistent.decode_shape(1, 256, 8, 2, 128, 640, True, None)
SCH = persistent.schedule_for(SHAPE, 2, 64)


def serial(run_ns: int = 50, gap_ns: int = 0, staged_ns: int = 20) -> list[list[int]]:
    """Every task on one SM, back to back in queue order: taken, met `gap_ns` later, its input staged `staged_ns`
    after that (GEMV tiles, score splits and P.V slices; the kernel leaves 0 for the others), signalled `run_ns` after
    the wait met."""
    marks = {Kind.QKV, Kind.SCORES, Kind.ATTN_OUT, Kind.O_PROJ, Kind.GATE_UP, Kind.DOWN, Kind.HEAD}
    rows, t = [], 1_000
    for task in SCH.tasks:
        met = t + gap_ns
        rows.append([0, t, met, met + staged_ns if task.kind in marks else 0, met + run_ns])
        t += gap_ns + run_ns
    return rows


def test_one_sm_running_back_to_back_is_all_run_time():
    s = T.summarize(serial(), SCH)
    n = len(SCH.tasks)
    assert (s.tasks, s.blocks) == (n, 1)
    assert s.span_us == pytest.approx(n * 50 / 1e3)
    assert (s.run_share, s.wait_share, s.idle_share) == pytest.approx((1.0, 0.0, 0.0))
    counts = {k.kind: k.tasks for k in s.kinds}
    assert counts == {kind.name: sum(t.kind == kind for t in SCH.tasks) for kind in {t.kind for t in SCH.tasks}}
    assert sum(k.run_us for k in s.kinds) == pytest.approx(s.span_us)


def test_waits_and_idle_blocks_are_their_shares_of_block_time():
    rows = serial(run_ns=30, gap_ns=10)  # a quarter of each task's time waiting
    rows[0][0] = 1  # a second SM that ran only the first task: idle for the rest of the span
    s = T.summarize(rows, SCH)
    span = rows[-1][T.SIGNALLED] - rows[0][T.TAKEN]
    assert s.blocks == 2
    assert s.wait_share == pytest.approx(10 * len(rows) / (2 * span))
    assert s.run_share == pytest.approx(30 * len(rows) / (2 * span))
    assert s.run_share + s.wait_share + s.idle_share == pytest.approx(1.0)
    assert s.idle_share == pytest.approx(0.5)


def test_each_kind_carries_the_tables_weight_bytes_a_layer_and_its_phase():
    s = T.summarize(serial(), SCH, weight_elt=2)
    by = {k.kind: k for k in s.kinds}
    qkv = sum(t.weight_elems for t in SCH.tasks if t.kind == Kind.QKV and t.layer == 0)
    assert by["QKV"].weight_bytes == 2 * qkv == 2 * (8 + 2 * 2) * 128 * 256
    first = [i for i, t in enumerate(SCH.tasks) if t.kind == Kind.QKV and t.layer == 0]
    assert by["QKV"].phase_us == pytest.approx(len(first) * 50 / 1e3)  # back to back: the phase is its tasks' run
    assert by["QKV"].phase_gbs == pytest.approx(2 * qkv / (len(first) * 50))
    assert by["SCORES"].phase_gbs is None  # attention streams the cache, no weight matrix
    ends = [max(i for i, t in enumerate(SCH.tasks) if t.layer == layer) for layer in (0, 1)]
    assert s.layer_us == pytest.approx((ends[1] - ends[0]) * 50 / 1e3)


def test_a_kinds_input_time_is_its_wait_met_to_its_input_staged_where_it_marks_one():
    by = {k.kind: k for k in T.summarize(serial(run_ns=50, staged_ns=20), SCH).kinds}
    assert by["QKV"].input_us == pytest.approx(0.02) and by["ATTN_OUT"].input_us == pytest.approx(0.02)
    assert by["EMBED"].input_us is None and by["FINAL_NORM"].input_us is None  # no staging point: nothing made up
    assert "input us" in T.render(T.summarize(serial(), SCH), "title")


def test_a_task_taken_before_its_signal_wakes_when_the_last_one_it_needs_lands():
    rows = serial()
    score = next(t for t in SCH.tasks if t.kind == Kind.SCORES)  # waits for its group's q/k/v tiles
    ((counter, target),) = score.waits
    producers = [t.index for t in SCH.tasks if t.signal == counter]
    assert len(producers) == target and producers[-1] < score.index - 1  # other groups' tiles queue between
    rows[score.index][1] = rows[producers[0]][1]  # taken early: it waits for the last of its producers
    by = {k.kind: k for k in T.summarize(rows, SCH).kinds}
    woke = rows[score.index][T.MET] - rows[producers[-1]][T.SIGNALLED]  # its wait met a few tiles after that signal
    assert woke > 0 and by["SCORES"].wake_us == pytest.approx(woke / 1e3)
    assert by["QKV"].wake_us is None  # taken as their inputs landed: none waited on a signal
    assert "wake us" in T.render(T.summarize(rows, SCH), "title")


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda rows: rows.pop(), "a trace of"),
        (lambda rows: rows[3].__setitem__(1, 0), "task 3 was never traced"),
        (lambda rows: rows[5].__setitem__(2, rows[5][4] + 1), "task 5: times out of order"),
        (lambda rows: rows[7].__setitem__(3, rows[7][4] + 1), "task 7: times out of order"),  # staged after its signal
        (lambda rows: rows[2].pop(), "task 2: 4 trace fields"),
    ],
    ids=["short", "untraced", "order", "staged-order", "width"],
)
def test_a_trace_of_no_whole_launch_is_refused(edit, message):
    rows = serial()
    edit(rows)
    with pytest.raises(ValueError, match=message):
        T.summarize(rows, SCH)


def test_the_table_names_every_kind_and_the_untraced_time():
    text = T.render(T.summarize(serial(), SCH), "title", untraced_us=1.5)
    assert text.splitlines()[0] == "title"
    assert "untraced: 1.5 us" in text
    for kind in {t.kind.name for t in SCH.tasks}:
        assert any(line.startswith(kind) for line in text.splitlines()), kind


def test_the_cli_refuses_bad_sizes_and_skips_without_cuda(capsys, monkeypatch):
    for argv in (["--layers", "0"], ["--layers", "65"], ["--batch", "0"]):
        with pytest.raises(SystemExit) as exc:
            T.main(argv)
        assert exc.value.code == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert T.main([]) == 0
    assert capsys.readouterr().out.startswith("SKIP: no CUDA device")
