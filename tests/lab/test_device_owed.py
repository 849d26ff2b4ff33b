"""scripts/bench/device_owed.sh, the owed GPU runs in calls of under ten minutes: it parses, refuses a mode it does
not have with its usage (every mode named there is a function of the script), each call's timeouts add up to less
than a device call's 600 seconds, and it leaves two files in $OUT (a device call returns at most eight)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "device_owed.sh"


def test_the_script_parses_and_names_its_modes():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    run = subprocess.run(["bash", str(SCRIPT), "no-such-mode"], capture_output=True, text=True)
    assert run.returncode == 2
    modes = re.search(r"usage: \S+ \[([a-z0-9|]+)\]", run.stderr)
    assert modes, run.stderr
    text = SCRIPT.read_text()
    assert modes.group(1).split("|") == [
        "correctness",
        "perf",
        "calib",
        "persistent",
        "splits",
        "flip",
        "ncu",
        "limiters",
        "lt",
        "variants",
    ]
    for mode in modes.group(1).split("|"):
        assert re.search(rf"^{mode}\(\) {{", text, re.M), mode


def _critical_path(body: str) -> int:
    """The worst case of a call's timeouts: sequential ones add up, a `( ... ) &` group runs beside the others until
    `wait` (the longest group counts), a `for` loop's repeat as many times as its items."""
    total, groups, group, repeat = 0, [], None, 1
    for line in body.splitlines():
        code = line.split("#")[0].strip()
        if code.startswith("for ") and " in " in code:
            repeat = len(code.split(" in ", 1)[1].split(";")[0].split())
        seconds = sum(int(t) for t in re.findall(r"timeout (\d+)", code)) * repeat
        if code.startswith("("):
            group = 0
        if group is None:
            total += seconds
        else:
            group += seconds
        if code.endswith(") &"):
            groups.append(group)
            group = None
        if code.startswith("done"):
            repeat = 1
        if code.startswith("wait"):
            total += max(groups, default=0)
            groups = []
    return total


def test_each_call_fits_a_device_call():
    calls = dict(re.findall(r"^([a-z0-9]+)\(\) \{[ \t]*(?:#[^\n]*)?\n(.*?)^\}", SCRIPT.read_text(), re.M | re.S))
    calls.pop("save")  # the helper that keeps the call's files in $OUT, not a call
    assert sorted(calls) == [
        "calib",
        "correctness",
        "flip",
        "limiters",
        "lt",
        "ncu",
        "perf",
        "persistent",
        "splits",
        "variants",
    ]
    for mode, body in calls.items():
        assert 0 < _critical_path(body) <= 600, f"{mode}: {_critical_path(body)} s of timeouts in the worst case"
    assert _critical_path("( timeout 100 a ) &\n( timeout 50 b ) &\nwait\ntimeout 7 c\n") == 107  # the rule itself


def test_the_call_leaves_two_files_in_out():
    text = SCRIPT.read_text()
    written = set(re.findall(r"\$OUT/([\w.-]+)", text))
    assert written == {"logs.txt", "records.tgz"}, written
    assert not re.search(r'"\$OUT"/', text)  # no copies of many files into it


def _bare_waits(text: str) -> list[str]:
    """`wait` lines that name no job: in this script they would also wait for the log saver's endless loop, so the
    call would run to the device's limit (the correctness mode's first run on a GPU did, 600 s)."""
    return [code for line in text.splitlines() if (code := line.split("#")[0].strip()).split(";")[0] == "wait"]


def test_a_mode_waits_for_its_own_groups_not_the_log_saver():
    text = SCRIPT.read_text()
    assert "( while sleep 20; do save; done ) &" in text  # the saver runs beside every mode
    assert re.search(r"^\s*wait \$groups", text, re.M) and _bare_waits(text) == []
    assert _bare_waits("( timeout 5 a ) &\nwait; echo done\n") == ["wait; echo done"]  # the defect, caught


def test_a_call_starts_from_an_empty_results_folder():
    """The device keeps /tmp while it stays warm, and across sessions: a call that reused an earlier call's folder
    returned that call's records (of another commit) in its records.tgz beside its own."""
    text = SCRIPT.read_text()
    made, cleared = text.index('mkdir -p "$R/ledger"'), text.find('rm -rf "$R"')
    assert 0 <= cleared < made
    assert re.search(r"^R=/tmp/owed-", text, re.M)  # the folder it clears is the call's own, under /tmp
