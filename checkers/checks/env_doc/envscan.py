"""Find environment variable reads: Python by AST (aliases included), C/C++/CUDA `getenv` by tokens."""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

from ...linear import Meter, line_of

PYTHON_SUFFIXES = (".py", ".pyi")
C_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".cu", ".cuh", ".inl")
SOURCE_GLOBS = tuple(f"**/*{suffix}" for suffix in PYTHON_SUFFIXES + C_SUFFIXES)  # the files scanned
_GETENV = ("getenv", "secure_getenv")
_ENVIRON_METHODS = ("get", "setdefault", "pop")


@dataclass(frozen=True)
class EnvRead:
    name: str
    path: str
    line: int


def scan_source(data: bytes, path: str, prefixes: tuple[str, ...], readers: tuple[str, ...] = ()) -> list[EnvRead]:
    """The reads in one file's bytes (read once by the caller); cheap byte tests skip most files. `readers`
    names the repository's own getenv wrappers (functions or macros, plain or dotted): the first string
    argument of a call of one is a read too."""
    wrapped = bool(readers) and any(r.rsplit(".", 1)[-1].encode() in data for r in readers)
    if path.endswith(PYTHON_SUFFIXES):
        # A Python read names its variable in full in the file (a literal or a module constant), so a file
        # without a prefix in its bytes has none; most files are skipped without parsing.
        if (b"environ" in data or b"getenv" in data or wrapped) and any(p.encode() in data for p in prefixes):
            return python_reads(data.decode("utf-8", errors="replace"), path, prefixes, readers)
    elif path.endswith(C_SUFFIXES) and (b"getenv" in data or wrapped):
        return c_reads(data.decode("utf-8", errors="replace"), path, prefixes, readers)
    return []


# --- Python ---------------------------------------------------------------------


def python_reads(source: str, path: str, prefixes: tuple[str, ...], readers: tuple[str, ...] = ()) -> list[EnvRead]:
    """`os.environ.get/[...]/setdefault/pop`, `in os.environ`, `os.getenv`, with `os`, `environ` and
    `getenv` under any alias, and calls of the `readers` (`flags.enabled("VT_X")` matches `enabled` or
    `flags.enabled`); a key may be a literal or a module-level string constant."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError:
        return _python_text_reads(source, path, prefixes)
    os_names, environ_names, getenv_names, consts = {"os"}, set(), set(), {}
    nodes = list(ast.walk(tree))  # walked once: the three passes below each read every node
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "os" or (a.name.startswith("os.") and not a.asname):
                    os_names.add(a.asname or "os")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for a in node.names:
                if a.name == "environ":
                    environ_names.add(a.asname or a.name)
                elif a.name == "getenv":
                    getenv_names.add(a.asname or a.name)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            consts[node.targets[0].id] = node.value.value
    for node in nodes:  # `env = os.environ` style aliases, once the imports are known
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if _is_environ(node.value, os_names, environ_names):
                environ_names.add(node.targets[0].id)
            elif _is_getenv(node.value, os_names, getenv_names):
                getenv_names.add(node.targets[0].id)

    def key(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        return consts.get(expr.id) if isinstance(expr, ast.Name) else None

    reads = []
    for node in nodes:
        name = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if (
                _is_getenv(f, os_names, getenv_names)
                or (
                    isinstance(f, ast.Attribute)
                    and f.attr in _ENVIRON_METHODS
                    and _is_environ(f.value, os_names, environ_names)
                )
                or (readers and _is_reader(f, readers))
            ):
                name = key(node.args[0])
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _is_environ(node.value, os_names, environ_names)
        ):
            name = key(node.slice)
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and _is_environ(node.comparators[0], os_names, environ_names)
        ):
            name = key(node.left)
        if name and name.startswith(prefixes):
            reads.append(EnvRead(name, path, getattr(node, "lineno", 0)))
    return sorted(reads, key=lambda r: r.line)


_PY_TEXT_READ = re.compile(r"""(?:getenv|environ(?:\.get|\.setdefault|\.pop)?)\s*[(\[]\s*(['"])(\w+)\1""")


def _python_text_reads(source: str, path: str, prefixes: tuple[str, ...]) -> list[EnvRead]:
    """A file that does not parse (a template, newer syntax) still has its literal reads found by text."""
    return [
        EnvRead(m.group(2), path, source.count("\n", 0, m.start()) + 1)
        for m in _PY_TEXT_READ.finditer(source)
        if m.group(2).startswith(prefixes)
    ]


def _is_reader(func: ast.expr, readers: tuple[str, ...]) -> bool:
    """A call of a reader, by its dotted name (`flags.enabled`) or its last part (`enabled`)."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return bool(parts) and parts[0] in readers
    dotted = ".".join([func.id, *reversed(parts)])
    return dotted in readers or (parts[0] if parts else func.id) in readers


def _is_environ(expr: ast.expr, os_names: set[str], environ_names: set[str]) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in environ_names
    return (
        isinstance(expr, ast.Attribute)
        and expr.attr == "environ"
        and isinstance(expr.value, ast.Name)
        and expr.value.id in os_names
    )


def _is_getenv(expr: ast.expr, os_names: set[str], getenv_names: set[str]) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in getenv_names
    return (
        isinstance(expr, ast.Attribute)
        and expr.attr == "getenv"
        and isinstance(expr.value, ast.Name)
        and expr.value.id in os_names
    )


# --- C, C++, CUDA -----------------------------------------------------------------

_C_TOKEN = re.compile(
    r"""
    (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\((?:.*?\)(?P=delim)"|.*\Z))
  | (?P<number>\.?[0-9](?:[eEpP][+-]|'?[0-9A-Za-z_.])*+)
  | (?P<string>(?:u8|[uUL])?"(?:[^"\\\n]|\\.)*+"?)
  | (?P<char>(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*+'?)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<punct>[(),])
  | (?P<other>[^\s"'A-Za-z0-9_(),/.]+|[/.])
""",
    re.S | re.X,
)
_SPLICE = re.compile(r"\\\r?\n")


def c_reads(
    source: str, path: str, prefixes: tuple[str, ...], readers: tuple[str, ...] = (), meter: Meter | None = None
) -> list[EnvRead]:
    """`getenv("X")`, `std::getenv("X")`, `secure_getenv`, and `READER("X", ...)` for each of the
    repository's wrappers in `readers`: comments and string and char literals are tokens of their own (so
    a `getenv` inside them is no read; C++ raw strings `R"d(...)d"` and numbers with digit separators
    `1'000` too), line splices are joined first, and adjacent string literals are
    concatenated, as the compiler does. `meter` counts the tokenizer's spans and each token a loop visits."""
    text, splices = _join_splices(source.replace("\r\n", "\n"))
    tokens = []
    for m in _C_TOKEN.finditer(text):
        if meter:
            meter.add(m.start(), m.end())
        if m.lastgroup != "comment":
            tokens.append((m.lastgroup, m.group(), m.start()))
    calls = frozenset(_GETENV) | frozenset(r.rsplit("::", 1)[-1].rsplit(".", 1)[-1] for r in readers)
    reads = []
    for i, (kind, value, pos) in enumerate(tokens):
        if meter:
            meter.steps += 1
        if kind != "ident" or value not in calls or i + 2 >= len(tokens) or tokens[i + 1][1] != "(":
            continue
        parts, j = [], i + 2
        while (
            j < len(tokens)
            and tokens[j][0] == "string"
            and tokens[j][1].endswith('"')
            and len(tokens[j][1]) > tokens[j][1].index('"') + 1
        ):
            parts.append(tokens[j][1][tokens[j][1].index('"') + 1 : -1])
            if meter:
                meter.add(0, len(tokens[j][1]))
            j += 1
        if parts and j < len(tokens) and tokens[j][1] in (")", ","):
            name = "".join(parts)
            if name.startswith(prefixes):
                reads.append(EnvRead(name, path, _line(text, splices, pos)))
    return reads


def _join_splices(text: str) -> tuple[str, list[int]]:
    """Remove backslash-newline splices; returns the joined text and the joined offsets where each was."""
    out, splices, last, removed = [], [], 0, 0
    for m in _SPLICE.finditer(text):
        out.append(text[last : m.start()])
        removed += m.end() - m.start()
        splices.append(m.end() - removed)
        last = m.end()
    out.append(text[last:])
    return "".join(out), splices


def _line(text: str, splices: list[int], pos: int) -> int:
    return line_of(text, pos) + bisect.bisect_right(splices, pos)
