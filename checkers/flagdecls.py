"""The engine's flag declarations, read as AST from `engine/flags.py` (the toolkit never imports the
engine): each `declare("VT_X", default, "ROW-ID", "doc line")` call is one flag."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .paths import confine

FLAGS_FILE = "engine/flags.py"


@dataclass(frozen=True)
class FlagDecl:
    name: str
    default: str  # rendered as the docs show it: ON/OFF for booleans, the string otherwise
    gates: str
    doc: str
    line: int


class FlagDeclError(ValueError):
    """A declare() call whose arguments are not literals; the message names file and line."""


def read_flag_decls(root: Path, rel: str = FLAGS_FILE, field: str | None = None) -> list[FlagDecl]:
    """The declarations in `rel` (none when it is missing); `field` is the config key naming it, for
    checkers.paths.confine()'s message when `rel` leads out of the repository."""
    path = confine(root, rel, field)
    if not path.is_file():
        return []
    return parse_flag_decls(path.read_text(encoding="utf-8"), rel)


def parse_flag_decls(source: str, rel: str = FLAGS_FILE) -> list[FlagDecl]:
    decls = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        if not (isinstance(node, ast.Call) and _name(node.func) == "declare"):
            continue
        try:
            name, default, gates, doc = (ast.literal_eval(a) for a in node.args[:4])
        except (ValueError, TypeError):
            raise FlagDeclError(f"{rel}:{node.lineno}: declare() takes literal name, default, gates, doc") from None
        shown = ("ON" if default else "OFF") if isinstance(default, bool) else repr(default)
        decls.append(FlagDecl(name, shown, gates, doc, node.lineno))
    return sorted(decls, key=lambda d: d.line)


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None
