"""Fuzzing the inputs rowgate parses: whatever the bytes, each parser returns or raises its own error type
(which the commands report in one line); nothing else escapes. Small example counts keep it CI-quick."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers.checks.gencode import fatbin, nvcc_flags
from checkers.config import parse_config
from checkers.results import RecordError
from checkers.trailers import parser
from checkers.yamlio import parse_yaml

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


@QUICK
@given(
    st.text(alphabet=st.sampled_from(list("Row:aB -#\n\t\r>8(),")) | st.characters(), max_size=300),
    st.sampled_from(["hook", "range"]),
)
def test_trailer_parse_never_raises(message: str, mode: str) -> None:
    block = parser.parse(message, mode)  # type: ignore[arg-type]
    assert all(t.key for t in block.trailers)
