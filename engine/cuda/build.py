"""Compile each CUDA source with the -gencode flags its feature-table entry derives, cache by content hash, load it.

`python -m engine.cuda.build --fat --out DIR` compiles every source for every arch the table
allows (CI); `load("paged_attn.cu")` compiles for the local GPU on first use (JIT) and returns
the ctypes library.

An object's name is the hash of its source, the headers it includes, flags and nvcc (`object_path`), so an
output directory is a cache. The suite's sm_90 warnings-as-errors compile tests take the fat `--werror` build's
object of a source (found by that name, which covers sm_90) instead of compiling it again; scripts/test.sh tells
pytest where its fat build writes and while which process runs it (tests/engine/cuda/nvcc_strict.py).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from engine import flags

CUDA_DIR = Path(__file__).resolve().parent
REPO_ROOT = CUDA_DIR.parent.parent
TABLE_PATH = CUDA_DIR / "arch_features.yaml"
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
MANIFEST = "manifest.json"  # in the output dir: source -> object, read by the gencode check
BASE_FLAGS = ("-O3", "-std=c++17", "-shared", "-lineinfo", "-Xcompiler", "-fPIC,-fvisibility=hidden")
WERROR_FLAGS = ("-Werror", "all-warnings", "-Xcompiler", "-Wall,-Werror")
_ARCH_RE = re.compile(r"^(\d{1,3})\.(\d)([af]?)$")


class BuildError(RuntimeError):
    """A build failure whose message names the source, the command and nvcc's output."""


@dataclass(frozen=True)
class FeatureTable:
    features: dict[str, tuple[str, ...]]  # feature -> archs in table order ("9.0", "9.0a")
    sources: dict[str, str]  # source file name -> feature
    path: Path

    def union(self) -> list[str]:
        seen: dict[str, None] = {}
        for archs in self.features.values():
            seen.update(dict.fromkeys(archs))
        return sorted(seen, key=arch_sort_key)


@dataclass(frozen=True)
class BuildResult:
    source: Path
    obj: Path
    archs: tuple[str, ...]
    cached: bool
    seconds: float


def arch_code(arch: str) -> str:
    """'9.0a' -> '90a', '12.0' -> '120' (the number in sm_XX/compute_XX)."""
    m = _ARCH_RE.match(arch)
    if not m:
        raise BuildError(f"arch {arch!r}: expected a spelling like 8.0, 9.0, 9.0a, 12.0a")
    return f"{m.group(1)}{m.group(2)}{m.group(3)}"


def arch_sort_key(arch: str) -> tuple[int, int, str]:
    m = _ARCH_RE.match(arch)
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else (0, 0, arch)


def load_table(path: Path = TABLE_PATH) -> FeatureTable:
    # why: importing the engine never needs it, only a build
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(Path(path).read_text())
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("features"), dict)
        or not isinstance(data.get("sources"), dict)
    ):
        raise BuildError(f"{path}: expected top-level mappings 'features' and 'sources'")
    features: dict[str, tuple[str, ...]] = {}
    for name, entry in data["features"].items():
        archs = entry.get("archs") if isinstance(entry, dict) else None
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise BuildError(f'{path}: features.{name}.archs must be a list of quoted strings like "9.0"')
        for a in archs:
            try:
                arch_code(a)
            except BuildError as e:
                raise BuildError(f"{path}: features.{name}.archs: {e}") from None
        features[str(name)] = tuple(archs)
    sources = {str(k): str(v) for k, v in data["sources"].items()}
    for src, feat in sources.items():
        if feat not in features:
            raise BuildError(f"{path}: sources.{src} names feature {feat!r}, which is not under features")
    return FeatureTable(features, sources, Path(path))


def parse_archs(text: str) -> list[str]:
    archs = [a.strip() for a in text.split(",") if a.strip()]
    for a in archs:
        try:
            arch_code(a)
        except BuildError as e:
            raise BuildError(f"VT_CUDA_ARCHS: {e}") from None
    return archs


def local_archs() -> list[str]:
    """The local GPU's arch and its arch-specific twin (both run there), e.g. ['9.0', '9.0a']."""
    major = minor = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
    else:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            major, minor = (int(x) for x in out.split()[0].split("."))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            raise BuildError("no local GPU found for a JIT build: set VT_CUDA_ARCHS (e.g. 9.0) or use --fat") from None
    return [f"{major}.{minor}", f"{major}.{minor}a"]


def requested_archs(table: FeatureTable, fat: bool, settings: flags.FlagSnapshot | None = None) -> list[str]:
    """VT_CUDA_ARCHS of `settings` (default: the environment, read now), else the table's union or the local GPU."""
    env = (settings or flags.FlagSnapshot.from_env()).value("VT_CUDA_ARCHS")
    if env.strip():
        return parse_archs(env)
    return table.union() if fat else local_archs()


def archs_for(table: FeatureTable, source: str, requested: list[str]) -> tuple[str, ...]:
    """The source's feature archs that were requested; an empty intersection is an error, never a skip."""
    if source not in table.sources:
        raise BuildError(f"{source}: not listed under 'sources' in {table.path}: add `{source}: <feature>`")
    feature = table.sources[source]
    archs = tuple(a for a in table.features[feature] if a in requested)
    if not archs:
        raise BuildError(
            f"{source}: feature {feature!r} archs {list(table.features[feature])} "
            f"share no arch with the requested {requested}"
        )
    return archs


def gencode_flags(archs: tuple[str, ...] | list[str]) -> list[str]:
    """SASS and PTX for every arch, so the audit can hold both lists to the table."""
    out: list[str] = []
    for a in archs:
        c = arch_code(a)
        out += ["-gencode", f"arch=compute_{c},code=[sm_{c},compute_{c}]"]
    return out


_VERSION: dict[str, str] = {}


def compiler_version() -> str:
    if NVCC not in _VERSION:
        try:
            _VERSION[NVCC] = subprocess.run(
                [NVCC, "--version"], capture_output=True, text=True, timeout=60, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise BuildError(f"cannot run {NVCC} --version: {e}") from None
    return _VERSION[NVCC]


def content_hash(source: Path, nvcc_flags: list[str], version: str) -> str:
    """Hash of the source, the headers beside it that it includes (transitively), the flags and the compiler
    version: a header's change rebuilds the sources that include it, and only those."""
    h = hashlib.sha256()
    h.update(source.read_bytes())
    for header in sorted(included(source) - {source}):
        h.update(header.name.encode() + b"\0" + header.read_bytes())
    h.update("\0".join(nvcc_flags).encode())
    h.update(version.encode())
    return h.hexdigest()


_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def included(source: Path) -> set[Path]:
    """The source and every header beside it that it includes, transitively (`#include "name"`)."""
    seen: set[Path] = set()
    todo = [source]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        todo += [path.parent / name for name in _INCLUDE_RE.findall(path.read_text(errors="replace"))]
    return seen


def include_bytes(source: Path) -> int:
    """The bytes of `included(source)`: the build's estimate of a source's compile time (its template
    instantiations grow with it), to start the slowest first."""
    return sum(p.stat().st_size for p in included(source))


def cache_dir(settings: flags.FlagSnapshot | None = None) -> Path:
    env = (settings or flags.FlagSnapshot.from_env()).value("VT_CUDA_CACHE")
    return Path(env).expanduser() if env.strip() else Path.home() / ".cache" / "rowgate" / "cuda"


NVLINK_TEMP_RACE = "nvlink fatal   : Could not read file"  # nvcc --threads losing a temporary file


def compile_flags(archs: tuple[str, ...], *, werror: bool) -> list[str]:
    return [*BASE_FLAGS, *(WERROR_FLAGS if werror else ()), *gencode_flags(archs)]


def object_path(source: Path, archs: tuple[str, ...], out_dir: Path, *, werror: bool = False) -> Path:
    """Where compile_source writes, and looks for, the object of the source as it is now, these archs and flags."""
    digest = content_hash(source, compile_flags(archs, werror=werror), compiler_version())
    return out_dir / f"{source.stem}-{digest[:16]}.so"


def compile_source(source: Path, archs: tuple[str, ...], out_dir: Path, *, werror: bool = False) -> BuildResult:
    """One nvcc invocation per source; a hit in out_dir (same content hash) skips nvcc."""
    t0 = time.perf_counter()
    nvcc_flags = compile_flags(archs, werror=werror)
    obj = object_path(source, archs, out_dir, werror=werror)
    out_dir.mkdir(parents=True, exist_ok=True)
    if obj.exists():
        return BuildResult(source, obj, archs, True, time.perf_counter() - t0)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    cmd = [NVCC, "--threads", str(os.cpu_count() or 1), *nvcc_flags, "-o", tmp, str(source)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0 and NVLINK_TEMP_RACE in proc.stderr:
            # nvcc's multi-threaded device link can lose one of its own temporary files; a serial rerun of
            # the same command does not race, and a real error fails it the same way
            cmd = [NVCC, "--threads", "1", *nvcc_flags, "-o", tmp, str(source)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        os.unlink(tmp)
        raise BuildError(f"{source}: nvcc timed out\ncommand: {' '.join(cmd)}") from None
    if proc.returncode != 0:
        os.unlink(tmp)
        raise BuildError(
            f"{source}: nvcc failed (exit {proc.returncode})\ncommand: {' '.join(cmd)}\n"
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    os.replace(tmp, obj)  # atomic: a concurrent build never loads a half-written object
    return BuildResult(source, obj, archs, False, time.perf_counter() - t0)


def source_label(source: Path) -> str:
    """The repo-relative path when the source is in this repository, else the absolute path."""
    try:
        return source.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return source.resolve().as_posix()


def write_manifest(out_dir: Path, results: list[BuildResult], requested: list[str]) -> None:
    """source -> its latest object, the archs compiled and the arch list requested (the audit's default)."""
    path = out_dir / MANIFEST
    # Processes sharing a cache build at once (the gates run side by side): the read-modify-write and the rename of
    # its temporary file hold a lock, so no entry is lost and no writer moves another's file.
    with open(out_dir / (MANIFEST + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {}
        for r in results:
            data[source_label(r.source)] = {"object": r.obj.name, "archs": list(r.archs), "requested": requested}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)


def build(
    names: list[str] | None = None,
    *,
    fat: bool = False,
    out_dir: Path | None = None,
    table: FeatureTable | None = None,
    src_dir: Path = CUDA_DIR,
    werror: bool = False,
    progress: Callable[[BuildResult, int, int], None] | None = None,
    settings: flags.FlagSnapshot | None = None,
) -> list[BuildResult]:
    """Compile the sources (default: every one in the table); `progress(result, done, total)` is called as
    each source finishes, in completion order. `settings`: the VT_CUDA_ARCHS / VT_CUDA_CACHE snapshot
    (default: the environment, read once here)."""
    settings = settings or flags.FlagSnapshot.from_env()
    table = table or load_table()
    out_dir = out_dir or cache_dir(settings)
    requested = requested_archs(table, fat, settings)
    jobs: list[tuple[Path, tuple[str, ...]]] = []
    for name in names or list(table.sources):
        archs = archs_for(table, name, requested)
        source = src_dir / name
        if not source.exists():
            raise BuildError(f"{table.path}: sources.{name}: {source} does not exist")
        jobs.append((source, archs))
    # Sources compile concurrently: nvcc's per-arch stages leave cores idle within one invocation. The
    # largest first (longest-processing-time order), so that the last one to finish is a small one.
    order = sorted(range(len(jobs)), key=lambda i: -include_bytes(jobs[i][0]))
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        futures = {pool.submit(compile_source, *jobs[i], out_dir, werror=werror): i for i in order}
        done: dict[int, BuildResult] = {}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            if progress is not None:
                progress(done[futures[future]], len(done), len(jobs))
    results = [done[i] for i in range(len(jobs))]
    write_manifest(out_dir, results, requested)
    return results


_LOADED: dict[str, ctypes.CDLL] = {}


def load(name: str) -> ctypes.CDLL:
    """The compiled library for one source (JIT for the local GPU unless VT_CUDA_ARCHS says otherwise)."""
    if name not in _LOADED:
        (result,) = build([name])
        _LOADED[name] = ctypes.CDLL(str(result.obj))
    return _LOADED[name]


def main(argv: list[str] | None = None, settings: flags.FlagSnapshot | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.cuda.build", description=__doc__.splitlines()[0])
    p.add_argument("sources", nargs="*", help="source names from the table (default: all)")
    p.add_argument("--fat", action="store_true", help="every arch in the table (default: the local GPU's)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: the build cache)")
    p.add_argument("--werror", action="store_true", help="treat nvcc and host-compiler warnings as errors")
    p.add_argument(
        "--json", type=Path, metavar="PATH", help='write {"passed", "examined", "summary", "sources"} to PATH'
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    print(
        f"building {len(args.sources) or 'every'} source(s){' for every arch in the table' if args.fat else ''} "
        f"with {os.cpu_count() or 1} workers; each line below is one finished source",
        flush=True,
    )
    try:
        results = build(
            args.sources or None,
            fat=args.fat,
            out_dir=args.out,
            werror=args.werror,
            settings=settings,
            progress=lambda r, done, total: print(progress_line(r, done, total, time.perf_counter() - t0), flush=True),
        )
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        write_report(args.json, False, [], str(e).splitlines()[0] if str(e) else "build failed")
        return 1
    seconds = time.perf_counter() - t0
    print(f"done in {seconds:.1f}s")
    built = sum(not r.cached for r in results)
    write_report(args.json, bool(results), results, f"{len(results)} sources ({built} compiled) in {seconds:.1f}s")
    return 0


def write_report(path: Path | None, passed: bool, results: list[BuildResult], summary: str) -> None:
    """The build's machine-readable verdict for `python -m lab ci` (a build of no source examined nothing)."""
    if path is None:
        return
    sources = [{"source": r.source.name, "archs": list(r.archs), "cached": r.cached} for r in results]
    report = {"passed": passed, "examined": len(results), "summary": summary, "sources": sources}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report) + "\n")


def progress_line(r: BuildResult, done: int, total: int, elapsed: float) -> str:
    """`[3/11] engine/cuda/quant.cu: compiled for ['8.0', '9.0'] in 62.1s -> OBJ; 70s elapsed, ETA 187s`
    (the ETA assumes the rest take as long on average as the finished ones did, wall-clock)."""
    state = "cached" if r.cached else "compiled"
    eta = f"ETA {elapsed / done * (total - done):.0f}s" if done < total else "all done"
    return (
        f"[{done}/{total}] {source_label(r.source)}: {state} for {list(r.archs)} in {r.seconds:.1f}s -> {r.obj}; "
        f"{elapsed:.0f}s elapsed, {eta}"
    )


if __name__ == "__main__":
    sys.exit(main())
