"""Reading the engine's flag declarations as AST."""

from __future__ import annotations

import pytest

from checkers.flagdecls import FlagDeclError, parse_flag_decls, read_flag_decls
from checkers.render import render_environment
from tests.conftest import ROOT

SOURCE = """
from engine.flags import declare
declare("VT_A", False, "KERNEL-X", "first")
flags.declare("VT_B", "", "BACKEND-CUDA",
              "second")
other("VT_C", True, "X", "not a declaration")
"""


def test_parses_declarations_in_order_with_lines():
    assert [(d.name, d.default, d.gates, d.doc, d.line) for d in parse_flag_decls(SOURCE)] == [
        ("VT_A", "OFF", "KERNEL-X", "first", 3),
        ("VT_B", "''", "BACKEND-CUDA", "second", 4),
    ]


def test_non_literal_declaration_is_an_error():
    with pytest.raises(FlagDeclError, match=r"engine/flags.py:1: declare\(\) takes literal"):
        parse_flag_decls("declare(NAME, False, 'R', 'd')")


def test_reads_the_engine_registry():
    names = {d.name for d in read_flag_decls(ROOT)}
    assert {"VT_KERNELS", "VT_ATTN_TILED", "VT_EAGER"} <= names


def test_render_environment_writes_one_row_per_flag_in_the_documented_format():
    decls = parse_flag_decls(SOURCE + 'declare("VT_P", "a|b", "ROW-Y", "pipe | inside")\n')
    text = render_environment(decls)
    rows = text.splitlines()[text.splitlines().index("| flag | default | gates | description |") :]
    assert rows == [
        "| flag | default | gates | description |",
        "|---|---|---|---|",
        "| `VT_A` | OFF | KERNEL-X | first |",
        "| `VT_B` | '' | BACKEND-CUDA | second |",
        "| `VT_P` | 'a\\|b' | ROW-Y | pipe \\| inside |",
    ]


def test_the_repository_environment_doc_is_rendered_from_the_registry():
    assert (ROOT / "docs" / "ENVIRONMENT.md").read_text() == render_environment(read_flag_decls(ROOT))
