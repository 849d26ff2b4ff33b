"""The import graph of `checkers`, `engine` and `lab`, read from the AST: no circle, `engine` never imports `lab`,
no import running up the engine's layers (ENGINE_LAYERS), and no lazy import without a reason.

Every `import` and `from ... import` counts, at module level and inside functions: a circle hidden
behind a function-level import is still a circle. A function-level import in `engine` must say why it
is not at the top (`# why: ...` on its line or the line above): start-up time or an optional package.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("checkers", "engine", "lab")
WHY_PACKAGES = ("engine", "lab")  # checkers' function-level imports are reasoned in its own layout work


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module, line, at function level) for every import of a first-party module in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nested = {
        id(n)
        for top in ast.walk(tree)
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(top)
        if isinstance(n, (ast.Import, ast.ImportFrom))
    }
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                base = ".".join(up[: len(up) - node.level + 1] + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a module: its nearest known module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append((target, node.lineno, id(node) in nested))
    return found


@cache
def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: {t for t, _, _ in imports(name, path, known)} for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (Tarjan), as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_circle(sorted(component), edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _circle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest closed path through the component's first module (breadth first, inside the component)."""
    start, inside = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v] & inside):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return component


def test_no_import_circle() -> None:
    found = cycles(graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_finder_names_a_seeded_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_are_seen(tmp_path: Path) -> None:
    """The graph counts an import inside a function, so a circle cannot hide behind one."""
    path = ROOT / "lab" / "cli.py"
    found = imports("lab.cli", path, set(modules()))
    line = path.read_text().splitlines().index("from lab.gates.cli import add_gate_parser") + 1
    assert ("lab.gates.cli", line, False) in [(t, n, lazy) for t, n, lazy in found if t == "lab.gates.cli"]
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from engine import kernels\n")
    assert imports("engine.m", src, {"engine", "engine.kernels"}) == [("engine.kernels", 2, True)]


def missing_why(path: Path) -> list[str]:
    """Each function-level import of `path` without `# why:` on its line or the line above."""
    lines = path.read_text().splitlines()
    missing = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            span = lines[max(node.lineno - 2, 0) : node.end_lineno or node.lineno]  # the line above, the statement
            if not any("# why:" in ln for ln in span):
                missing.append(f"{path}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return missing


@pytest.mark.parametrize("package", WHY_PACKAGES)
def test_function_level_imports_say_why(package: str) -> None:
    missing = [m for name, path in modules().items() if name.startswith(package) for m in missing_why(path)]
    assert not missing, "function-level imports without a `# why:` reason:\n" + "\n".join(missing)


def test_a_lazy_import_without_a_reason_is_named(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    import json\n\n\ndef g():\n    # why: seconds to import\n    import torch\n")
    assert missing_why(src) == [f"{src}:2: import json"]


def test_engine_ops_imports_neither_the_bindings_nor_the_flags() -> None:
    edges = graph()
    impure = {
        m: sorted(t for t in ts if t.startswith("engine.cuda") or t == "engine.flags")
        for m, ts in edges.items()
        if m.startswith("engine.ops")
    }
    assert not {m: ts for m, ts in impure.items() if ts}, impure
    assert edges["engine.ops.norm"] == {"engine.ops._check"}  # the graph does see ops' own imports


# The one arrow between the top-level packages: the lab drives the engine. The engine never imports the lab
# (a user's install runs without it), and checkers imports neither (it is the governance toolkit).
ALLOWED_ACROSS = {("lab", "engine")}


def crossings(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each import from one top-level package into another that ALLOWED_ACROSS does not allow."""
    return sorted(
        (m, t)
        for m, ts in edges.items()
        for t in ts
        if m.split(".")[0] != t.split(".")[0] and (m.split(".")[0], t.split(".")[0]) not in ALLOWED_ACROSS
    )


def test_the_halves_stay_apart() -> None:
    edges = graph()
    assert not crossings(edges)
    assert any(t.startswith("engine") for m, ts in edges.items() if m.startswith("lab") for t in ts)  # sees lab


def test_an_engine_import_of_the_lab_is_named() -> None:
    edges = {"lab.gates.tokens": {"engine.llm"}, "engine.runner": {"lab.bench.timing", "engine.flags"}}
    assert crossings(edges) == [("engine.runner", "lab.bench.timing")]


# The engine's layers, top to bottom: an import runs down (or within a layer), never up. A module's layer is
# that of its top-level part (engine.model.qwen3 is engine.model's), or its own where a layer names it
# (the kernel table's package, its families and its machinery).
ENGINE_LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer)
    for layer in (
        {"engine", "engine.__main__", "engine.cli"},  # the command line and the package's lazy API
        {"engine.serve"},  # the OpenAI-compatible server, a client of LLM
        {"engine.llm", "engine.cli_args"},  # the serving API
        {"engine.scheduler", "engine.requests", "engine.distributed"},  # distributed: the ranks of a sharded runner
        {"engine.runner"},  # the one decode program and the serving steps
        {
            "engine.sampler",
            "engine.block_manager",
            "engine.sequence",
            "engine.staging",
            "engine.penalties",
            "engine.logprobs",
            "engine.sampling_params",
            "engine.chat",  # the checkpoint's chat template: LLM.chat and the server's chat endpoint render it
            "engine.data",
        },
        {"engine.model"},
        {"engine.kernels"},  # the kernel table, assembled (engine/kernels/__init__.py registers the families' ops)
        {  # one module per family: its predicates, adapters and ops; none imports another
            "engine.kernels.act",
            "engine.kernels.attention",
            "engine.kernels.gdn",
            "engine.kernels.gemv",
            "engine.kernels.kv_store",
            "engine.kernels.layer",
            "engine.kernels.moe",
            "engine.kernels.norm",
            "engine.kernels.quant",
            "engine.kernels.rope",
            "engine.kernels.sample",
        },
        {"engine.kernels.table"},  # the machinery: Op, Arm, the table, the counters
        {"engine.ops", "engine.cuda"},  # the references and the kernels' bindings
        {"engine.flags"},
    )
)
# Up-arrows that exist, each with its reason; a new one fails the test below, a fixed one must leave this list.
KNOWN_UP: dict[tuple[str, str], str] = {}


def engine_part(module: str) -> str:
    """The part of ENGINE_LAYERS a module belongs to: itself where a layer names it (engine.kernels.table), else
    its top-level part (engine.model.qwen3 is engine.model)."""
    if any(module in layer for layer in ENGINE_LAYERS):
        return module
    return ".".join(module.split(".")[:2])


def engine_layer(module: str) -> int:
    part = engine_part(module)
    for i, layer in enumerate(ENGINE_LAYERS):
        if part in layer:
            return i
    raise KeyError(f"{module}: in no layer of ENGINE_LAYERS (add its top-level part to one)")


def up_arrows(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer's part, imported part) of each engine import that runs up a layer."""
    return {
        (engine_part(m), engine_part(t))
        for m, ts in edges.items()
        if m.startswith("engine")
        for t in ts
        if t.startswith("engine") and engine_layer(t) < engine_layer(m)
    }


def test_no_arrow_runs_back_up_inside_the_engine() -> None:
    edges = graph()
    assert {m for m in edges if m.startswith("engine")}, "the graph read no engine module"
    assert up_arrows(edges) == set(KNOWN_UP), "engine imports that run up a layer (see ENGINE_LAYERS)"


def test_an_arrow_up_is_named() -> None:
    edges = {"engine.kernels": {"engine.model.qwen3", "engine.flags"}, "engine.runner": {"engine.model"}}
    assert up_arrows(edges) == {("engine.kernels", "engine.model")}


def test_the_kernel_tables_machinery_never_imports_a_family() -> None:
    """The table's own modules are layered finer than their top-level part: table below the families below the
    package that registers them."""
    edges = {"engine.kernels.table": {"engine.kernels.gemv"}, "engine.kernels.gemv": {"engine.kernels.table"}}
    assert up_arrows(edges) == {("engine.kernels.table", "engine.kernels.gemv")}
    assert up_arrows({"engine.kernels.gemv": {"engine.kernels"}}) == {("engine.kernels.gemv", "engine.kernels")}


def test_every_kernel_module_is_named_and_each_family_stands_alone() -> None:
    edges = graph()
    kernel_modules = [m for m in edges if m.startswith("engine.kernels.")]
    assert kernel_modules, "the graph read no module of engine/kernels/"
    unnamed = [m for m in kernel_modules if engine_part(m) != m]
    assert not unnamed, f"name these in ENGINE_LAYERS: {unnamed}"
    families = next(layer for layer in ENGINE_LAYERS if "engine.kernels.gemv" in layer)
    crossing = sorted((m, t) for m in families for t in edges[m] if t in families)
    assert not crossing, f"a kernel family imports another (share it through engine/kernels/table.py): {crossing}"
