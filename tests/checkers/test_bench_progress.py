"""The checker benchmarks say how far they are: a line per run with its time and an ETA, on stderr, never in
the result table on stdout (scripts/bench/_measure.py Progress, phase); the trailers benchmark's paired
A/B against a baseline commit prints its ratios."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts" / "bench"))
from _measure import Progress, measure  # noqa: E402


def test_each_step_is_a_line_with_its_time_the_elapsed_time_and_an_eta(monkeypatch: pytest.MonkeyPatch):
    clock = iter([100.0, 102.0, 104.0, 110.0])  # start, then after each step
    monkeypatch.setattr("_measure.time.perf_counter", lambda: next(clock))
    out = io.StringIO()
    progress = Progress(3, "bench", stream=out)
    for what, took in (("rep 0, floor", 2.0), ("rep 0, check", 2.0), ("rep 1, floor", 6.0)):
        progress.step(what, took)
    assert out.getvalue().splitlines() == [
        "bench: [1/3] rep 0, floor: 2.00s; 2s elapsed, ETA 4s",
        "bench: [2/3] rep 0, check: 2.00s; 4s elapsed, ETA 2s",
        "bench: [3/3] rep 1, floor: 6.00s; 10s elapsed, all done",
    ]


def test_many_short_steps_print_at_most_every_interval_and_always_the_last(monkeypatch: pytest.MonkeyPatch):
    ticks = iter([0.0, 0.5, 1.0, 2.5, 3.0])
    monkeypatch.setattr("_measure.time.perf_counter", lambda: next(ticks))
    out = io.StringIO()
    progress = Progress(4, stream=out, every_s=2.0)
    for i in range(4):
        progress.step(f"message {i}", 0.5)
    assert [line.split(":")[0] for line in out.getvalue().splitlines()] == ["[3/4] message 2", "[4/4] message 3"]


def test_measure_reports_every_run_on_stderr(capsys: pytest.CaptureFixture[str]):
    times = measure({"a": lambda: None, "b": lambda: None}, reps=1)
    out, err = capsys.readouterr()
    assert out == "" and {k: len(v) for k, v in times.items()} == {"a": 1, "b": 1}
    assert [line.split(":")[1].strip() for line in err.splitlines()] == [
        "[1/4] rep 0 (warm-up, dropped), a",
        "[2/4] rep 0 (warm-up, dropped), b",
        "[3/4] rep 1, a",
        "[4/4] rep 1, b",
    ]


@pytest.mark.slow
def test_the_trailers_benchmark_streams_progress_to_stderr_and_pairs_a_baseline():
    proc = subprocess.run(
        [sys.executable, "scripts/bench-checkers.py", "trailers", "--commits", "40", "--reps", "1"]
        + ["--no-install", "--no-config", "--baseline", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert err[:2] == ["building 40 commits with git fast-import ...", err[1]]
    runs = [line for line in err if line.startswith("trailers: [")]
    assert len(runs) == 2 * 6 and runs[-1].endswith("all done") and "ETA" in runs[0]  # 6 arms, warm-up + 1 rep
    assert "rep 1, HEAD whole CLI" in runs[-2]
    assert [line for line in err if line.startswith("in-process: [")][-1].endswith("all done")
    assert proc.stdout.startswith("trailers benchmark: 40 commits")
    assert "ETA" not in proc.stdout and "elapsed" not in proc.stdout  # the result stream is only the result
    assert "this paired against HEAD (same repository copy, runs interleaved; this / HEAD per pair):" in proc.stdout
