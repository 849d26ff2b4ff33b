"""Bounded parsing: record and config YAML refuse anchors, aliases and merge keys and cap size and depth;
every scanner does linear work on adversarial input (asserted by counted steps, not by a clock)."""

from __future__ import annotations

import argparse
import contextlib

import pytest
from ruamel.yaml.error import YAMLError

from checkers.checks.records import agent_record
from checkers.config import load_config
from checkers.context import Context
from checkers.records import load_records
from checkers.results import RecordError
from checkers.yamlio import MAX_YAML_BYTES, parse_yaml
from tests.conftest import GitRepo

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def test_billion_laughs_row_is_a_record_error_not_a_hang(rowgate_repo: GitRepo):
    assert len(LAUGHS) < 1024
    rowgate_repo.write({".agents/rows/GOV-BOMB.yaml": "id: GOV-BOMB\n" + LAUGHS})
    records = load_records(rowgate_repo.path)
    assert [p.lines() for p in records.problems] == [
        [".agents/rows/GOV-BOMB.yaml:2: YAML anchor &a is not allowed in records and config (write the value out)"]
    ]
    ctx = Context(root=rowgate_repo.path, config=load_config(rowgate_repo.path), env={})
    result = agent_record.run(ctx, argparse.Namespace(base=None, head=None, message_file=None))
    assert result.status.value == "fail"


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: *x\n", "1: YAML alias *x is not allowed in records and config (write the value out)"),
        ("base: {a: 1}\nrow:\n  <<: {b: 2}\n", "3: YAML merge key << is not allowed in records and config"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "1: YAML nested deeper than 64"),
    ],
)
def test_aliases_merge_keys_and_depth_are_refused(text, message):
    with pytest.raises(RecordError) as exc:
        parse_yaml(text.encode(), "f.yaml")
    assert exc.value.lines() == [f"f.yaml:{message}"]


def test_a_quoted_merge_key_is_an_ordinary_key():
    assert parse_yaml(b'"<<": 1\n', "f.yaml") == {"<<": 1}


def test_oversized_yaml_is_refused_before_parsing():
    with pytest.raises(RecordError) as exc:
        parse_yaml(b"a: 1\n" * (MAX_YAML_BYTES // 5 + 1), "big.yaml")
    assert exc.value.lines() == [f"big.yaml: file is {(MAX_YAML_BYTES // 5 + 1) * 5} bytes (limit {MAX_YAML_BYTES})"]


def test_config_with_an_alias_names_the_file_and_line(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/config.yaml": "version: 1\nrows:\n  areas: &areas [GOV]\n"})
    with pytest.raises(RecordError) as exc:
        load_config(rowgate_repo.path)
    assert exc.value.lines() == [
        ".agents/config.yaml:3: YAML anchor &areas is not allowed in records and config (write the value out)"
    ]


# --- linear scanners ---------------------------------------------------------------------------------

MB = 1 << 20
ADVERSARIAL = {  # each about 1 MB, each quadratic for a scanner that re-searches from every opener
    "unclosed block comments": "/*" * (MB // 2),
    "unclosed strings with escaped quotes": '"\\' * (MB // 2),
    "unclosed char literals": "'\\" * (MB // 2),
    "alternating openers": ("/* \" ' // \n" * (MB // 12)),
    "unclosed launches": "k<<<" * (MB // 4),
    "unclosed calls": "cublasGemmEx(" * (MB // 13),
    "calls with literals": "cublasGemmEx(1, K);\n" * (MB // 20),
    "unclosed templates": "template <" * (MB // 10) + "gemv_kernel<float><<<1, 2>>>();",
}


@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_comment_blanking_scans_each_character_a_bounded_number_of_times(shape):
    from checkers.checks.gemv_invocation.cuda_sites import blank_comments
    from checkers.linear import Meter

    counts = []
    for size in (MB // 2, MB):
        text = (ADVERSARIAL[shape] * 2)[:size]
        meter = Meter()
        assert len(blank_comments(text, meter)) == len(text)
        counts.append(meter.scanned)
    assert counts[1] <= 3 * MB, counts  # at most three passes over the input
    assert counts[1] <= 2.2 * counts[0], counts  # twice the input, about twice the work


def test_the_gemv_scan_of_adversarial_sources_finishes(tmp_path):
    """One end-to-end pass of the CUDA site scan over every adversarial shape (a quadratic scan of these
    runs for tens of minutes). The subprocess limit is a hang guard, not a performance assertion."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    for name, text in ADVERSARIAL.items():
        (tmp_path / f"{name.replace(' ', '_')}.cu").write_text(text)
    code = (
        "import pathlib, sys\nfrom checkers.checks.env_doc import envscan\n"
        "from checkers.checks.gemv_invocation import Source, check_sources\n"
        "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.cu')):\n"
        "    t = p.read_text(); check_sources([], [Source(p.name, t)], 0)\n"
        "    envscan.c_reads(t, p.name, ('VT_',))\n"
        "print('done')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False
    )
    assert proc.stdout == "done\n", proc.stderr


def test_line_numbers_come_from_one_newline_index():
    from checkers.linear import line_of, newlines

    text = "a\nbb\n\nccc"
    assert [line_of(text, i) for i in range(len(text) + 1)] == [1, 1, 2, 2, 2, 3, 4, 4, 4, 4]
    assert newlines(text) == (1, 4, 5)


# --- every scanner of untrusted text, metered ------------------------------------------------------------
# Each shape is built for a size n (repeating its unit); the scanner runs on about n and 2n characters and
# its meter (checkers.linear.Meter: steps and characters passed over, plus the size of what it returns,
# which a caller then reads) must stay within a few passes of the input and grow about twice. Counts of
# operations, never a clock.


def _nested(open_: str, close: str = ")"):
    return lambda n: open_ * (n // (len(open_) + len(close))) + close * (n // (len(open_) + len(close)))


def _repeat(unit: str, head: str = "", tail: str = ""):
    return lambda n: head + unit * (n // len(unit)) + tail


def _gemv_ops(text: str):
    from checkers.checks.gemv_invocation import LIBRARY_CALL
    from checkers.checks.gemv_invocation import cuda_sites as cu
    from checkers.linear import Meter

    meter = Meter()
    out = cu.launches(text, meter)
    size = sum(len(a) for site in out for a in (*site.config, *site.template_args))
    for call in cu.library_calls(text, LIBRARY_CALL, meter):
        size += sum(len(a) for a in call.args)
    for names in (frozenset({"cublasLtMatrixLayoutCreate"}), frozenset({"cublasLtMatmulAlgoGetHeuristic"})):
        size += sum(len(a.text) for c in cu.call_spans(text, names, meter) for a in c.args)
    return meter.scanned + meter.steps + size


def _env_c_ops(text: str):
    from checkers.checks.env_doc import envscan
    from checkers.linear import Meter

    meter = Meter()
    envscan.c_reads(text, "a.cu", ("VT_",), ("EnvOr",), meter)
    return meter.scanned + meter.steps


def _env_table_ops(text: str):
    from checkers.checks.env_doc.envlists import documented_names
    from checkers.linear import Meter

    meter = Meter()
    documented_names(text, ("flag",), meter)
    return meter.scanned + meter.steps


def _trailer_ops(text: str):
    from checkers.linear import Meter
    from checkers.trailers.parser import parse

    total = 0
    for mode in ("hook", "range"):
        meter = Meter()
        block = parse(text, mode, True, meter)  # type: ignore[arg-type]
        total += meter.scanned + meter.steps + sum(len(t.raw) + len(t.value) for t in block.trailers)
    return total


def _yaml_ops(text: str):
    from checkers.linear import Meter
    from checkers.yamlio import _check_tokens

    meter = Meter()
    with contextlib.suppress(RecordError, YAMLError):
        _check_tokens(text, "f.yaml", 0, meter)
    return meter.scanned + meter.steps


SCANNERS = {
    "gemv: nested library calls": (_gemv_ops, _nested("cublasGemmEx(")),
    "gemv: nested layout calls": (_gemv_ops, _nested("cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, ")),
    "gemv: nested heuristic calls": (_gemv_ops, _nested("cublasLtMatmulAlgoGetHeuristic(h, d, ")),
    "gemv: deep plain parentheses in a call": (_gemv_ops, lambda n: "cublasGemmEx(" + _nested("(")(n) + ")"),
    "gemv: many nested calls as arguments": (_gemv_ops, _repeat("cublasGemmEx(1),", "cublasGemmEx(", "0)")),
    "gemv: launches after a template close": (_gemv_ops, _repeat("x><<<1>>>")),
    "gemv: unclosed launches": (_gemv_ops, _repeat("k<<<")),
    "gemv: nested brackets in a launch": (_gemv_ops, lambda n: "k<<<" + _nested("[", "]")(n) + ">>>"),
    "env-doc C: unclosed comments": (_env_c_ops, _repeat("/*", "getenv(")),
    "env-doc C: unclosed strings": (_env_c_ops, _repeat('"\\', "getenv(")),
    "env-doc C: nested reader calls": (_env_c_ops, _nested("EnvOr(")),
    "env-doc C: concatenated literals": (_env_c_ops, _repeat('"VT_A" ', "getenv(", ")")),
    "env-doc table: one line of pipes": (_env_table_ops, _repeat("|", "| flag |\n|---|\n")),
    "env-doc table: unclosed backticks": (_env_table_ops, _repeat("`a", "| flag |\n|---|\n| ")),
    "env-doc table: many rows": (_env_table_ops, _repeat("| `VT_A` | x |\n", "| flag |\n|---|\n")),
    "trailers: a run of -": (_trailer_ops, _repeat("-", "Title\n\n")),
    "trailers: divider lines": (_trailer_ops, _repeat("---\n", "Title\n\nRow: A\n")),
    "trailers: continuation lines": (_trailer_ops, _repeat(" c\n", "Title\n\nKey: v\n")),
    "trailers: comment lines": (_trailer_ops, _repeat("#\n", "Title\n\nRow: A\n")),
    "trailers: conflicts blocks": (_trailer_ops, _repeat("Conflicts:\n\tf\n", "Title\n\nRow: A\n")),
    "trailers: scissors lines": (
        _trailer_ops,
        _repeat("# ------------------------ >8 ------------------------\n", "T\n\n"),
    ),
    "trailers: key characters without a separator": (_trailer_ops, _repeat("a-", "Title\n\n")),
    "trailers: generated lines in prose": (_trailer_ops, _repeat("Signed-off-by: A\nprose\n", "Title\n\n")),
    "trailers: blank lines": (_trailer_ops, _repeat(" \n", "Title\n\nRow: A\n")),
    "yaml: deep flow sequences": (_yaml_ops, _repeat("[")),
    "yaml: an unclosed quoted scalar": (_yaml_ops, _repeat("x", 'a: "')),
    "yaml: many keys": (_yaml_ops, _repeat("k: v\n")),
    "yaml: a long block sequence": (_yaml_ops, _repeat("- a\n", "a:\n")),
}
N = 1 << 16


@pytest.mark.parametrize("shape", sorted(SCANNERS))
def test_every_scanner_does_linear_work_on_adversarial_input(shape):
    ops_of, build = SCANNERS[shape]
    small, large = build(N), build(2 * N)
    counts = [ops_of(small), ops_of(large)]
    assert counts[1] <= 60 * len(large), counts  # a bounded number of passes over the input
    assert counts[1] <= 2.2 * counts[0], counts  # twice the input, about twice the work
