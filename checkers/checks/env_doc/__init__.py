"""Every env var the code reads is documented or classified, and every documented or classified name is still read."""
from __future__ import annotations

import argparse
import os

from checkers.config import EnvDocConfig
from checkers.context import Context
from checkers.checks.env_doc.envlists import Allowlist, add_stubs, documented_names, first_unsorted, parse_allowlist
from checkers.checks.env_doc.envscan import SOURCE_GLOBS, EnvRead, scan_source
from checkers.results import CheckError, Finding, Result, Rule

ID = "env-doc"
RULES = (
    Rule("ED001", "env-undocumented", "an env var read is neither documented nor classified in the allowlist"),
    Rule("ED002", "env-stale", "a documented or allowlisted env var is read nowhere"),
    Rule("ED003", "allowlist-entry-invalid", "an allowlist line lacks a known class or a reason, or repeats a name"),
    Rule("ED004", "allowlist-unsorted", "the allowlist is not sorted by name"),
    Rule("ED005", "allowlist-redundant", "an allowlisted name is also documented, so its exception is unnecessary"),
)
R_UNDOC, R_STALE, R_INVALID, R_UNSORTED, R_REDUNDANT = RULES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fix", action="store_true", help="add a stub line to the allowlist for each undocumented "
                        "read (never removes a line); the check fails until each stub has a class and a reason")


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg = ctx.config.env_doc
    prefixes = tuple(cfg.prefixes)
    reads, scanned = scan_repository(ctx, cfg)
    documented = _documented(ctx, cfg)
    allow_path = ctx.root / cfg.allowlist
    allow_text = allow_path.read_text(encoding="utf-8") if allow_path.is_file() else ""
    allow = parse_allowlist(allow_text, cfg.classes, prefixes)
    if getattr(args, "fix", False):
        missing = [r for r in reads if r.name not in documented and r.name not in allow.names()]
        if missing:
            allow_text, added = add_stubs(allow_text, missing)
            allow_path.parent.mkdir(parents=True, exist_ok=True)
            allow_path.write_text(allow_text, encoding="utf-8")
            print(f"rowgate: added {added} stub line(s) to {cfg.allowlist}: classify each", file=ctx.notes)
            allow = parse_allowlist(allow_text, cfg.classes, prefixes)
    findings = check_env_doc(reads, documented, allow, cfg)
    n = len({r.name for r in reads})
    return Result.judge(ID, findings, scanned, "files", f"OK: all {n} production env vars documented or classified")


def scan_repository(ctx: Context, cfg: EnvDocConfig) -> tuple[list[EnvRead], int]:
    """Every read in the tracked Python and C-family sources (each file read once), and how many were read."""
    prefixes, reads, scanned, root = tuple(cfg.prefixes), [], 0, str(ctx.root)
    for path in ctx.files(SOURCE_GLOBS, cfg.exclude):
        try:
            with open(os.path.join(root, path), "rb") as f:  # plain open: pathlib costs more than the read
                data = f.read()
        except (FileNotFoundError, IsADirectoryError):
            continue  # deleted in the work tree but still in the index
        scanned += 1
        reads += scan_source(data, path, prefixes, cfg.flags_file)
    return reads, scanned


def check_env_doc(reads: list[EnvRead], documented: dict[str, int], allow: Allowlist,
                  cfg: EnvDocConfig) -> list[Finding]:
    """Both directions: each read is documented or classified; each documented or classified name is read."""
    findings, read_names, listed = [], {r.name for r in reads}, allow.names()
    for r in reads:
        if r.name not in documented and r.name not in listed:
            findings.append(R_UNDOC.finding(
                f"{r.name} read at {r.path}:{r.line} is not documented in {cfg.doc} nor classified in {cfg.allowlist}",
                r.path, r.line, f"declare it in {cfg.flags_file} and render {cfg.doc}, or classify it in "
                f"{cfg.allowlist} as `NAME  CLASS  reason` (--fix adds a stub)"))
    for name, line in documented.items():
        if name.startswith(tuple(cfg.prefixes)) and name not in read_names:
            findings.append(R_STALE.finding(
                f"{name} is documented but nothing reads it", cfg.doc, line,
                f"remove it from {cfg.flags_file} and re-render {cfg.doc}, or restore the read"))
    for e in allow.entries:
        if e.name not in read_names:
            findings.append(R_STALE.finding(f"{e.name} is allowlisted but nothing reads it", cfg.allowlist, e.line,
                                            f"delete line {e.line} of {cfg.allowlist}"))
        elif e.name in documented:
            findings.append(R_REDUNDANT.finding(
                f"{e.name} is allowlisted but also documented in {cfg.doc}", cfg.allowlist, e.line,
                f"delete line {e.line} of {cfg.allowlist}: documented names need no exception"))
    for line, message in allow.problems:
        findings.append(R_INVALID.finding(message, cfg.allowlist, line,
                                          f"write the line as `NAME  CLASS  reason` (see the header of {cfg.allowlist})"))
    if pair := first_unsorted(allow):
        entry, above = pair
        findings.append(R_UNSORTED.finding(
            f"{entry.name} comes after {above.name}: entries are sorted by name", cfg.allowlist, entry.line,
            f"move {entry.name} above {above.name}"))
    return findings


def _documented(ctx: Context, cfg: EnvDocConfig) -> dict[str, int]:
    path = ctx.root / cfg.doc
    if not path.is_file():
        raise CheckError(f"{cfg.doc} not found", hint=f"render it from {cfg.flags_file} with `rowgate render`")
    names = documented_names(path.read_text(encoding="utf-8"))
    if names is None:
        raise CheckError(f"{cfg.doc} has no table of names (header `| flag | default | gates | description |`)",
                         hint=f"render it from {cfg.flags_file} with `rowgate render`")
    return names
