"""The timing module's modes on the CPU: graph calls per cycle, the eager fallback when capture is refused
(through the `capture` seam), input rotation, and the mode reaching the A/B and bandwidth records."""

from __future__ import annotations

import json

import pytest
import torch

from lab.bench import ab, bandwidth, timing
from lab.bench.workloads import GEMV

CPU = torch.device("cpu")


def fake_capture(log: list[str]):
    """A stand-in for capture_graph: 'captures' by remembering the call order; replay runs it."""

    def capture(fn, sets, device, calls):
        log.append(f"capture {calls}")
        return lambda: [fn(*sets[i % len(sets)]) for i in range(calls)]

    return capture


def refusing_capture(fn, sets, device, calls):
    raise RuntimeError("operation not permitted when stream is capturing\nsecond line")


def test_a_graph_holds_whole_cycles_of_the_input_sets():
    assert [timing.graph_calls(n) for n in (1, 3, 4, 16, 25)] == [20, 21, 20, 32, 25]
    assert timing.graph_calls(3, min_calls=2) == 3
    with pytest.raises(ValueError, match="n_sets must be at least 1, got 0"):
        timing.graph_calls(0)


def test_graph_mode_replays_every_set_in_turn_and_divides_by_the_calls():
    seen: list[int] = []
    log: list[str] = []
    t = timing.arm_timer(lambda i: seen.append(i), [(0,), (1,), (2,)], CPU, "graph", capture=fake_capture(log))
    assert (t.mode, t.calls, t.note) == ("graph", 21, None) and log == ["capture 21"]
    assert t.sample(0) >= 0.0 and t.sample(1) >= 0.0
    assert seen == [0, 1, 2] * 14  # two replays of seven cycles each, nothing else called


def test_a_refused_capture_falls_back_to_the_eager_loop_and_says_why():
    seen: list[int] = []
    t = timing.arm_timer(lambda i: seen.append(i), [(0,), (1,)], CPU, "graph", inner=3, capture=refusing_capture)
    assert (t.mode, t.calls) == ("eager", 3)
    assert t.note == "capture refused: RuntimeError: operation not permitted when stream is capturing"
    t.sample(0)
    t.sample(1)
    assert seen == [0, 0, 0, 1, 1, 1]  # one input set per sample, rotating
    assert timing.describe(t.as_record()) == (
        "eager, 3 calls/sample (capture refused: RuntimeError: operation not permitted when stream is capturing)"
    )


def test_the_cpu_is_always_eager_and_bad_modes_are_refused():
    t = timing.arm_timer(lambda: None, [()], CPU, "graph")
    assert (t.mode, t.note) == ("eager", "no CUDA graphs on cpu")
    assert timing.arm_timer(lambda: None, [()], CPU, "eager").note is None
    with pytest.raises(ValueError, match="timing mode 'replay': expected one of graph, eager"):
        timing.arm_timer(lambda: None, [()], CPU, "replay")
    with pytest.raises(ValueError, match="sets: need at least one input set"):
        timing.arm_timer(lambda: None, [], CPU)
    assert timing.first_line(ValueError()) == "ValueError"


def test_ab_records_and_prints_the_timing_mode_of_each_arm(tmp_path, capsys):
    assert (
        ab.main(
            [
                "--flag",
                "VT_GEMV",
                "--shape",
                "n=7,k=33",
                "--reps",
                "3",
                "--device",
                "cpu",
                "--dtype",
                "float32",
                "--ledger",
                str(tmp_path),
            ]
        )
        == 1  # the CPU runs VT_GEMV's arm on neither side: the run is recorded and refused as a measurement
    )
    out = capsys.readouterr().out
    assert out.count("eager, 1 calls/sample (no CUDA graphs on cpu)") == 2
    [path] = tmp_path.glob("*-ab-vt-gemv.json")
    want = {"mode": "eager", "calls_per_sample": 1, "note": "no CUDA graphs on cpu"}
    assert json.loads(path.read_text())["results"]["timing"] == {"off": want, "on": want}


def test_bandwidth_rows_say_which_arm_was_graphed_and_which_fell_back(monkeypatch, capsys):
    import torch.nn.functional as F

    def timer(fn, sets, device, mode, inner):  # the peer F.linear refuses capture, the arms do not
        capture = refusing_capture if fn is F.linear else fake_capture([])
        return timing.arm_timer(fn, sets, device, mode, inner, capture=capture)

    monkeypatch.setattr(bandwidth, "arm_timer", timer)
    shape = {"n": 19, "k": 83}
    rows = bandwidth.measure_shape(GEMV, shape, CPU, torch.float32, 3, 2, 1e9, None)
    modes = {r["arm"]: (r["timing"]["mode"], r["timing"]["calls_per_sample"]) for r in rows}
    # a tiny shape rotates through the cap of 16 input sets: two cycles make a graph of 32 calls
    assert modes == {
        "reference": ("graph", 32),
        "gemv-kernel": ("graph", 32),
        "gemv-pdl": ("graph", 32),
        "gemv-stream": ("graph", 32),
        "gemv-stream-pdl": ("graph", 32),
        "F.linear": ("eager", 2),
    }
    assert rows[-1]["timing"]["note"].startswith("capture refused: RuntimeError")
    bandwidth.print_table({"copy_bytes_per_s": 1e9, "device": "cpu", "timing": "graph", "rows": rows})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "copy bandwidth (read+write): 0.001 TB/s on cpu; timing asked: graph"
    assert lines[2].endswith("graph, 32 calls/sample") and lines[7].endswith(
        "eager, 2 calls/sample (capture refused: RuntimeError: operation not permitted when stream is capturing)"
    )


@pytest.mark.gpu
def test_on_cuda_a_capturable_op_is_graphed_and_a_host_sync_falls_back():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: graph capture runs only on a GPU")
    dev = torch.device("cuda")
    sets = [(torch.randn(1000, device=dev),) for _ in range(3)]
    graphed = timing.arm_timer(torch.square, sets, dev, "graph")
    assert (graphed.mode, graphed.calls, graphed.note) == ("graph", 21, None)
    assert graphed.sample(0) > 0.0
    refused = timing.arm_timer(lambda t: float(t.sum()), sets, dev, "graph", inner=2)  # a host read
    assert refused.mode == "eager" and refused.calls == 2
    assert refused.note.startswith("capture refused: ") and "captur" in refused.note[len("capture refused: ") :]
    assert refused.sample(0) > 0.0  # the device is usable after the refused capture
