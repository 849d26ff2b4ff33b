"""bench throughput: the CPU smoke run measures both sides, plots and records; bad arguments are usage errors."""

from __future__ import annotations

import json
import time

import pytest

from engine.llm import TINY_MODEL
from lab.bench import throughput
from tests.lab.ledger_record import read_record


def test_smoke_run_measures_engine_and_peer_and_writes_plot_and_ledger(tmp_path, capsys) -> None:
    plot, ledger = tmp_path / "tps.svg", tmp_path / "ledger"
    argv = [
        "--smoke",
        "--requests",
        "4",
        "--sweep",
        "2,4",
        "--min-len",
        "40",  # the peer's rate needs 8 + 32 steps
        "--max-len",
        "48",
        "--plot",
        str(plot),
        "--ledger",
        str(ledger),
        "--allow-dirty",  # a test run, not evidence: the tree may be mid-edit
        "--json",
    ]
    assert throughput.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    record = json.loads(out[-2 if out[-1].startswith("ledger:") else -1])
    assert [p["requests"] for p in record["points"]] == [2, 4]
    for p in record["points"]:
        assert p["engine_tok_per_s"] > 0 and p["peer_tok_per_s"] > 0 and p["ratio"] > 0
        assert p["output_tokens"] >= 40 * p["requests"]  # lengths uniform in [40, 48]
        # the host's share of a decode step, both parts measured (no timed bound: two clocks on a shared machine)
        assert 0 < p["decode_scheduler_s"] and 0 < p["decode_inputs_s"]
        host = 1e3 * (p["decode_scheduler_s"] + p["decode_inputs_s"]) / p["decode_steps"]
        assert p["host_ms_per_decode_step"] == pytest.approx(host)
    assert sum("ms per decode step (scheduler" in line for line in out) == 2
    assert sum(" requests, tokens " in line for line in out) == 2  # one digest line per point (one arm)
    whole = [line for line in out if "whole-run ratio" in line]  # beside the headline, labelled, one per point
    assert len(whole) == 2 and all("prefill included on both sides" in line for line in whole)
    assert all(p["whole_ratio"] > 0 for p in record["points"])
    assert record["peer"] == "transformers generate, static cache" and record["on_gpu"] is False
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 2
    (path,) = ledger.iterdir()
    saved = read_record(path)
    assert saved["kind"] == "bench" and saved["rows"] == ["ENGINE-SERVE"]
    assert saved["summary"].startswith("4 requests: engine ")


def test_the_workload_is_seeded_and_within_its_lengths() -> None:
    prompts, outs = throughput.workload(50, 100, 1024, 151936, 3)
    assert (prompts, outs) == throughput.workload(50, 100, 1024, 151936, 3)
    assert all(100 <= len(p) <= 1024 for p in prompts) and all(100 <= n <= 1024 for n in outs)
    assert throughput.workload(50, 100, 1024, 151936, 4)[0] != prompts


def test_bad_lengths_and_sweep_are_usage_errors(capsys) -> None:
    assert throughput.main(["--smoke", "--min-len", "9", "--max-len", "4"]) == 2
    assert "need 1 <= --min-len (9) <= --max-len (4)" in capsys.readouterr().err
    assert throughput.main(["--smoke", "--sweep", "4,x"]) == 2
    assert "--sweep '4,x': expected comma-separated integers" in capsys.readouterr().err


def test_ab_arms_turn_one_more_flag_on_each() -> None:
    from engine.flags import FlagSnapshot

    arms = throughput.ab_arms(FlagSnapshot.defaults(), ["VT_PREFILL_ATTN", "VT_SAMPLE_ROWS_KERNEL"])
    assert [label for label, _ in arms] == [
        "VT_PREFILL_ATTN=0 VT_SAMPLE_ROWS_KERNEL=0",
        "VT_PREFILL_ATTN=1 VT_SAMPLE_ROWS_KERNEL=0",
        "VT_PREFILL_ATTN=1 VT_SAMPLE_ROWS_KERNEL=1",
    ]
    assert [snap.enabled("VT_SAMPLE_ROWS_KERNEL") for _, snap in arms] == [False, False, True]


def test_bad_ab_flag_and_peer_budget_are_usage_errors(capsys) -> None:
    assert throughput.main(["--smoke", "--ab-flag", "VT_PREFILL_ATTN,VT_NOPE"]) == 2
    assert "--ab-flag VT_NOPE: not a boolean flag" in capsys.readouterr().err
    assert throughput.main(["--smoke", "--peer-budget-s", "0"]) == 2
    assert "--peer-budget-s 0.0: must be positive" in capsys.readouterr().err


def test_a_cut_peer_counts_each_requests_own_tokens(monkeypatch, capsys) -> None:
    steady = throughput.PEER_SKIP_STEPS + throughput.PEER_MIN_STEADY_STEPS  # steps, 0.1 s each
    times = [0.1 * (s + 1) for s in range(steady)]
    monkeypatch.setattr(throughput, "run_peer", lambda *a, **k: (0.1 * steady, steady, times))
    record = throughput.measure(
        TINY_MODEL,
        [3],
        device="cpu",
        min_len=3,
        max_len=12,
        temperature=0.6,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        peer=True,
        peer_compile=False,
        seed=0,
    )
    (point,) = record["points"]
    outs = throughput.workload(3, 3, 12, 512, 0)[1]
    skip = throughput.PEER_SKIP_STEPS
    made = sum(max(0, min(steady, m) - skip) for m in outs)  # each request's own tokens after the skipped steps
    assert point["peer_tok_per_s"] == pytest.approx(made / (times[steady - 1] - times[skip - 1]))
    assert point["ratio"] == pytest.approx(point["engine_tok_per_s"] / point["peer_tok_per_s"])
    assert point["peer_complete"] is (max(outs) <= steady)
    # the whole-run ratio: the peer's whole timed generate (its prefill and first steps in) over the same tokens
    whole = sum(min(steady, m) for m in outs) / (0.1 * steady)
    assert point["peer_whole_tok_per_s"] == pytest.approx(whole)
    assert point["whole_ratio"] == pytest.approx(point["engine_tok_per_s"] / whole)
    assert point["whole_ratio"] != pytest.approx(point["ratio"])  # two measures, not one printed twice


def test_arm_switch_sets_the_flags_and_says_when_an_arm_is_new(tiny_model_dir) -> None:
    from engine.flags import FlagSnapshot
    from engine.runner import Runner

    runner = Runner(tiny_model_dir, max_batch=1, max_model_len=16)
    switch = throughput.ArmSwitch(runner)
    off, on = FlagSnapshot.defaults().with_(VT_PREFILL_ATTN=False), FlagSnapshot.defaults().with_(VT_PREFILL_ATTN=True)
    assert switch.use("off", off) is True and runner.flags is off  # first use: capture
    assert switch.use("on", on) is True and runner.flags is on
    assert switch.use("off", off) is False and runner.flags is off  # seen: its graphs are the runner's already
    assert switch.use("off", off) is False
    assert switch.use("on", on) is False and runner.flags is on


def test_the_timed_runner_counts_the_steps_llm_runs(tiny_model_dir) -> None:
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams

    llm = LLM(tiny_model_dir, max_num_seqs=2, max_model_len=32, runner_class=throughput.TimedRunner)
    llm.generate([[1, 2, 3], [4, 5]], SamplingParams(max_tokens=4, ignore_eos=True))
    split = llm.runner.split()  # type: ignore[attr-defined]
    assert split["mixed_steps"] == 1 and split["decode_steps"] == 3  # one prefill of both, then 3 decode steps
    assert split["decode_s"] > 0 and split["mixed_s"] > 0


def test_the_engine_is_freed_before_the_peer_runs(monkeypatch) -> None:
    """The peer needs the device's memory: by the time it starts, nothing holds the engine's runner (its KV cache
    and graphs), not even the timed runner's clock or the arm switch."""
    import gc
    import weakref

    made: list[weakref.ref] = []
    real_llm = throughput.LLM

    def llm(*args, **kwargs):
        out = real_llm(*args, **kwargs)
        made.append(weakref.ref(out.runner))
        return out

    def peer(*args, **kwargs):
        gc.collect()
        assert made and made[0]() is None, "the engine's runner is still alive when the peer starts"
        return 1.0, 3, [0.1, 0.2, 0.3]

    monkeypatch.setattr(throughput, "LLM", llm)
    monkeypatch.setattr(throughput, "run_peer", peer)
    record = throughput.measure(
        TINY_MODEL,
        [2],
        device="cpu",
        min_len=3,
        max_len=8,
        temperature=0.6,
        max_num_seqs=2,
        max_num_batched_tokens=64,
        peer=True,
        peer_compile=False,
        seed=0,
        ab_flags=["VT_PREFILL_ATTN"],
        ab_reps=1,
    )
    assert record["points"][0]["peer_steps"] == 3  # the peer ran (too few steps for a rate)


def test_a_peer_cut_before_its_steady_state_gives_no_rate_and_no_ratio(capsys) -> None:
    """A budget spent on warm-up (here 0.01 s) must not turn into a rate: the point says why, no ratio is printed,
    and the target is not met."""
    argv = ["--smoke", "--requests", "2", "--sweep", "2", "--min-len", "60", "--max-len", "64"]
    assert throughput.main([*argv, "--peer-budget-s", "0.01", "--json"]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out.splitlines()[-1])
    (point,) = record["points"]
    assert point["peer_complete"] is False and point["peer_steps"] < 60
    assert point["peer_error"].startswith(f"no steady state: {point['peer_steps']} steps in ")
    assert "ratio" not in point and "peer_tok_per_s" not in point and not record["targets"]["met"]
    assert "peer warm-up: 8 steps" in captured.err


def test_the_peer_rate_is_its_steady_state() -> None:
    skip, need = throughput.PEER_SKIP_STEPS, throughput.PEER_MIN_STEADY_STEPS
    times = [100.0] + [100.0 + 0.5 * s for s in range(1, skip + need)]  # a 100 s first step: compilation
    assert throughput.peer_rate([1000, 1000], skip + need, times) == pytest.approx(2 * need / (0.5 * need))
    assert throughput.peer_rate([1000, 1000], skip + need - 1, times) is None  # one step short
    assert throughput.peer_rate([skip + 1, 1000], skip + need, times) == pytest.approx((1 + need) / (0.5 * need))


def test_the_async_arm_gives_the_same_tokens_and_the_report_says_so(capsys) -> None:
    argv = ["--smoke", "--requests", "6", "--sweep", "6", "--max-len", "16", "--no-peer"]
    assert throughput.main([*argv, "--ab-flag", "VT_ASYNC_SCHEDULE", "--ab-reps", "1", "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    (point,) = json.loads(out[-1])["points"]
    arms = point["arms"]
    assert arms["VT_ASYNC_SCHEDULE=0"]["tokens"] == arms["VT_ASYNC_SCHEDULE=1"]["tokens"]
    assert all(a["decode_steps"] > 0 for a in arms.values())  # the async arm's steps are counted too
    assert any(line.endswith(": VT_ASYNC_SCHEDULE=0 == VT_ASYNC_SCHEDULE=1") for line in out)


def test_the_cpu_clock_times_the_run_and_is_put_back_after(capsys) -> None:
    argv = ["--smoke", "--requests", "2", "--sweep", "2", "--max-len", "8", "--no-peer", "--json"]
    assert throughput.main([*argv, "--clock", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    record = json.loads(out[-1])
    assert record["clock"] == "cpu" and f"{record['cpu_threads']} CPU thread(s), cpu clock" in out[0]
    assert throughput._clock is time.perf_counter  # the wall clock again for the next run in this process


def _round(engine: float, peer: float) -> dict:
    point = {"requests": 4, "engine_tok_per_s": engine, "engine_s": 100 / engine, "peer_s": 100 / peer}
    point.update(peer_tok_per_s=peer, ratio=engine / peer, peer_whole_tok_per_s=peer / 2, whole_ratio=2 * engine / peer)
    return {"points": [point]}


def test_rounds_divide_the_medians_and_keep_every_rounds_ratio() -> None:
    rounds = [_round(100, 80), _round(90, 120), _round(110, 100)]  # per round 1.25x, 0.75x, 1.10x
    (point,) = throughput.combine_rounds(rounds)["points"]
    assert point["engine_tok_per_s"] == 100 and point["peer_tok_per_s"] == 100
    assert point["ratio"] == pytest.approx(1.0)  # the median of the ratios would be 1.10x: not what is reported
    assert point["whole_ratio"] == pytest.approx(2.0)
    assert point["rounds"]["ratio"] == [1.25, 0.75, round(110 / 100, 4)] and point["rounds"]["n"] == 3
    assert throughput.combine_rounds([_round(100, 80)])["points"][0]["ratio"] == 1.25  # one round: as measured


def test_rounds_run_the_whole_measurement_again_and_say_so(tmp_path, capsys) -> None:
    argv = ["--smoke", "--requests", "2", "--sweep", "2", "--max-len", "8", "--no-peer", "--json", "--rounds", "2"]
    ledger = ["--ledger", str(tmp_path), "--allow-dirty", "--row", "ENGINE-OPENAI", "--row", "ENGINE-SERVE"]
    assert throughput.main([*argv, *ledger]) == 0
    captured = capsys.readouterr()
    assert "round 1/2" in captured.err and "round 2/2" in captured.err
    (point,) = json.loads(captured.out.splitlines()[-2])["points"]
    (path,) = tmp_path.glob("*.json")
    assert json.loads(path.read_text())["rows"] == ["ENGINE-SERVE", "ENGINE-OPENAI"]
    assert point["rounds"]["n"] == 2 and len(point["rounds"]["engine_tok_per_s"]) == 2
    assert throughput.main(["--smoke", "--rounds", "0"]) == 2
    assert "--rounds 0: must be at least 1" in capsys.readouterr().err
