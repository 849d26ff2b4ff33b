"""The trailer parser agrees with real git: a corpus of tricky messages and generated ones, in hook mode
(`git interpret-trailers --parse`), range mode (`--no-divider`) and as `git log` sees commits."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from checkers.trailers import parser
from checkers.trailers.parser import commit_trailers, parse, parse_full, skip_blank_lines
from tests.checkers.trailer_corpus import CORPUS, SCISSORS, git_interpret_trailers, git_modelled
from tests.conftest import ROOT, GitRepo, init_repo

MODES = (("hook", False), ("range", True))
NEWLINE = pytest.mark.parametrize("final_newline", [True, False], ids=["git-2.46.2", "older-git"])
NO_OLD_GIT = "the installed git appends the final newline, so no installed git can say what older ones print"


def test_corpus_is_large_and_names_are_unique():
    names = [name for name, _ in CORPUS]
    assert len(names) >= 60 and len(set(names)) == len(names)


@NEWLINE
@pytest.mark.parametrize("mode,no_divider", MODES, ids=[m for m, _ in MODES])
@pytest.mark.parametrize("name,message", CORPUS, ids=[n for n, _ in CORPUS])
def test_corpus_agrees_with_git(name: str, message: str, mode: str, no_divider: bool, final_newline: bool):
    expected = git_modelled(message, no_divider, final_newline)
    if expected is False:
        pytest.skip(NO_OLD_GIT)
    assert expected is not None, f"git hung on {name}"
    assert parse(message, mode, final_newline).render() == expected


# Where git 2.46.2's appended newline changes the answer: a `---` or a `Conflicts:` on the last line. The
# expected outputs are written out here (the specification), and git is asked too (the oracle above).
LAST_LINE = [
    ("divider-last-line", "Title\n\nRow: GOV-CORE\n---", "hook", "Row: GOV-CORE\n", ""),
    (
        "conflicts-last-line",
        "Title\n\nRow: GOV-CORE\nConflicts:",
        "range",
        "Row: GOV-CORE\n",
        "Row: GOV-CORE\nConflicts: \n",
    ),
    (
        "conflicts-last-line-hook",
        "Title\n\nRow: GOV-CORE\nConflicts:",
        "hook",
        "Row: GOV-CORE\n",
        "Row: GOV-CORE\nConflicts: \n",
    ),
]


@pytest.mark.parametrize("name,message,mode,newer,older", LAST_LINE, ids=[c[0] for c in LAST_LINE])
def test_the_final_newline_of_git_2_46_2_changes_a_last_line(
    name: str, message: str, mode: str, newer: str, older: str
):
    assert parse(message, mode).render() == newer  # type: ignore[arg-type]
    assert parse(message, mode, final_newline=False).render() == older  # type: ignore[arg-type]
    assert git_modelled(message, mode == "range", True) == newer
    old = git_modelled(message, mode == "range", False)
    assert old in (False, older)


def test_git_log_never_gets_the_final_newline():
    """Range mode reads what git log gives: a stored message without its newline keeps its last line."""
    assert commit_trailers("Title\n\nRow: GOV-CORE\nConflicts:").render() == "Row: GOV-CORE\nConflicts: \n"


def test_parse_full_cuts_at_a_nul_as_parse_does():
    message = "Title\n\nBody\n\nA: 1\0\nB: 2\n"
    for mode in ("hook", "range"):
        assert parse_full(message, mode).render() == parse(message, mode).render() == "A: 1\n"  # type: ignore[arg-type]


def test_the_corpus_is_not_trivial():
    """Guard against a corpus where git finds nothing: most messages have trailers, some do not."""
    found = [bool(parse(m, "hook").trailers) for _, m in CORPUS]
    assert 30 < sum(found) < len(found) - 10


def test_divider_then_scissors_is_cut_at_the_divider():
    """git 2.39 hangs here (the oracle times out); newer git and we stop at the divider."""
    message = "Title\n\nKey: v\n---\nfile | 1 +\n" + SCISSORS + "Other: w\n"
    assert parse(message, "hook").render() == "Key: v\n"
    assert parse(message, "range").render() == ""
    expected = git_interpret_trailers(message, no_divider=False, timeout_s=2)
    if expected is not None:  # a git that does not hang must agree
        assert parse(message, "hook").render() == expected


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown trailer mode 'log'"):
        parse("x", "log")  # type: ignore[arg-type]


# --- generated messages ---------------------------------------------------------------------------

LINES = [
    "Title",
    "Fix the thing",
    "",
    " ",
    "\t",
    "Key: v",
    "Key:",
    "Key : v",
    "K-1: x",
    "a-b-c:y",
    "  cont",
    "\tcont",
    "prose line",
    "Signed-off-by: A <a@b>",
    "Signed-off-by:A",
    "(cherry picked from commit ab)",
    "# comment",
    "#",
    "---",
    "--- a/x",
    "----",
    "---------",
    "Conflicts:",
    "\tfile.c",
    ": v",
    "Bug #1",
    "Key: a\rb",
    "x:y",
    "Cl\u00e9: v",
    "Row: GOV-CORE",
    "Co-authored-by: B <b@users.noreply.github.com>",
    SCISSORS.rstrip("\n"),
]
line = st.one_of(st.sampled_from(LINES), st.text(alphabet=" \t:#-aZ9(\r\u00e9", max_size=8))
messages = st.builds(
    lambda parts, crlf, final: "".join(p + ("\r\n" if c else "\n") for p, c in zip(parts, crlf))[
        : None if final else -1
    ],
    st.lists(line, max_size=12),
    st.lists(st.booleans(), min_size=12, max_size=12),
    st.booleans(),
)


@NEWLINE
@pytest.mark.parametrize("mode,no_divider", MODES, ids=[m for m, _ in MODES])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(message=messages)
def test_generated_messages_agree_with_git(message: str, mode: str, no_divider: bool, final_newline: bool):
    expected = git_modelled(message, no_divider, final_newline, timeout_s=2)
    assume(expected is not None and expected is not False)  # the git 2.39 hang; no older git installed
    assert parse(message, mode, final_newline).render() == expected


plain_lines = st.one_of(
    st.sampled_from([ln for ln in LINES if not ln.startswith("#") and "\r" not in ln]),
    st.text(alphabet=":-aZ9( \t", max_size=6),
)
plain_messages = st.builds(
    lambda parts, final: "".join(p + "\n" for p in parts)[: None if final else -1],
    st.lists(plain_lines, max_size=12),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(message=st.one_of(plain_messages, messages), mode=st.sampled_from(["hook", "range"]), final=st.booleans())
def test_the_shortcut_for_plain_messages_equals_the_full_rules(message: str, mode: str, final: bool):
    assert parse(message, mode, final) == parse_full(message, mode, final)


range_messages = st.builds(
    lambda title, paras, last, tail: title + "".join("\n\n" + p for p in paras) + "\n\n" + last + tail,
    st.sampled_from(["Title", "Fix the thing", " indented title", "# comment title", "\n"]),
    st.lists(st.lists(plain_lines, min_size=1, max_size=3).map("\n".join), max_size=2),
    st.lists(st.one_of(st.sampled_from(LINES), plain_lines), min_size=1, max_size=5).map("\n".join),
    st.sampled_from(["", "\n", "\n\n", "\n\n\n", "\n \n", "\r\n", "\n#\n"]),
)


@settings(max_examples=600, deadline=None)
@given(message=st.one_of(range_messages, plain_messages, messages))
@example("T\n\nA: 1\n\nConflicts:\n")  # each thing that sends a message to the general rules
@example("T\n\nA: 1\n# comment\n")
@example("T\n\nA: 1\n" + SCISSORS + "B: 2\n")
@example("T\n\nA: 1\r\nB: 2\n")
@example("T\n\nA: 1\n\r\nB: 2\n")  # a line of only a CR is a blank line to git
@example("T\n\nA: 1\0\n\nB: 2\n")
@example("\n\nT\n\nA: 1\n")
@example(" \nT\n\nA: 1\n")
@example("T\n\nA: 1\n  more\n")
@example("T\n\n\tA: 1\n")
@example("T\n\nA: 1\n \nB: 2\n")
@example("T\n\nA: 1\n\n\n")
@example("T\n\nA: 1")
def test_the_last_paragraph_shortcut_of_a_range_equals_the_full_rules(message: str):
    """commit_trailers() answers most messages of a range from the text after their last empty line,
    cached; the full rules on the same text give the same block, offsets and all."""
    assert commit_trailers(message) == parse_full(skip_blank_lines(message), "range", final_newline=False)


def test_the_last_paragraph_shortcut_is_taken_for_a_usual_range():
    usual = [f"Change {i}\n\nWhy {i}.\n\nRow: GOV-CORE\nSigned-off-by: A <a@b>\n" for i in range(50)]
    assert all(parser._last_paragraph_block(m) is not None for m in usual)
    assert [parser._last_paragraph_block(m) for m in ("Title only\n", "T\n\nRow: X\n  cont\n", "T\r\n\nA: 1\n")] == [
        None,
        None,
        None,
    ]  # no empty line, a continuation, a CR: the general rules


# --- what git log sees ------------------------------------------------------------------------------


def _fast_import(repo: GitRepo, messages: list[str]) -> None:
    """One commit per message on main, raw (no cleanup), through git fast-import."""
    stream = []
    for i, msg in enumerate(messages):
        data = msg.encode("utf-8", "surrogateescape")
        stream.append(
            f"commit refs/heads/main\nmark :{i + 1}\ncommitter A <a@example.com> {1700000000 + i} +0000\n".encode()
        )
        stream.append(f"data {len(data)}\n".encode() + data + b"\n")
        if i:
            stream.append(f"from :{i}\n".encode())
        stream.append(b"\n")
    subprocess.run(
        ["git", "fast-import", "--quiet"],
        cwd=repo.path,
        env=repo.env,
        input=b"".join(stream),
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_range_mode_agrees_with_git_log(tmp_path: Path):
    rng = random.Random(20261129)
    generated = []
    for _ in range(300):
        parts = [rng.choice(LINES) for _ in range(rng.randint(0, 9))]
        generated.append("".join(p + rng.choice(["\n", "\n", "\r\n"]) for p in parts))
    messages = [m for _, m in CORPUS] + ["\n \n" + m for _, m in CORPUS[:20]] + generated
    messages = [m for m in messages if "\0" not in m]
    repo = init_repo(tmp_path / "log")
    _fast_import(repo, messages)
    out = subprocess.run(
        ["git", "log", "-z", "--reverse", "--format=%B%x1f%(trailers:only,unfold)", "main"],
        cwd=repo.path,
        env=repo.env,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    records = [r for r in out.decode("utf-8", "surrogateescape").split("\0")]
    records = records[: len(messages)]
    assert len(records) == len(messages)
    mismatches = []
    for msg, record in zip(messages, records):
        raw, theirs = record.split("\x1f", 1)
        assert raw == msg  # %B is the raw message
        if commit_trailers(raw).render() != theirs:
            mismatches.append((msg, theirs))
    assert not mismatches, mismatches[:3]
    assert sum(bool(commit_trailers(m).trailers) for m in messages) > 60


def test_skip_blank_lines_keeps_the_first_text_line():
    assert skip_blank_lines(" \n\t\r\n\nTitle\n \n") == "Title\n \n"
    assert skip_blank_lines(" \n") == ""


def test_cli_switch_models_older_git():
    message = "Title\n\nRow: GOV-CORE\n---"
    outs = [
        subprocess.run(
            [sys.executable, "-m", "checkers", "trailers", "--parse", *flag],
            cwd=ROOT,
            input=message.encode(),
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
        for flag in ([], ["--no-final-newline"])
    ]
    assert outs == ["Row: GOV-CORE\n", ""]


def test_cli_prints_what_git_prints():
    message = "Title\n\nBody\n\nKey : a\n  b\nRow: GOV-CORE\n---\nPatch: x\n"
    outs = []
    for flag, no_divider in (([], False), (["--no-divider"], True)):
        out = subprocess.run(
            [sys.executable, "-m", "checkers", "trailers", "--parse", *flag],
            cwd=ROOT,
            input=message.encode(),
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        assert out.decode() == git_interpret_trailers(message, no_divider)
        outs.append(out.decode())
    # The divider ends the message for the hook; without it `---` is prose and there is no block.
    assert outs == ["Key: a b\nRow: GOV-CORE\n", ""]
