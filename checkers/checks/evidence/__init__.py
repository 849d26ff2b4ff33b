"""Every number a document cites from the ledger is in its record, and a headline stands on a clean, current record.

A headline (a bold number, or an item of a headline section) needs a marker beside it. A current marker
`[ledger: NAME]` claims the record holds today: it must come from a clean tree with a flag snapshot, and nothing
it measured may have changed since its commit. A dated marker `[ledger: NAME @ DATE TREE]` labels the number as
history; its label must agree with the record, and the commits since are printed as notes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ...boundedio import SOURCE_CAP, read_text
from ...contentcache import ContentCache, source_stamp
from ...context import Context
from ...flagdecls import FlagDeclError, read_flag_decls
from ...paths import confine
from ...results import CheckError, Finding, Result, Rule
from ...safe_regex import compile_pattern
from .citations import Block, Citation, scan
from .ledger import Measured, Record, ValidCache, flag_differences, read_ledger, today_defaults, validate_v2

if TYPE_CHECKING:  # the config cache hands the check its section without importing pydantic
    from ...config import EvidenceConfig

ID = "evidence"
CONFIG_SECTIONS = ("evidence",)
RULES = (
    Rule("EV001", "evidence-value-mismatch", "a cited number is not in its record at the printed precision"),
    Rule("EV002", "evidence-record-missing", "a citation names a record that is not in the ledger"),
    Rule("EV003", "evidence-headline-unproven", "a headline or defaults number stands on a dirty or flagless record"),
    Rule("EV004", "evidence-stale", "a headline's record measured paths that changed after its commit"),
    Rule("EV005", "evidence-flags-not-default", "a defaults number stands on a record that ran other flags"),
    Rule("EV006", "evidence-record-invalid", "a ledger record does not parse, or a schema-2 record breaks the schema"),
    # EV007 evidence-record-oversize is retired (reserved): the size cap is agent-record's AR009, for every record
    Rule("EV008", "evidence-selftest-missing", "a gate record does not show its comparator able to fail"),
    Rule("EV009", "evidence-label-mismatch", "a dated citation's date or tree disagrees with its record"),
    Rule("EV010", "evidence-headline-uncited", "a headline number cites no record"),
)
R_VALUE, R_MISSING, R_UNPROVEN, R_STALE, R_FLAGS, R_INVALID, R_SELFTEST, R_LABEL, R_UNCITED = RULES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options: the config says which documents and which ledger


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg: EvidenceConfig = ctx.config.evidence
    ledger_dir = confine(ctx.root, cfg.ledger_dir, "evidence.ledger_dir")
    if not ledger_dir.is_dir():
        return Result.skip(ID, f"not configured: no ledger at {cfg.ledger_dir} (evidence.ledger_dir)")
    records, unreadable = read_ledger(ctx.root, cfg.ledger_dir)
    texts = {doc: _read(ctx.root, doc) for doc in cfg.documents}
    defaults = _defaults(ctx.root, cfg)
    measured = Measured(ctx.root, ctx.git, cfg.anchors_from, _history_cache(ctx))
    cache = ValidCache(_cache_path(ctx))
    findings, notes = check_records(records, unreadable, cfg, cache)
    cache.save()
    judged = 0
    for doc, text in texts.items():
        blocks = scan(text, compile_pattern(cfg.marker), cfg.file_names, cfg.headline_sections, cfg.defaults_words)
        f, n, cited = check_document(doc, blocks, records, cfg, defaults, measured)
        findings += f
        notes += n
        judged += cited
    return Result.judge(
        ID,
        findings,
        len(records) + judged,
        "records and citations",
        f"OK: {judged} citations in {', '.join(cfg.documents)} stand on {len(records)} ledger records",
        details=notes,
    )


def check_records(
    records: dict[str, Record], unreadable: list[tuple[str, str]], cfg: EvidenceConfig, cache: ValidCache | None = None
) -> tuple[list[Finding], list[str]]:
    """Each record on its own: it parses; a schema-2 record is valid and a gate's self-test caught (the size cap
    is agent-record's, AR009)."""
    findings = [R_INVALID.finding(why, path, None, "rewrite it as a JSON object") for path, why in unreadable]
    for rec in records.values():
        if rec.schema == 1:
            continue
        for problem in cache.problems(rec) if cache is not None else validate_v2(rec):
            findings.append(
                R_INVALID.finding(
                    f"schema-2 record: {problem}", rec.path, None, "`rowgate config schema --ledger` prints the schema"
                )
            )
        if rec.data.get("kind") in cfg.require_selftest:
            test = rec.data.get("comparator_selftest")
            if not isinstance(test, dict):
                findings.append(
                    R_SELFTEST.finding(
                        "a gate record without comparator_selftest: the comparison was not shown able to fail",
                        rec.path,
                        None,
                        "seed corruption in the same run and record {seeded, caught}",
                    )
                )
            elif test.get("caught") != test.get("seeded"):
                findings.append(
                    R_SELFTEST.finding(
                        f"the comparator caught {test.get('caught')} of {test.get('seeded')} seeded corruptions",
                        rec.path,
                        None,
                        "fix the comparator until it reports every seeded corruption",
                    )
                )
    return findings, []


def check_document(
    doc: str,
    blocks: list[Block],
    records: dict[str, Record],
    cfg: EvidenceConfig,
    defaults: dict[str, bool | str] | None,
    measured: Measured,
) -> tuple[list[Finding], list[str], int]:
    """Findings for one document's blocks, notes for its dated citations, and how many citations were judged."""
    findings: list[Finding] = []
    notes: list[str] = []
    judged = 0
    for block in blocks:
        if block.headline and not any(c.marker for c in block.citations):
            findings.append(
                R_UNCITED.finding(
                    f"headline {_quote(block.text)} cites no record beside its number",
                    doc,
                    block.line,
                    "add `[ledger: NAME]` beside the number (NAME: the record's file name; a file name elsewhere in "
                    "the text is a reference, not a citation), or drop the number",
                )
            )
        for cite in block.citations:
            rec = records.get(cite.name)
            if rec is None:
                if cite.marker or _looks_dated(cite.name):
                    findings.append(
                        R_MISSING.finding(
                            f"{cite.name}.json is not in {cfg.ledger_dir}",
                            doc,
                            cite.line,
                            "cite a record that exists, or write the record (never by hand)",
                        )
                    )
                continue
            judged += 1
            findings += _judge(doc, block, cite, rec, cfg, defaults, measured, notes)
    return findings, notes, judged


def _judge(
    doc: str,
    block: Block,
    cite: Citation,
    rec: Record,
    cfg: EvidenceConfig,
    defaults: dict[str, bool | str] | None,
    measured: Measured,
    notes: list[str],
) -> list[Finding]:
    out: list[Finding] = []
    where = (doc, cite.line)
    if cite.number is not None and not rec.holds(cite.number):
        out.append(
            R_VALUE.finding(
                f"{cite.number} is not in {rec.path} (to the printed precision)",
                *where,
                "print the record's value, or cite the record that holds this one",
            )
        )
    if cite.label is not None:
        want = f"{rec.date} {rec.tree()}"
        if " ".join(cite.label.split()) != want:
            out.append(
                R_LABEL.finding(
                    f"dated label '{cite.label}' != the record's '{want}'",
                    *where,
                    f"write [ledger: {cite.name} @ {want}]",
                )
            )
        if cite.marker and cite.number is not None:
            since = measured.changes_since(rec)
            if since:
                notes.append(
                    f"{doc}:{cite.line}: {cite.number} [{cite.name} @ {want}]: {len(since)} commits since changed "
                    f"what it measured (latest {since[0]}); re-run to refresh"
                )
    current = cite.label is None
    legacy = rec.schema == 1 or (cfg.legacy_before is not None and rec.date < cfg.legacy_before.isoformat())
    if cite.marker and ((current and block.headline) or block.defaults):
        why = _unproven(rec)
        if why:
            finding = R_UNPROVEN.finding(
                f"{'a defaults' if block.defaults else 'a headline'} number stands on {rec.path}, {why}",
                *where,
                "re-run it from a clean tree with a schema-2 writer, or relabel it as dated: "
                f"[ledger: {cite.name} @ {rec.date} {rec.tree()}] with no bold and no defaults claim",
            )
            if legacy and cfg.legacy == "note":
                notes.append(f"{finding.path}:{finding.line}: {finding.rule} (legacy, noted) {finding.message}")
            else:
                out.append(finding)
    if cite.marker and current and block.headline and not legacy:
        since = measured.changes_since(rec)
        if since is None:
            held = measured.in_history(rec)
            why = (
                f"names commit {rec.commit and rec.commit[:12]}, which this history does not hold"
                if not held
                else "names no path it measured, and its rows have no anchors"
            )
            fix = (
                "fetch the full history (a shallow clone cuts it), or re-run the record at HEAD"
                if not held
                else "list the measured files in the record's `paths`, or give its rows anchors"
            )
            out.append(R_STALE.finding(f"{rec.path} {why}: whether it is stale cannot be told", *where, fix))
        if since:
            finding = R_STALE.finding(
                f"{rec.path} (at {rec.commit and rec.commit[:7]}) is stale: {len(since)} commits since changed what "
                f"it measured: {'; '.join(since[:5])}{' ...' if len(since) > 5 else ''}",
                *where,
                "re-run the record's command at HEAD, or relabel the number as dated "
                f"([ledger: {cite.name} @ {rec.date} {rec.tree()}])",
            )
            if cfg.stale == "note":
                notes.append(f"{finding.path}:{finding.line}: {finding.rule} (noted) {finding.message}")
            else:
                out.append(finding)
    flags = rec.flags
    if cite.marker and block.defaults and defaults is not None and flags is not None:
        differ = flag_differences(flags, defaults)
        if differ:
            out.append(
                R_FLAGS.finding(
                    f"a defaults number stands on {rec.path}, which ran {', '.join(differ[:4])}"
                    f"{' ...' if len(differ) > 4 else ''}",
                    *where,
                    "re-run at today's defaults, or say which flags the number ran with instead of 'defaults'",
                )
            )
    return out


def _unproven(rec: Record) -> str | None:
    if rec.dirty is None:
        return "which names no commit"
    if rec.dirty:
        return "made from a dirty tree"
    if rec.flags is None:
        return "which has no flag snapshot (schema 1)"
    return None


def _looks_dated(name: str) -> bool:
    return bool(re.match(r"\d{4}-\d{2}-\d{2}-", name))


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return f"'{flat[:60]}...'" if len(flat) > 60 else f"'{flat}'"


def _history_cache(ctx: Context) -> ContentCache:
    """Each commit's changed paths by its sha, under the git directory (checkers.contentcache): the history
    is listed each run, but only the commits since the last run are diffed."""
    from ...gitio import git_dir_of

    return ContentCache(git_dir_of(ctx.root), "evidence-history", source_stamp("gitio.py"), 65536)


def _cache_path(ctx: Context) -> Path | None:
    """Where validated schema-2 records are remembered: under the git directory, per work tree."""
    try:
        git_dir = ctx.git.text("rev-parse", "--absolute-git-dir").strip()
    except CheckError:
        return None
    return Path(git_dir) / "rowgate" / "ledger-valid" if git_dir else None


def _read(root: Path, doc: str) -> str:
    path = confine(root, doc, "evidence.documents")
    if not path.is_file():
        raise CheckError(f"{doc} not found", hint="fix evidence.documents in the config")
    return read_text(path, SOURCE_CAP, root, doc)


def _defaults(root: Path, cfg: EvidenceConfig) -> dict[str, bool | str] | None:
    if not cfg.flags_file or not confine(root, cfg.flags_file, "evidence.flags_file").is_file():
        return None
    try:
        return today_defaults(read_flag_decls(root, cfg.flags_file, "evidence.flags_file"))
    except (FlagDeclError, SyntaxError) as exc:
        raise CheckError(str(exc)) from None
