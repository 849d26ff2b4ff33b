"""Every env var the code reads is documented or classified, and every documented or classified name is still read."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ...atomicio import write_atomic
from ...boundedio import SOURCE_CAP, Unreadable, read_bytes, read_text
from ...checks.env_doc.envlists import Allowlist, add_stubs, documented_names, first_unsorted, parse_allowlist
from ...checks.env_doc.envscan import SOURCE_GLOBS, EnvRead, scan_source
from ...config import EnvDocConfig
from ...context import Context
from ...files import select
from ...flagdecls import FlagDecl, FlagDeclError, read_flag_decls
from ...paths import confine
from ...results import CheckError, Finding, Result, Rule

ID = "env-doc"
RULES = (
    Rule("ED001", "env-undocumented", "an env var read is neither documented nor classified in the allowlist"),
    Rule("ED002", "env-stale", "a documented or allowlisted env var is read nowhere"),
    Rule("ED003", "allowlist-entry-invalid", "an allowlist line lacks a known class or a reason, or repeats a name"),
    Rule("ED004", "allowlist-unsorted", "the allowlist is not sorted by name"),
    Rule("ED005", "allowlist-redundant", "an allowlisted name is also documented, so its exception is unnecessary"),
    Rule("ED006", "flag-unconsulted", "a flag declared in the flag registry is read nowhere"),
)
R_UNDOC, R_STALE, R_INVALID, R_UNSORTED, R_REDUNDANT, R_UNCONSULTED = RULES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fix",
        action="store_true",
        help="add a stub line to the allowlist for each undocumented "
        "read (never removes a line); the check fails until each stub has a class and a reason",
    )


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg = ctx.config.env_doc
    prefixes = tuple(cfg.prefixes)
    reads, scanned = scan_repository(ctx, cfg)
    documented = _documented(ctx, cfg)
    allow_path = confine(ctx.root, cfg.allowlist, "env_doc.allowlist")
    allow_text = read_text(allow_path, SOURCE_CAP, ctx.root, cfg.allowlist) if allow_path.is_file() else ""
    allow = parse_allowlist(allow_text, cfg.classes, prefixes, cfg.allowlist_format)
    if getattr(args, "fix", False):
        missing = [r for r in reads if r.name not in documented and r.name not in allow.names()]
        if missing:
            allow_text, added = add_stubs(allow_text, missing)
            write_atomic(allow_path, allow_text)
            print(f"rowgate: added {added} stub line(s) to {cfg.allowlist}: classify each", file=ctx.notes)
            allow = parse_allowlist(allow_text, cfg.classes, prefixes, cfg.allowlist_format)
    declared = _declared(ctx, cfg)
    findings = check_env_doc(reads, documented, allow, cfg, declared)
    n = len({r.name for r in reads})
    flags = f", {len(declared)} declared flags consulted" if cfg.flags_file else ""
    return Result.judge(
        ID,
        findings,
        scanned,
        "files",
        f"OK: all {n} production env vars documented or classified ({len(documented)} documented "
        f"in {', '.join(_doc_files(cfg))}, {len(allow.entries)} allowlisted{flags})",
    )


def scan_repository(ctx: Context, cfg: EnvDocConfig) -> tuple[list[EnvRead], int]:
    """Every read in the tracked Python and C-family sources (each file read once), and how many were read.
    A file's reads are remembered by its bytes (checkers.contentcache): its syntax tree is walked, or its
    tokens scanned, only when it changed."""
    from ...contentcache import ContentCache, source_stamp
    from ...gitio import git_dir_of

    prefixes, readers = tuple(cfg.prefixes), tuple(cfg.readers)
    reads, scanned, root = [], 0, str(ctx.root)
    cache = ContentCache(git_dir_of(ctx.root), ID, source_stamp("checks/env_doc/envscan.py", "linear.py"), 65536)
    options = "\0".join(prefixes) + "\n" + "\0".join(readers)
    paths = ctx.files(SOURCE_GLOBS, cfg.exclude)
    for path in select(paths, cfg.include, ()) if cfg.include else paths:
        try:
            data = read_bytes(Path(root, path), SOURCE_CAP, ctx.root, path)
        except FileNotFoundError:
            continue  # deleted in the work tree but still in the index
        except Unreadable as exc:
            if not exc.special:
                raise  # too big or a link out: the check cannot say it scanned everything
            print(f"rowgate: env-doc: skipped {exc}", file=ctx.notes)
            continue
        scanned += 1
        key = cache.key(path, options, data)
        found = _cached_reads(cache.get(key), path)
        if found is None:
            found = scan_source(data, path, prefixes, readers)
            cache.put(key, [[r.name, r.line] for r in found])
        reads += found
    cache.save()
    return reads, scanned


def _cached_reads(value: object, path: str) -> list[EnvRead] | None:
    """A cache entry's reads (`[[name, line], ...]`), or None where it is not that shape."""
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and type(item[1]) is int):
            return None
        out.append(EnvRead(item[0], path, item[1]))
    return out


def check_env_doc(
    reads: list[EnvRead],
    documented: dict[str, tuple[str, int]],
    allow: Allowlist,
    cfg: EnvDocConfig,
    declared: Sequence[FlagDecl] = (),
) -> list[Finding]:
    """Both directions: each read is documented or classified; each documented or classified name, and each
    declared flag, is read."""
    findings, read_names, listed = [], {r.name for r in reads}, allow.names()
    for d in declared:
        if d.name.startswith(tuple(cfg.prefixes)) and d.name not in read_names:
            findings.append(
                R_UNCONSULTED.finding(
                    f"{d.name} is declared at {cfg.flags_file}:{d.line} but nothing consults it",
                    cfg.flags_file,
                    d.line,
                    f"read it where it gates (a reader: {', '.join(cfg.readers) or 'env_doc.readers is empty'}), or "
                    f"delete the declaration",
                )
            )
    for r in reads:
        if r.name not in documented and r.name not in listed:
            findings.append(
                R_UNDOC.finding(
                    f"{r.name} read at {r.path}:{r.line} is not documented in {' or '.join(_doc_files(cfg))} nor "
                    f"classified in {cfg.allowlist}",
                    r.path,
                    r.line,
                    _undocumented_hint(cfg),
                )
            )
    flags = {d.name for d in declared}  # an unread declared flag is ED006's, once
    for name, (doc, line) in documented.items():
        if name.startswith(tuple(cfg.prefixes)) and name not in read_names and name not in flags:
            fix = (
                f"remove it from {cfg.flags_file} and re-render {doc}"
                if cfg.flags_file and doc == cfg.doc
                else f"delete its row in {doc}"
            )
            findings.append(
                R_STALE.finding(f"{name} is documented but nothing reads it", doc, line, f"{fix}, or restore the read")
            )
    for e in allow.entries:
        if e.name not in read_names:
            findings.append(
                R_STALE.finding(
                    f"{e.name} is allowlisted but nothing reads it",
                    cfg.allowlist,
                    e.line,
                    f"delete line {e.line} of {cfg.allowlist}",
                )
            )
        elif e.name in documented:
            findings.append(
                R_REDUNDANT.finding(
                    f"{e.name} is allowlisted but also documented in {documented[e.name][0]}",
                    cfg.allowlist,
                    e.line,
                    f"delete line {e.line} of {cfg.allowlist}: documented names need no exception",
                )
            )
    for line, message in allow.problems:
        shape = "NAME" if cfg.allowlist_format == "names" else "NAME  CLASS  reason"
        findings.append(
            R_INVALID.finding(
                message, cfg.allowlist, line, f"write the line as `{shape}` (see the header of {cfg.allowlist})"
            )
        )
    if cfg.allowlist_sorted and (pair := first_unsorted(allow)):
        entry, above = pair
        findings.append(
            R_UNSORTED.finding(
                f"{entry.name} comes after {above.name}: entries are sorted by name",
                cfg.allowlist,
                entry.line,
                f"move {entry.name} above {above.name}",
            )
        )
    return findings


def _doc_files(cfg: EnvDocConfig) -> list[str]:
    return list(dict.fromkeys([cfg.doc, *cfg.docs]))


def _documented(ctx: Context, cfg: EnvDocConfig) -> dict[str, tuple[str, int]]:
    """Every documented name with its document and line (the first mention wins). A configured document
    that is missing, or has no table, is an error."""
    names: dict[str, tuple[str, int]] = {}
    headers = " | ".join(cfg.table_headers)
    for doc in _doc_files(cfg):
        path = confine(ctx.root, doc, "env_doc.doc" if doc == cfg.doc else "env_doc.docs")
        hint = (
            f"render it from {cfg.flags_file} with `rowgate render`"
            if cfg.flags_file and doc == cfg.doc
            else "fix env_doc.doc/docs/table_headers in .agents/config.yaml"
        )
        if not path.is_file():
            raise CheckError(f"{doc} not found", hint=hint)
        found = documented_names(read_text(path, SOURCE_CAP, ctx.root, doc), tuple(cfg.table_headers))
        if found is None:
            raise CheckError(f"{doc} has no table of names (a header `| {headers} | ...`)", hint=hint)
        for name, line in found.items():
            names.setdefault(name, (doc, line))
    return names


def _declared(ctx: Context, cfg: EnvDocConfig) -> list[FlagDecl]:
    if not cfg.flags_file or not confine(ctx.root, cfg.flags_file, "env_doc.flags_file").is_file():
        return []
    try:
        return read_flag_decls(ctx.root, cfg.flags_file, "env_doc.flags_file")
    except (FlagDeclError, SyntaxError) as exc:
        raise CheckError(str(exc)) from None


def _undocumented_hint(cfg: EnvDocConfig) -> str:
    """Where an undocumented read goes: the flag registry where there is one, else a row of the doc table."""
    where = (
        f"declare it in {cfg.flags_file} and render {cfg.doc}" if cfg.flags_file else f"add a row for it to {cfg.doc}"
    )
    return f"{where}, or classify it in {cfg.allowlist} as `NAME  CLASS  reason` (--fix adds a stub)"
