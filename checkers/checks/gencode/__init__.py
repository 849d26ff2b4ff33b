"""The SASS and PTX archs compiled into each CUDA object equal what the arch feature table says for its source."""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...checks.gencode import fatbin, nvcc_flags
from ...context import Context
from ...paths import confine, escape
from ...results import CheckError, Finding, Result, Rule
from ...yamlio import RecordError, read_yaml

ID = "gencode"
RULES = (
    Rule("GC001", "gencode-mismatch", "the SASS archs compiled for a source differ from its table entry"),
    Rule(
        "GC002", "ptx-mismatch", "the PTX archs compiled for a source differ from its table entry (config gencode.ptx)"
    ),
    Rule(
        "GC003", "source-not-in-table", "a CUDA source (or an object built from one) has no entry in the feature table"
    ),
    Rule("GC004", "feature-no-archs", "a source's feature shares no arch with the requested arch list"),
    Rule("GC005", "table-source-missing", "the feature table names a source that does not exist"),
    Rule("GC006", "object-missing", "a source in the table has no compiled object to audit"),
    Rule("GC007", "table-invalid", "the feature table does not parse or names an unknown feature or bad arch"),
    Rule("GC008", "object-unreadable", "an object's ELF or fatbin structure is malformed"),
)
R_GENCODE, R_PTX, R_UNLISTED, R_EMPTY, R_MISSING_SRC, R_NO_OBJECT, R_TABLE, R_UNREADABLE = RULES
_ARCH = re.compile(r"^\d{1,3}\.\d[af]?$")
_HASHED = re.compile(r"^(?P<stem>.+)-[0-9a-f]{16}\.so$")  # engine/cuda/build.py's cache names
# What a build writes before it renames the object into place (tempfile.mkstemp's `tmpXXXXXXXX.so`, a
# dotted name): half-written while nvcc runs, never an object to audit.
_TEMPORARY = re.compile(r"^(tmp[A-Za-z0-9_]{6,}|\..*)\.(so|o|fatbin)$")
REBUILD = "rebuild (python -m engine.cuda.build --fat --out DIR) or fix the table entry"


@dataclass(frozen=True)
class Table:
    path: str  # repo-relative
    archs: dict[str, list[str]]  # feature -> table spellings
    sources: dict[str, str]  # source name -> feature
    lines: dict[str, int]  # source name -> line of its entry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build-dir",
        type=Path,
        help="directory of compiled objects (.so/.o/.fatbin); default: "
        "config gencode.build_dir, else $VT_CUDA_CACHE, else build/cuda-fat when it holds "
        "objects, else ~/.cache/rowgate/cuda",
    )
    parser.add_argument(
        "--compile-commands",
        type=Path,
        metavar="FILE",
        help="audit the arch flags of a CMake compile_commands.json instead of objects "
        "(default: config gencode.compile_commands)",
    )
    parser.add_argument(
        "--archs",
        help="requested archs, comma-separated (default: config gencode.archs, else "
        "what each object's build requested per the build dir's manifest.json, else every arch "
        "in the table, as a fat build)",
    )


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg = ctx.config.gencode
    table = load_table(ctx.root, cfg.table, cfg.sources)
    source_dir = confine(ctx.root, cfg.source_dir or str(Path(cfg.table).parent), "gencode.source_dir")
    explicit = getattr(args, "archs", None) or cfg.archs
    requested = _requested(getattr(args, "archs", None), cfg.archs, table)
    src_rel = ctx.rel(source_dir)
    findings = table_findings(table, source_dir, src_rel, requested, ctx.files([f"{src_rel}/*.cu"]))
    built_for: dict[str, list[str]] = {}  # per source, the arch list its build requested (manifest)
    notes: list[str] = []  # special files skipped
    commands = getattr(args, "compile_commands", None) or (
        confine(ctx.root, cfg.compile_commands, "gencode.compile_commands") if cfg.compile_commands else None
    )
    if commands:
        compiled, examined = from_compile_commands(commands, source_dir, findings)
        unit = "compile commands"
    else:
        chosen = getattr(args, "build_dir", None) or cfg.build_dir
        build_dir = getattr(args, "build_dir", None) or _default_build_dir(ctx, cfg.build_dir)
        if not chosen and not _built(build_dir):
            # Nothing was built on this machine: an honest skip, not a pass. CI builds, then audits.
            return Result.skip(ID, _no_build(build_dir))
        compiled, examined, built_for = from_build_dir(build_dir, findings, notes)
        unit = "objects"
    if explicit:
        built_for = {}
    if examined == 0:
        raise CheckError(
            f"no CUDA {unit} found to audit",
            "build first: python -m engine.cuda.build --fat --out DIR, "
            "then pass --build-dir DIR (or --compile-commands FILE)",
        )
    findings += audit(table, compiled, requested, source_dir, ctx.rel(source_dir), cfg.ptx, built_for)
    findings = list({(f.rule, f.message): f for f in findings}.values())  # a source unlisted twice is one finding
    shown = (
        sorted(set().union(*built_for.values()), key=lambda a: fatbin.arch_key(fatbin.table_arch(a)))
        if built_for
        else requested
    )
    ok = f"OK: {len(compiled)} sources match {table.path} for {_fmt([fatbin.table_arch(a) for a in shown])}"
    result = Result.judge(ID, findings, examined, unit, ok)
    result.details = [*notes, *result.details]
    return result


def load_table(root: Path, rel: str, sources: dict[str, str] | None = None) -> Table:
    if rel.endswith(".cmake") or rel.endswith("CMakeLists.txt"):
        from .cmake_table import load_cmake_table

        archs, lines = load_cmake_table(root, rel, sources or {})
        src = dict(sources or {})
        return Table(rel, archs, src, {name: lines.get(feature, 0) or 1 for name, feature in src.items()})
    try:
        data = read_yaml(confine(root, rel, "gencode.table"), rel)
    except RecordError as exc:
        raise CheckError(str(exc), "the feature table is the check's input; fix or restore it") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("features"), dict)
        or not isinstance(data.get("sources"), dict)
    ):
        raise CheckError(f"{rel}: expected top-level mappings 'features' and 'sources'")
    archs = {str(k): list(v.get("archs") or []) if isinstance(v, dict) else [] for k, v in data["features"].items()}
    sources = {str(k): str(v) for k, v in data["sources"].items()}
    lines = {str(k): data["sources"].lc.key(k)[0] + 1 for k in data["sources"]}
    return Table(rel, archs, sources, lines)


def table_findings(
    table: Table, source_dir: Path, src_rel: str, requested: list[str], files: list[str]
) -> list[Finding]:
    """Table entries that name nothing, unknown features, bad spellings, empty intersections, unlisted sources."""
    out = []
    for feature, archs in table.archs.items():
        for a in archs:
            if not isinstance(a, str) or not _ARCH.match(a):
                out.append(
                    R_TABLE.finding(
                        f"feature {feature!r}: arch {a!r} is not a spelling like 9.0, 9.0a, 12.0a",
                        table.path,
                        None,
                        "quote it and use major.minor[a]",
                    )
                )
    for name, feature in table.sources.items():
        where = (table.path, table.lines[name])
        if not (source_dir / name).is_file():
            out.append(
                R_MISSING_SRC.finding(
                    f"{src_rel}/{name}: listed under sources but does not exist",
                    *where,
                    "remove the entry or restore the source",
                )
            )
        if feature not in table.archs:
            out.append(R_TABLE.finding(f"{src_rel}/{name}: feature {feature!r} is not under features", *where))
        elif not expected(table, name, requested):
            out.append(
                R_EMPTY.finding(
                    f"{src_rel}/{name}: feature {feature!r} archs {_fmt(table.archs[feature])} "
                    f"share no arch with the requested {_fmt(requested)}",
                    *where,
                    "add an arch to the feature or request one it supports",
                )
            )
    for path in sorted(files):
        name = path.rsplit("/", 1)[-1]
        if name not in table.sources:
            out.append(
                R_UNLISTED.finding(
                    f"{src_rel}/{name}: not in the feature table {table.path}",
                    table.path,
                    None,
                    f"add `{name}: <feature>` under sources",
                )
            )
    return out


def expected(table: Table, name: str, requested: list[str]) -> list[str]:
    """The source's archs in fatbin form ('90a'): its feature's archs that were requested."""
    archs = [a for a in table.archs.get(table.sources[name], []) if a in requested]
    return sorted({fatbin.table_arch(a) for a in archs}, key=fatbin.arch_key)


def audit(
    table: Table,
    compiled: dict[str, tuple[list[str], list[str]]],
    requested: list[str],
    source_dir: Path,
    src_rel: str,
    ptx_policy: str,
    built_for: dict[str, list[str]] | None = None,
) -> list[Finding]:
    """Compare what was compiled per source (SASS, PTX) with the table's archs intersected with the requested
    list: the one given, else the one the source's build recorded in the manifest (`built_for`)."""
    out = []
    for name in sorted(set(table.sources) | set(compiled)):
        label = f"{src_rel}/{name}"
        if name not in table.sources and not (source_dir / name).is_file():
            continue  # an object of another checkout's source (a build cache two trees share): not this tree's
        if name not in table.sources:
            out.append(
                R_UNLISTED.finding(
                    f"{label}: not in the feature table {table.path}",
                    table.path,
                    None,
                    f"add `{name}: <feature>` under sources",
                )
            )
            continue
        want = expected(table, name, (built_for or {}).get(name, requested))
        where = (table.path, table.lines[name])
        if not want or not (source_dir / name).is_file():
            continue  # reported as GC004 / GC005
        if name not in compiled:
            out.append(R_NO_OBJECT.finding(f"{label}: no compiled object found", *where, REBUILD))
            continue
        sass, ptx = compiled[name]
        if sass != want:
            out.append(R_GENCODE.finding(f"{label}: gencode {_fmt(sass)} != expected {_fmt(want)}", *where, REBUILD))
        bad_ptx = ptx != want if ptx_policy == "all" else (ptx_policy == "subset" and not set(ptx) <= set(want))
        if bad_ptx:
            out.append(R_PTX.finding(f"{label}: ptx {_fmt(ptx)} != expected {_fmt(want)}", *where, REBUILD))
    return out


def from_build_dir(
    build_dir: Path, findings: list[Finding], notes: list[str] | None = None
) -> tuple[dict[str, tuple[list[str], list[str]]], int, dict[str, list[str]]]:
    """Source name -> (SASS, PTX) of its object (the manifest's per source, else the newest by name), the
    count of objects, and per source the arch list its build requested (manifest entries that record one)."""
    if not build_dir.is_dir():
        raise CheckError(
            f"build directory {build_dir} does not exist", "build first: python -m engine.cuda.build --fat --out DIR"
        )
    manifest = build_dir / "manifest.json"
    objects: dict[str, Path] = {}
    built_for: dict[str, list[str]] = {}
    if manifest.is_file():
        try:
            for label, entry in json.loads(manifest.read_text(encoding="utf-8")).items():
                objects[Path(label).name] = confine(build_dir, entry["object"])
                if isinstance(entry.get("requested"), list):
                    built_for[Path(label).name] = [str(a) for a in entry["requested"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # OutsideRepo is a ValueError
            raise CheckError(
                f"{manifest}: not a usable build manifest ({type(exc).__name__}: {exc})",
                "rebuild: python -m engine.cuda.build --fat --out DIR",
            ) from None
    else:
        candidates = [
            p for ext in ("*.so", "*.o", "*.fatbin") for p in build_dir.rglob(ext) if not _TEMPORARY.match(p.name)
        ]
        for path in sorted(candidates, key=lambda p: p.stat().st_mtime):
            m = _HASHED.match(path.name)
            objects[(m.group("stem") if m else path.name.split(".")[0]) + ".cu"] = path
    compiled = {}
    for name, path in list(objects.items()):
        kind = _special(path)
        if kind:  # reading a FIFO would block for ever, a device could be endless
            objects.pop(name)
            if notes is not None:
                notes.append(f"note: skipped {escape(str(path))}: a {kind}, not a regular file")
            continue
        try:
            compiled[name] = fatbin.arch_lists(fatbin.read_object(path))
        except (OSError, fatbin.FatbinError) as exc:
            findings.append(R_UNREADABLE.finding(f"{path}: {exc}", None, None, "rebuild the object"))
    return compiled, len(objects), built_for


def not_run(ctx: Context, args: argparse.Namespace) -> str | None:
    """Why the preflight leaves this check out here: no build dir or compile commands were named and none was
    built on this machine (a fresh clone, a CI job that does not build). Listed as not run, with the reason,
    so that it neither passes nor turns the verdict; ci/fat-build.sh builds and then runs it."""
    cfg = ctx.config.gencode
    named = getattr(args, "build_dir", None) or getattr(args, "compile_commands", None)
    if named or cfg.build_dir or cfg.compile_commands or not (ctx.root / cfg.table).is_file():
        return None
    build_dir = _default_build_dir(ctx, None)
    return None if _built(build_dir) else "no build: " + _no_build(build_dir)


def _built(build_dir: Path) -> bool:
    return build_dir.is_dir() and any(not _TEMPORARY.match(p.name) for p in build_dir.glob("*.so"))


def _no_build(build_dir: Path) -> str:
    state = "holds no objects" if build_dir.is_dir() else "does not exist"
    return (
        f"no CUDA build to audit ({build_dir} {state}); "
        "ci/fat-build.sh builds every source and runs this check on the result"
    )


def _special(path: Path) -> str | None:
    """What `path` is when it is not a regular file (after symlinks): 'FIFO', 'socket', 'device', ..."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing: read_object reports it
    if stat.S_ISREG(mode):
        return None
    return (
        "FIFO"
        if stat.S_ISFIFO(mode)
        else "socket"
        if stat.S_ISSOCK(mode)
        else "device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "directory"
        if stat.S_ISDIR(mode)
        else "special file"
    )


def from_compile_commands(
    path: Path, source_dir: Path, findings: list[Finding]
) -> tuple[dict[str, tuple[list[str], list[str]]], int]:
    try:
        commands = nvcc_flags.load_compile_commands(path)
    except nvcc_flags.FlagError as exc:
        raise CheckError(str(exc)) from None
    compiled = {}
    for cmd in commands:
        name = cmd.file.name if cmd.file.parent == source_dir.resolve() else str(cmd.file)
        try:
            archs = nvcc_flags.archs_of(cmd.args)
        except nvcc_flags.FlagError as exc:
            findings.append(R_UNREADABLE.finding(f"{cmd.file}: {exc}", str(path), None, "use explicit -gencode flags"))
            continue
        compiled[name] = (sorted(archs.sass, key=fatbin.arch_key), sorted(archs.ptx, key=fatbin.arch_key))
    return compiled, len(commands)


def _requested(flag: str | None, configured: list[str] | None, table: Table) -> list[str]:
    if flag:
        archs = [a.strip() for a in flag.split(",") if a.strip()]
        bad = [a for a in archs if not _ARCH.match(a)]
        if bad:
            raise CheckError(f"--archs: {bad[0]!r} is not a spelling like 9.0, 9.0a, 12.0a")
        return archs
    if configured:
        return list(configured)
    seen = {a: None for archs in table.archs.values() for a in archs if isinstance(a, str)}
    return sorted(seen, key=lambda a: fatbin.arch_key(fatbin.table_arch(a)))


FAT_BUILD_DIR = "build/cuda-fat"  # where ci/fat-build.sh and scripts/test.sh write the fat build


def _default_build_dir(ctx: Context, configured: str | None) -> Path:
    """Config gencode.build_dir; else $VT_CUDA_CACHE; else the fat build in the work tree when it holds
    objects (the build every arch is audited on); else the engine's build cache."""
    if configured:
        return confine(ctx.root, configured, "gencode.build_dir")
    env = ctx.env.get("VT_CUDA_CACHE", "").strip()
    if env:
        return Path(env).expanduser()
    fat = ctx.root / FAT_BUILD_DIR
    if _built(fat):
        return fat
    return Path.home() / ".cache" / "rowgate" / "cuda"


def _fmt(archs: list[str]) -> str:
    """['80','90']: the form the messages use (no space, so one finding is one grep-able token)."""
    return "[" + ",".join(f"'{a}'" for a in archs) + "]"
