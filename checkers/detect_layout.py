"""Detect a repository's layout for `rowgate init`: env tables, allowlist and getenv wrappers (env-doc), cuBLASLt
heuristic sites (gemv-invocation) and checker/test naming pairs (pr-size), each as a config section with reasons.

Every detector reads the tree as text and never imports or runs it. It returns None when the repository has
nothing of the kind, so `init` leaves that section to its defaults.
"""

from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .checks.env_doc.envscan import C_SUFFIXES, PYTHON_SUFFIXES, c_reads, python_reads
from .checks.gemv_invocation import cuda_sites as cu


@dataclass
class Detected:
    """One check's section of `.agents/config.yaml`, and the human lines `init` prints for it."""

    config: dict[str, object]
    reasons: list[str] = field(default_factory=list)


# Folders that hold no code of the repository's own (vendored, generated, caches).
SKIP_DIRS = frozenset(
    {
        ".git",
        "node_modules",
        "third_party",
        "3rdparty",
        "vendor",
        "external",
        "extern",
        "deps",
        "build",
        "dist",
        "out",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".mypy_cache",
        "site-packages",
    }
)
MAX_FILE_BYTES = 2_000_000  # larger files are data, not sources


def walk(root: Path, suffixes: tuple[str, ...]) -> list[str]:
    """Repository-relative paths of the files with these suffixes, sorted, outside SKIP_DIRS and hidden dirs."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".") and not d.startswith("build"))
        for name in files:
            if name.endswith(suffixes):
                out.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(out)


def _read(root: Path, rel: str) -> str:
    path = root / rel
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return ""
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# --- env-doc ------------------------------------------------------------------------------------------

ENV_HEADERS = ("flag", "variable", "env var", "environment variable", "name", "env")
_NAME = re.compile(r"`([A-Z][A-Z0-9]*_[A-Z0-9_]+)`")
_HEADER_ROW = re.compile(r"^\s*\|([^|\n]+)\|")
_ALLOW_FILE = re.compile(r"(^|/)[^/]*env[^/]*allow[^/]*\.txt$", re.IGNORECASE)
# C/C++/CUDA: a function taking `const char* NAME` whose body calls getenv(NAME); a macro whose body does.
_C_WRAPPER = re.compile(
    r"\b([A-Za-z_]\w*)\s*\(\s*const\s+char\s*\*\s*(?:const\s+)?([A-Za-z_]\w*)[^;{)]*\)\s*"
    r"(?:const\s*)?(?:noexcept\s*)?\{"
)
_C_MACRO = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([A-Za-z_]\w*)[^)]*\)([^\n]*(?:\\\n[^\n]*)*)", re.MULTILINE
)
_PY_WRAPPER = re.compile(r"^[ \t]*def[ \t]+([A-Za-z_]\w*)\(\s*([A-Za-z_]\w*)", re.MULTILINE)
_PY_GETENV = r"(?:os\.environ\.get|os\.getenv|environ\.get|getenv|os\.environ\[)\s*\(?\s*{arg}\b"
_BODY_CHARS = 1200  # how far a wrapper's body is read for its getenv call


def env_doc(root: Path) -> Detected | None:
    """The env tables (by header) in the repository's Markdown, the allowlist and its format, the name
    prefixes they use, and the getenv wrappers of its C/C++/CUDA and Python code (each with its calls)."""
    reasons: list[str] = []
    docs: list[str] = []
    headers: set[str] = set()
    names: Counter[str] = Counter()
    for rel in walk(root, (".md",)):
        text = _read(root, rel)
        found = _env_tables(text)
        if found:
            docs.append(rel)
            headers.update(h for h, _ in found)
            for _, table_names in found:
                names.update(table_names)
            reasons.append(
                f"{rel}: {sum(len(n) for _, n in found)} name(s) in {len(found)} table(s) headed "
                f"{', '.join(sorted({f'`| {h} |`' for h, _ in found}))}"
            )
    allowlists = [rel for rel in walk(root, (".txt",)) if _ALLOW_FILE.search(rel)]
    allow_cfg: dict[str, object] = {}
    if allowlists:
        rel = allowlists[0]
        fmt, allow_names, unsorted = _allowlist_shape(_read(root, rel))
        names.update(allow_names)
        allow_cfg = {"allowlist": rel, "allowlist_format": fmt}
        line = f"{rel}: {len(allow_names)} name(s), " + ("one name per line" if fmt == "names" else "NAME CLASS reason")
        if unsorted:
            allow_cfg["allowlist_sorted"] = False
            line += f"; not sorted ({unsorted[1]} after {unsorted[0]}): allowlist_sorted: false until it is"
        reasons.append(line)
    if not docs and not allowlists:
        return None
    prefixes = _prefixes(names)
    readers = env_readers(root, tuple(prefixes))
    for name, (path, calls) in sorted(readers.items()):
        reasons.append(f"{name}: a getenv wrapper defined in {path}, called with a name {calls} time(s)")
    config: dict[str, object] = {"prefixes": prefixes}
    if docs:
        config["doc"] = docs[0]
        if docs[1:]:
            config["docs"] = docs[1:]
        config["table_headers"] = sorted(headers)
    config.update(allow_cfg)
    if readers:
        config["readers"] = sorted(readers)
    config["flags_file"] = None  # no rowgate flag registry in a foreign tree
    tests = [f"{d}/**" for d in ("tests", "test") if (root / d).is_dir()]
    if tests:
        config["exclude"] = tests
        reasons.append(
            f"{', '.join(tests)} not scanned: a test's reads are not production env vars (drop the "
            "exclude to hold them too)"
        )
    reasons.insert(0, f"env var prefixes {', '.join(prefixes)} (from the documented and allowlisted names)")
    return Detected(config, reasons)


def _env_tables(text: str) -> list[tuple[str, list[str]]]:
    """(first header cell, backticked upper-case names in the first column) of each Markdown table whose first
    header cell is an env-table header."""
    out: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _HEADER_ROW.match(lines[i])
        head = m.group(1).strip().strip("`* ") if m else ""
        if m and head.lower() in ENV_HEADERS and i + 1 < len(lines) and set(lines[i + 1].strip()) <= set("|-: "):
            names: list[str] = []
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                first = lines[i].strip().strip("|").split("|")[0]
                names += _NAME.findall(first)
                i += 1
            if names:
                out.append((head, names))
            continue
        i += 1
    return out


def _allowlist_shape(text: str) -> tuple[str, list[str], tuple[str, str] | None]:
    """The format (`names` when most entries are a lone name), the names, and the first unsorted pair."""
    entries = [line.split("#", 1)[0].split() for line in text.splitlines()]
    entries = [e for e in entries if e]
    lone = sum(1 for e in entries if len(e) == 1)
    fmt = "names" if entries and lone * 2 > len(entries) else "classified"
    names = [e[0] for e in entries]
    unsorted = next(((a, b) for a, b in itertools.pairwise(names) if b < a), None)
    return fmt, names, unsorted


def _prefixes(names: Counter[str]) -> list[str]:
    """The name prefixes (up to the first underscore) that at least 2% of the names share, most used first."""
    counts = Counter(n.split("_", 1)[0] + "_" for n in names.elements())
    total = sum(counts.values()) or 1
    return [p for p, n in counts.most_common() if n * 50 >= total] or ["VT_"]


def env_readers(root: Path, prefixes: tuple[str, ...]) -> dict[str, tuple[str, int]]:
    """getenv wrappers by name: where each is defined, and how many calls pass it a prefixed string literal.
    A wrapper that calls another wrapper with its argument is one too; a wrapper nobody calls with a name is
    left out (it reads nothing the check could name)."""
    sources = {rel: _read(root, rel) for rel in walk(root, C_SUFFIXES + PYTHON_SUFFIXES)}
    sources = {rel: text for rel, text in sources.items() if text}
    defined: dict[str, str] = {}
    bodies: list[tuple[str, str, str, str]] = []  # (name, parameter, body, path)
    for rel, text in sources.items():
        if rel.endswith(PYTHON_SUFFIXES):
            for m in _PY_WRAPPER.finditer(text):
                bodies.append((m.group(1), m.group(2), text[m.end() : m.end() + _BODY_CHARS], rel))
            continue
        code = cu.blank_comments(text) if "getenv" in text else ""
        if not code:
            continue
        for m in _C_WRAPPER.finditer(code):
            bodies.append((m.group(1), m.group(2), code[m.end() : m.end() + _BODY_CHARS], rel))
        for m in _C_MACRO.finditer(code):
            bodies.append((m.group(1), m.group(2), m.group(3), rel))
    callees = ["getenv", "secure_getenv"]
    changed = True
    while changed:  # wrappers of wrappers, to a fixed point (each pass adds a name or stops)
        changed = False
        called = r"\b(?:" + "|".join(map(re.escape, callees)) + r")\s*\(\s*"
        for name, arg, body, rel in bodies:
            if name in defined or name in ("if", "while", "for", "switch", "return", "sizeof"):
                continue
            arg_re = re.escape(arg)
            if re.search(called + arg_re + r"\b", body) or (
                rel.endswith(PYTHON_SUFFIXES) and re.search(_PY_GETENV.replace("{arg}", arg_re), body)
            ):
                defined[name] = rel
                callees.append(name)
                changed = True
    out: dict[str, tuple[str, int]] = {}
    for name, rel in defined.items():
        n = 0
        for path, text in sources.items():
            if name in text:  # the calls env-doc will see: comments and strings excluded, as it reads them
                scan = python_reads if path.endswith(PYTHON_SUFFIXES) else c_reads
                n += len(scan(text, path, prefixes, (name,))) - len(scan(text, path, prefixes))
        if n:
            out[name] = (rel, n)
    return out


# --- gemv-invocation ------------------------------------------------------------------------------------

_HEURISTIC = re.compile(r"\bcublasLtMatmulAlgoGetHeuristic\s*\(")


def gemv_invocation(root: Path) -> Detected | None:
    """The cuBLASLt rule set over the sources that call cublasLtMatmulAlgoGetHeuristic, or None."""
    files: list[tuple[str, int]] = []
    for rel in walk(root, (".cu", ".cuh", ".cpp", ".cc", ".hip")):
        text = _read(root, rel)
        if "cublasLtMatmulAlgoGetHeuristic" not in text:
            continue
        calls = len(_HEURISTIC.findall(cu.blank_comments(text)))
        if calls:
            files.append((rel, calls))
    if not files:
        return None
    total = sum(n for _, n in files)
    reasons = [f"{rel}: {n} cublasLtMatmulAlgoGetHeuristic call(s)" for rel, n in files]
    reasons.append(
        f"gemv-invocation runs the cuBLASLt rule set over {len(files)} file(s): C/D layouts take the "
        "caller's out dtype; each requestedAlgoCount is a named constant behind its marker"
    )
    config: dict[str, object] = {
        "rule_sets": ["cublaslt"],
        "python": [],
        "cuda": [rel for rel, _ in files],
        "min_sites": total,
    }
    return Detected(config, reasons)


# --- pr-size pairs --------------------------------------------------------------------------------------

_CHECKER = re.compile(r"^(?P<dir>(?:[^/]+/)*)(?P<prefix>check[-_])(?P<name>[A-Za-z0-9][A-Za-z0-9_-]*)\.py$")


def pr_size_pairs(root: Path) -> Detected | None:
    """Pairing rules for checker scripts and their tests: for each folder of `check-*.py`/`check_*.py`
    scripts, the test folder and naming (`test_check_{name}.py`, `test_{name}.py`, kebab-case written as
    snake_case) that most of its checkers already have a test under."""
    paths = walk(root, (".py",))
    present = set(paths)
    tests_by_base: dict[str, list[str]] = {}
    for p in paths:
        base = p.rsplit("/", 1)[-1]
        if base.startswith("test_"):
            tests_by_base.setdefault(base, []).append(p)
    groups: dict[tuple[str, str], list[str]] = {}
    for p in paths:
        m = _CHECKER.match(p)
        if m and not m.group("dir").startswith(("tests/", "test/")):
            groups.setdefault((m.group("dir"), m.group("prefix")), []).append(m.group("name"))
    rules: list[dict[str, object]] = []
    reasons: list[str] = []
    for (folder, prefix), names in sorted(groups.items()):
        votes: Counter[tuple[str, bool]] = Counter()  # (test folder, whether the test keeps `check_`)
        for name in names:
            snake = name.replace("-", "_")
            for keep, base in ((True, f"test_check_{snake}.py"), (False, f"test_{snake}.py")):
                for t in tests_by_base.get(base, []):
                    votes[(t.rsplit("/", 1)[0] + "/", keep)] += 1
        if not votes:
            continue
        test_dir = votes.most_common(1)[0][0][0]
        kinds = {keep for (d, keep) in votes if d == test_dir}
        templates = [f"{test_dir}test_check_{{name|snake}}.py"] if True in kinds else []
        templates += [f"{test_dir}test_{{name|snake}}.py"] if False in kinds else []
        paired = sum(
            1 for n in names if any(t.replace("{name|snake}", n.replace("-", "_")) in present for t in templates)
        )
        when = f"{folder}{prefix}{{name}}.py"
        rule_name = (folder.strip("/").replace("/", "-").replace("_", "-").lower() or "root") + "-checker-test"
        rules.append({"name": rule_name, "when": when, "require": templates[0] if len(templates) == 1 else templates})
        reasons.append(
            f"{when} pairs with {' or '.join(templates)}: {paired} of {len(names)} checkers have their test today"
        )
    if not rules:
        return None
    return Detected({"pairs": rules}, reasons)


# --- the sections together ------------------------------------------------------------------------------

DETECTORS = (("env_doc", env_doc), ("gemv", gemv_invocation), ("pr_size", pr_size_pairs))


def detect(root: Path) -> dict[str, Detected]:
    """Every detector's section that found something, keyed by its config section."""
    return {key: found for key, fn in DETECTORS if (found := fn(root)) is not None}


def main(argv: list[str] | None = None) -> int:
    """`python -m checkers.detect_layout [ROOT]`: print the detected sections as YAML, reasons as comments."""
    import sys

    from ruamel.yaml import YAML

    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".")
    yaml = YAML()
    for key, found in detect(root).items():
        for reason in found.reasons:
            print(f"# {reason}")
        yaml.dump({key: found.config}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
