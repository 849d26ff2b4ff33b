"""Fuzzing the inputs rowgate parses: whatever the bytes, each parser returns or raises its own error type
(which the commands report in one line); nothing else escapes. Small example counts keep it CI-quick."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checkers.checks.gencode import fatbin, nvcc_flags
from checkers.config import parse_config
from checkers.results import RecordError
from checkers.trailers import parser
from checkers.yamlio import parse_yaml
from tests.checkers.trailer_corpus import SCISSORS, git_modelled

QUICK = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
YAMLISH = st.text(alphabet=st.sampled_from(list("ab: -[]{}&*<>!|'\"#\n\t,?%@`\\0\x01")), max_size=200)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@QUICK
@given(YAMLISH)
def test_yaml_either_loads_or_is_a_record_error(text: str) -> None:
    try:
        parse_yaml(text.encode("utf-8", errors="surrogatepass"), "f.yaml")
    except RecordError as exc:
        assert exc.lines() and all(line.startswith("f.yaml") for line in exc.lines())


@QUICK
@given(st.binary(max_size=300))
def test_yaml_bytes_either_load_or_are_a_record_error(raw: bytes) -> None:
    try:
        parse_yaml(raw, "f.yaml")
    except RecordError:
        pass


@QUICK
@given(st.one_of(YAMLISH, JSON_VALUES.map(json.dumps)))
def test_config_either_validates_or_is_a_record_error(text: str) -> None:
    try:
        parse_config(("version: 1\n" + text if not text.startswith("{") else text).encode())
    except RecordError as exc:
        assert all(line.startswith(".agents/config.yaml") for line in exc.lines())


@QUICK
@given(st.binary(max_size=400))
def test_fatbin_bytes_parse_or_raise_fatbin_error(blob: bytes) -> None:
    for parse in (fatbin.parse_fatbin, fatbin.fatbin_section):
        try:
            parse(b"\x50\xed\x55\xba" + blob if parse is fatbin.parse_fatbin else b"\x7fELF" + blob)
        except fatbin.FatbinError:
            pass


@QUICK
@given(JSON_VALUES)
def test_compile_commands_load_or_raise_flag_error(value: object) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "compile_commands.json"
        path.write_text(json.dumps(value))
        try:
            for cmd in nvcc_flags.load_compile_commands(path):
                try:
                    nvcc_flags.archs_of(cmd.args)
                except nvcc_flags.FlagError:
                    pass
        except nvcc_flags.FlagError:
            pass


# Trailer messages: paragraphs of lines that git's rules turn on (separators, continuations, comments, the
# divider, the scissors line, `Conflicts:`, git-generated prefixes, CR), separated by empty or blank lines,
# with any character mixed in; and plain text of any characters.
TRAILER_LINE = st.sampled_from(
    [
        "Title",
        "prose",
        "Row: GOV-CORE",
        "Key : v",
        "K-1:x",
        ": v",
        "  cont",
        "\tcont",
        "# c",
        "---",
        "--- a/x",
        "Conflicts:",
        "\tf.c",
        "Signed-off-by: A <a@b>",
        "Signed-off-by:A",
        "(cherry picked from commit ab)",
        "x:y\r",
        SCISSORS.rstrip("\n"),
    ]
) | st.text(
    alphabet=st.sampled_from(list("Ro: \t#-\r\x00\x0b\x0c\u00a0\u00e9\udcff")) | st.characters(codec="utf-8"),
    max_size=6,
)
TRAILERISH = st.sampled_from(["Row: GOV-CORE", "Key : v", "K-1:x", "  cont", "Signed-off-by: A <a@b>", "# c"])
PARAGRAPH = st.lists(TRAILER_LINE, min_size=1, max_size=4).map("\n".join)
LAST = st.lists(st.one_of(TRAILERISH, TRAILERISH, TRAILER_LINE), min_size=1, max_size=5).map("\n".join)
SEPARATOR = st.sampled_from(["\n\n", "\n\n", "\n \n", "\n\r\n", "\n\t\n", "\n"])
TAIL = st.sampled_from(["", "\n", "\n\n", "\n---\nRow: X\n", "\n# end\n", "\nConflicts:\n\tf.c\n", "\n" + SCISSORS])
TRAILER_TEXT = st.builds(
    lambda paras, seps, last, tail: "".join(p + sep for p, sep in zip(paras, seps)) + last + tail,
    st.lists(PARAGRAPH, max_size=3),
    st.lists(SEPARATOR, min_size=3, max_size=3),
    LAST,
    TAIL,
) | st.text(alphabet=st.sampled_from(list("Row:aB -#\n\t\r>8(),\udc80")) | st.characters(codec="utf-8"), max_size=300)


@QUICK
@given(TRAILER_TEXT, st.sampled_from(["hook", "range"]), st.booleans())
def test_trailer_parse_agrees_with_git(message: str, mode: str, final_newline: bool) -> None:
    """Differential: the parser's block is what `git interpret-trailers --parse [--no-divider]` prints,
    with no git config, in the modelled git's final-newline behaviour (tests.checkers.trailer_corpus.
    git_modelled asks the installed git 2.39 about the input 2.46.2 would see)."""
    block = parser.parse(message, mode, final_newline)  # type: ignore[arg-type]
    assert all(t.key for t in block.trailers)
    divider = re.search(r"^---[ \t\n\r]", message, re.M)
    assume(mode == "range" or divider is None or SCISSORS not in message[divider.start() :])  # git 2.39 hangs
    expected = git_modelled(message, no_divider=(mode == "range"), final_newline=final_newline, timeout_s=2)
    assume(expected is not None and expected is not False)  # git 2.39's `---`+scissors hang; no older git
    assert block.render() == expected
