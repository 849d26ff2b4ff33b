"""`python -m lab bench tp_scaling` on the CPU: one and two gloo ranks on the embedded tiny model, each size's
milliseconds per step and its ratio to size 1 printed (a smoke run of the harness, not a number)."""

from __future__ import annotations

import re

from lab.bench import tp_scaling


def test_prints_each_size_and_its_ratio_to_one(capsys):
    rc = tp_scaling.main(["--device", "cpu", "--batch", "2", "--tokens", "3", "--reps", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert lines[0].endswith("cpu, batch 2, 3 tokens, 2 reps")
    assert re.fullmatch(r"tp=1: [\d.]+ ms/step \[[\d.]+, [\d.]+\]  x1\.00 vs tp=1", lines[1]), lines[1]
    assert re.fullmatch(r"tp=2: [\d.]+ ms/step \[[\d.]+, [\d.]+\]  x[\d.]+ vs tp=1", lines[2]), lines[2]
