"""No code outside `engine/` touches a private attribute of `Runner` or `LLM`: the lab, the tests and the scripts
drive the engine through its public API, so what a gate or a benchmark proves is what a user runs.

The private names are read from the two classes' source (their `self._x` assignments and `_x` methods). An
outside module is in breach when it reads or writes `obj._x` for such a name on anything but its own `self`, names
one in a string (getattr, setattr, monkeypatch.setattr), or uses one on `self` inside a Runner or LLM subclass.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSES = {"Runner": ROOT / "engine" / "runner.py", "LLM": ROOT / "engine" / "llm.py"}
OUTSIDE = ("lab", "tests", "scripts")


@cache
def private_names() -> frozenset[str]:
    names: set[str] = set()
    for cls, path in CLASSES.items():
        tree = ast.parse(path.read_text())
        (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
        for n in ast.walk(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("_"):
                if not n.name.startswith("__"):
                    names.add(n.name)
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                if n.attr.startswith("_") and not n.attr.startswith("__"):
                    names.add(n.attr)
    return frozenset(names)


def breaches(source: str, name: str, private: frozenset[str]) -> list[str]:
    """`name:line: what` for each touch of a private Runner/LLM attribute in `source`."""
    tree = ast.parse(source)
    subclass_self: set[int] = set()  # `self` nodes inside a class deriving from Runner or LLM
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and any(
            (isinstance(b, ast.Name) and b.id in CLASSES) or (isinstance(b, ast.Attribute) and b.attr in CLASSES)
            for b in cls.bases
        ):
            subclass_self |= {id(n) for n in ast.walk(cls) if isinstance(n, ast.Name) and n.id == "self"}
    formatted = {id(v) for j in ast.walk(tree) if isinstance(j, ast.JoinedStr) for v in j.values}  # f-string parts
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in private:
            own = isinstance(n.value, ast.Name) and n.value.id in ("self", "cls") and id(n.value) not in subclass_self
            if not own:
                found.append(f"{name}:{n.lineno}: .{n.attr}")
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in private and id(n) not in formatted:
            found.append(f"{name}:{n.lineno}: {n.value!r}")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def test_the_private_names_are_read_from_the_classes() -> None:
    names = private_names()
    assert {"_sample_graphs", "_launch_decode", "_inflight", "_schedule"} <= names
    assert not {"run_step", "sample_step", "runner", "generate"} & names


def test_no_code_outside_the_engine_touches_a_private_attribute() -> None:
    private = private_names()
    found = [
        b
        for top in OUTSIDE
        for path in sorted((ROOT / top).rglob("*.py"))
        if "fixtures" not in path.parts and path != Path(__file__).resolve()  # this file seeds breaches
        for b in breaches(path.read_text(), str(path.relative_to(ROOT)), private)
    ]
    assert not found, "private attributes of Runner or LLM touched outside engine/:\n" + "\n".join(found)


def test_a_seeded_breach_is_named() -> None:
    private = frozenset({"_sample_graphs", "_inflight", "_launch_decode"})
    source = (
        "class Timed(Runner):\n"
        "    def go(self):\n"
        "        return self._launch_decode\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._inflight = None\n"  # its own attribute of the same name: not a breach
        "def swap(llm, monkeypatch):\n"
        "    llm.runner._sample_graphs = {}\n"
        "    monkeypatch.setattr(llm, '_inflight', None)\n"
    )
    assert breaches(source, "m.py", private) == [
        "m.py:3: ._launch_decode",
        "m.py:8: ._sample_graphs",
        "m.py:9: '_inflight'",
    ]
