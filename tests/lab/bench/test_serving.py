"""lab bench serving's ratios, alone and after bench throughput (--serving): every arm runs and is priced."""

from __future__ import annotations

import json

import pytest

from lab.bench import serving, throughput
from tests.lab.ledger_record import read_record

pytest.importorskip("uvicorn", reason="the server arm runs engine.serve's app under uvicorn")


def test_throughput_with_serving_prints_the_two_goal_ratios_last(capsys) -> None:
    argv = ["--smoke", "--requests", "4", "--sweep", "4", "--max-len", "8", "--no-peer", "--serving", "--json"]
    assert throughput.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    record = json.loads(lines[-1])
    got = record["serving"]
    assert got["requests"] == 4 and got["lengths"] == [2, 8] and got["reps"] == 3
    assert set(got["tok_per_s"]) == {"plain", "logprobs=5", "penalties", "server"}
    for arm in ("logprobs", "penalties", "server"):
        assert got[f"{arm}_ratio"] == pytest.approx(got["tok_per_s"][_arm(arm)] / got["tok_per_s"]["plain"])
    # the report's last line before the JSON: the two ratios the issue sets goals for, last
    assert lines[-2].startswith("serving at 4 requests: penalties / plain ")
    assert lines[-2].endswith("(goal >= 0.95); server / offline " + f"{got['server_ratio']:.3f}x (goal >= 0.90)")


def _arm(name: str) -> str:
    return {"logprobs": "logprobs=5", "penalties": "penalties", "server": "server"}[name]


def test_serving_alone_prints_each_arm_then_the_ratios_and_writes_its_record(tmp_path, capsys) -> None:
    argv = ["--smoke", "--requests", "3", "--max-len", "6", "--reps", "1", "--ledger", str(tmp_path), "--allow-dirty"]
    assert serving.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"ledger: {next(tmp_path.glob('*-serving.json'))}"
    assert [line.split(":")[0].strip() for line in lines[:-2]] == ["plain", "logprobs=5", "penalties", "server"]
    assert "logprobs=5 / plain" in lines[-2] and lines[-2].endswith("(goal >= 0.90)")
    record = read_record(next(tmp_path.glob("*-serving.json")))
    assert record["kind"] == "bench" and record["rows"] == ["ENGINE-OPENAI"]
    assert record["command"] == "python -m lab bench serving " + " ".join(argv)
    assert record["results"]["requests"] == 3 and record["summary"].startswith("3 requests: logprobs=5 ")
