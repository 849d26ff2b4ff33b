"""A generated benchmark repository: N files in this repository's layout, written by one `git fast-import`,
with a `feature` branch that changes a given number of lines (added + deleted) over many files."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# (class name, path template, share of the files); {d} is a folder of 100 files, {n} the file number.
LAYOUT = (
    ("checkers", "checkers/mod{d}/m{n}.py", 0.125),
    ("checker-tests", "tests/checkers/mod{d}/test_m{n}.py", 0.125),
    ("engine-cuda", "engine/cuda/k{d}/kern{n}.cu", 0.15),
    ("engine-python", "engine/ops/p{d}/op{n}.py", 0.30),
    ("engine-tests", "tests/engine/e{d}/test_op{n}.py", 0.15),
    ("docs", "docs/d{d}/page{n}.md", 0.075),
    ("scripts", "scripts/s{d}/tool{n}.sh", 0.05),
)
BASE_LINES, KEEP, DELETED = 40, 10, 20  # each changed file keeps 10 + 10 lines, loses 20, gains the rest
CONFIG = """\
version: 1
base: {{ref: main}}
pr_size:
  classes:
{classes}
    - {{name: records, paths: [".agents/**", ".gitattributes"], budget: null}}
    - {{name: generated, paths: ["gen/**"], budget: null}}
    - {{name: assets, paths: ["assets/**"], budget: null}}
  pairs:
    - {{name: checker-test, when: "checkers/{{d}}/m{{n}}.py", require: "tests/checkers/{{d}}/test_m{{n}}.py"}}
env_doc:
  prefixes: [VT_]
  classes: [kernel-switch, debug, test-only]
"""


@dataclass
class Generated:
    path: Path
    files: int
    changed_files: int
    changed_lines: int
    env_names: int


def generate(dest: Path, total: int = 20_000, change_lines: int = 200_000, per_file: int = 100) -> Generated:
    """Write the repository at `dest` (main: the base; feature, checked out: the change)."""
    added = per_file - DELETED
    n_changed = change_lines // per_file
    fixed = 6  # config, flags, doc, allowlist, .gitattributes, one generated file
    counts = [int(total * share) for _, _, share in LAYOUT]
    counts[3] += total - fixed - sum(counts)
    base: dict[str, bytes] = {}
    env_names: list[str] = []
    numbers: dict[str, int] = {}
    for (_name, template, _), count in zip(LAYOUT, counts):
        for n in range(count):
            path = template.format(d=n // 100, n=n)
            base[path] = _source(path, n, env_names)
            numbers[path] = n
    classes = "\n".join(
        f'    - {{name: {name}, paths: ["{_folder(template)}/**"], budget: 1000000}}' for name, template, _ in LAYOUT
    )
    base[".agents/config.yaml"] = CONFIG.format(classes=classes).encode()
    base["engine/flags.py"] = b'from engine.registry import declare\ndeclare("VT_BENCH_FLAG", False, "ROW-X", "d")\n'
    env_names.append("VT_BENCH_FLAG")
    base["docs/ENVIRONMENT.md"] = (
        "| flag | default | gates | description |\n|---|---|---|---|\n"
        + "".join(f"| `{v}` | OFF | ROW-X | generated |\n" for v in sorted(env_names))
    ).encode()
    base["scripts/env-doc-allowlist.txt"] = b"# NAME  CLASS  reason\n"
    base[".gitattributes"] = b"gen/** linguist-generated\n"
    base["gen/table.py"] = _lines("gen", 0, 50)
    assert len(base) == total, len(base)
    # The change: every k-th file number in each class, so a check and its test (same number) change together;
    # checker pairs sort first, so trimming to the exact count cuts only unpaired files.
    step = max(1, (total - fixed) // n_changed)
    chosen = sorted(
        (p for p, n in numbers.items() if n % step == 0),
        key=lambda p: (not p.startswith(("checkers/", "tests/checkers/")), p),
    )
    feature = {p: _changed(base[p], added) for p in chosen[:n_changed]}
    text_changed = len(feature)
    feature["gen/table.py"] = _lines("gen", 1, 400)
    feature.update({f"assets/blob{i}.bin": bytes((i * 31 + j * 7) % 256 for j in range(4096)) for i in range(8)})
    _fast_import(dest, base, feature)
    return Generated(dest, total, text_changed, text_changed * per_file, len(env_names))


def _folder(template: str) -> str:
    """The literal leading folders of a path template (`engine/cuda` of `engine/cuda/k{d}/kern{n}.cu`)."""
    return "/".join(seg for seg in template.split("/")[:-1] if "{" not in seg)


def _source(path: str, n: int, env_names: list[str]) -> bytes:
    head = b""
    if path.endswith(".py") and n % 10 == 0:
        head = b"import os\nHOME = os.environ.get('HOME')\n"  # parsed, but not in scope
        if path.startswith("engine/ops") and n % 50 == 0:
            env_names.append(f"VT_BENCH_{n}")
            head = f"import os\nFLAG = os.environ.get('VT_BENCH_{n}')\n".encode()
    elif path.endswith(".cu") and n % 100 == 0:
        env_names.append(f"VT_BENCH_CU_{n}")
        head = f'#include <cstdlib>\nstatic const char* flag = std::getenv("VT_BENCH_CU_{n}");\n'.encode()
    return head + _lines(path, n, BASE_LINES - head.count(b"\n"))


def _lines(tag: str, n: int, count: int) -> bytes:
    return "".join(f"# {tag} {n} line {i} value {(n * 7919 + i * 104729) % 1000003}\n" for i in range(count)).encode()


def _changed(old: bytes, added: int) -> bytes:
    lines = old.splitlines(keepends=True)
    return b"".join(lines[:KEEP]) + _lines("new", len(old), added) + b"".join(lines[KEEP + DELETED :])


def _fast_import(dest: Path, base: dict[str, bytes], feature: dict[str, bytes]) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(dest)], check=True, env=env)
    chunks: list[bytes] = []
    for ref, files, mark, parent in (("refs/heads/main", base, 1, None), ("refs/heads/feature", feature, 2, 1)):
        msg = f"{'Base' if parent is None else 'Change'} of the benchmark\n".encode()
        chunks.append(
            f"commit {ref}\nmark :{mark}\ncommitter Bench <bench@example.com> 1767225600 +0000\n"
            f"data {len(msg)}\n".encode()
            + msg
        )
        if parent:
            chunks.append(f"from :{parent}\n".encode())
        for path, data in files.items():
            chunks.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
    subprocess.run(["git", "-C", str(dest), "fast-import", "--quiet"], input=b"".join(chunks), check=True, env=env)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", "-f", "feature"], check=True, env=env)
