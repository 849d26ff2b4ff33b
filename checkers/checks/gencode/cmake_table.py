"""The arch feature table as a CMake list of `FEATURE|ARCH,ARCH|DESCRIPTION` cells (vllm.cpp's
cmake/CudaArchFeatures.cmake), read as text: nothing of CMake runs.

Its meaning: a feature is built for the loose intersection of its archs with the requested ones, keeping
only the hits that are literally requested (vllm.cpp's recorded deviation from vLLM: an `a` arch is never
granted for a base request), so a source's expected archs are its feature's archs that were requested, as
for the YAML table. `+PTX` on a cell asks for PTX as well; the arch is compared without it. The table names
no sources: `gencode.sources` maps each source file to its feature.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...paths import confine
from ...results import CheckError

MAX_BYTES = 1 << 20
# a quoted list cell: name|archs|description (the description may hold anything but a quote)
_CELL = re.compile(r'"([A-Za-z0-9][A-Za-z0-9_.-]*)\|([^|"]*)\|[^"]*"')


def load_cmake_table(root: Path, rel: str, sources: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, int]]:
    """feature -> archs (table spellings, `+PTX` dropped), and feature -> the line of its cell."""
    path = confine(root, rel, "gencode.table")
    try:
        if path.stat().st_size > MAX_BYTES:
            raise CheckError(f"{rel}: larger than {MAX_BYTES} bytes; not read as a feature table")
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CheckError(f"cannot read {rel}: {exc.strerror}", "the feature table is the check's input") from None
    archs: dict[str, list[str]] = {}
    lines: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        code = _uncommented(line)
        for m in _CELL.finditer(code):
            cells = [a.strip().removesuffix("+PTX") for a in m.group(2).split(",") if a.strip()]
            archs[m.group(1)] = cells
            lines[m.group(1)] = n
    if not archs:
        raise CheckError(
            f"{rel}: no `FEATURE|ARCH,ARCH|DESCRIPTION` cells found",
            "point gencode.table at the CMake file that declares the feature table",
        )
    if not sources:
        raise CheckError(
            f"{rel} is a CMake feature table, which names no sources",
            "map each CUDA source to its feature under gencode.sources ({file.cu: feature})",
        )
    return archs, lines


def find_cmake_table(root: Path, paths: list[str]) -> tuple[str, list[str]] | None:
    """A tracked CMake file that declares a feature table, and its feature names (for `rowgate init`)."""
    for rel in sorted(p for p in paths if p.endswith(".cmake") or p.endswith("CMakeLists.txt")):
        path = root / rel
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        names = [m.group(1) for line in text.splitlines() for m in _CELL.finditer(_uncommented(line))]
        if len(names) >= 2:  # one cell could be anything; a table has rows
            return rel, names
    return None


def _uncommented(line: str) -> str:
    """The line up to a `#` that is outside a quoted string."""
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            return line[:i]
    return line
