"""Detect records kept as markdown tables (a repository's roadmap matrices and claims table), for `rowgate
init`: which files hold rows, how their columns map onto record fields, the id pattern, the states and what
each state's rows already carry, where claims are, and any per-state summary table. Every choice comes with
the reason init prints. Only tracked markdown under `.agents/` is read, each file bounded in size.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import STATES
from .gitio import Git
from .recordsources.tables import Table, clean, normalize, read_tables

MAX_BYTES = 4 << 20
SHARE = 0.9  # the share of a state's rows that makes what they carry that state's requirement
_CODE = re.compile(r"`([^`]+)`")
_STATE = re.compile(r"`([A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*)`")
_PREFIX = re.compile(r"^([A-Z][A-Z0-9]*)-[A-Za-z0-9_.-]+$")
_ID = "[A-Za-z0-9_.-]+"
TEST_DIRS = ("tests", "test", "testing")


@dataclass
class Detected:
    """Config sections to merge into init's plan, and the reasons for each choice."""

    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)


@dataclass
class _File:
    path: str
    tables: list[Table]
    ids: list[str]
    states: list[str]
    owners: list[str]
    title_headers: list[str]
    anchor_headers: list[str]
    spec_headers: list[str]


def record_tables(root: Path, paths: list[str]) -> Detected | None:
    """The `rows`, `sources` and `record` sections for a repository whose rows live in markdown tables
    under .agents/ (an `ID` column, a `State` column and an `Owner` column), or None."""
    markdown = [p for p in paths if p.startswith(".agents/") and p.endswith(".md") and p.count("/") == 1]
    files: list[_File] = []
    claims: tuple[str, Table] | None = None
    rollups: list[dict[str, Any]] = []
    skipped: list[str] = []
    for rel in sorted(markdown):
        path = root / rel
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_BYTES:
            continue
        tables = read_tables(path.read_text(encoding="utf-8", errors="replace"))
        rows = [t for t in tables if _is_row_table(t)]
        if not rows and any("id" in t.names and any(_state_col(n) for n in t.names) for t in tables):
            skipped.append(rel)
        if rows:
            files.append(_file(rel, rows))
        for t in tables:
            if claims is None and t.names and t.names[0] == "claim" and any("row" in n for n in t.names):
                claims = (rel, t)
            if (
                len(t.names) > 2
                and t.names[1] == "rows"
                and any(x.cells and "total" in normalize(x.cells[0]) for x in t.lines)
            ):
                rollups.append(
                    {
                        "path": rel,
                        "header": clean(t.header.cells[0]),
                        "total": "Total",
                        "count_column": clean(t.header.cells[1]),
                    }
                )
    if not files:
        return None
    files.sort(key=lambda f: _mention_order(root, f.path))
    return _plan(root, paths, files, claims, rollups, skipped)


def _mention_order(root: Path, rel: str) -> tuple[int, str]:
    """Files in the order AGENTS.md first names them (the order a reader meets them), the rest by name."""
    agents = root / "AGENTS.md"
    text = agents.read_text(encoding="utf-8", errors="replace")[:MAX_BYTES] if agents.is_file() else ""
    at = text.find(Path(rel).name)
    return (at if at >= 0 else len(text) + 1, rel)


def _is_row_table(t: Table) -> bool:
    return "id" in t.names and any(_state_col(n) for n in t.names) and any("owner" in n for n in t.names)


def _state_col(name: str) -> bool:
    return name == "state" or name.endswith(" state")


def _file(rel: str, tables: list[Table]) -> _File:
    ids: list[str] = []
    states: list[str] = []
    owners: list[str] = []
    titles: list[str] = []
    anchors: list[str] = []
    specs: list[str] = []
    for t in tables:
        names = t.names
        i_id = names.index("id")
        i_state = next(i for i, n in enumerate(names) if _state_col(n))
        i_owner = next(i for i, n in enumerate(names) if "owner" in n)
        if i_id + 1 < len(names):
            titles.append(clean(t.header.cells[i_id + 1]))
        for i, n in enumerate(names):
            if ("code" in n or "test" in n or "evidence" in n) and "upstream" not in n:
                anchors.append(clean(t.header.cells[i]))
            if "spec" in n and i != i_state:
                specs.append(clean(t.header.cells[i]))
        for line in t.lines:
            if len(line.cells) != len(names):
                continue
            ident = clean(line.cells[i_id])
            if not _PREFIX.match(ident):
                continue
            found = _STATE.findall(line.cells[i_state])
            ids.append(ident)
            states.append(found[0] if len(found) == 1 else "")
            owners.append(line.cells[i_owner])
    return _File(rel, tables, ids, states, owners, _uniq(titles), _uniq(anchors), _uniq(specs))


def _uniq(values: list[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def _plan(
    root: Path,
    paths: list[str],
    files: list[_File],
    claims: tuple[str, Table] | None,
    rollups: list[dict[str, Any]],
    skipped: list[str],
) -> Detected:
    out = Detected()
    top_dirs = sorted({p.split("/", 1)[0] for p in paths if "/" in p and not p.startswith(".")})
    top_files = sorted(p for p in paths if "/" not in p and not p.startswith("."))
    roots = "|".join(re.escape(d) + "/" for d in [*top_dirs, ".github/workflows", ".agents"])
    files_alt = "|".join(re.escape(f) for f in top_files if not f.endswith(".md"))
    anchor_pattern = (
        rf"(?<![\w./-])((?:(?:{roots})[\w./-]+{'|' + files_alt if files_alt else ''}):\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)"
    )
    claim_prefix = None
    if claims is not None:
        first = [clean(x.cells[0]) for x in claims[1].lines if x.cells]
        prefixes = Counter(m.group(1) for c in first if (m := _PREFIX.match(c)))
        claim_prefix = prefixes.most_common(1)[0][0] if prefixes else None
    tables: list[dict[str, Any]] = []
    areas: list[str] = []
    all_prefixes: list[str] = []
    for f in files:
        in_file = Counter(m.group(1) for i in f.ids if (m := _PREFIX.match(i)))
        found_prefixes: list[str] = [p for p, _ in in_file.most_common() if p != claim_prefix]
        top, n_top = (found_prefixes[0], in_file[found_prefixes[0]]) if found_prefixes else ("ROW", 0)
        if n_top >= SHARE * max(1, len(f.ids)):
            area, kept = top, [top]
        else:
            stem = Path(f.path).stem.removesuffix("-matrix").split("-")[0]
            area, kept = re.sub(r"[^A-Z0-9]", "", stem.upper()) or "ROWS", sorted(found_prefixes)
        all_prefixes += [p for p in kept if p not in all_prefixes]
        areas.append(area)
        id_pattern = f"(?:{'|'.join(kept)})-{_ID}" if len(kept) > 1 else f"{kept[0]}-{_ID}"
        columns: dict[str, Any] = {
            "id": "ID",
            "title": f.title_headers,
            "state": {"headers": ["State"], "pattern": r"`([A-Z][A-Z0-9-]*)`"},
        }
        if f.anchor_headers:
            columns["anchors"] = {
                "headers": f.anchor_headers,
                "pattern": anchor_pattern,
                "links": True,
                "optional": True,
            }
        if f.spec_headers and (root / ".agents" / "specs").is_dir():
            columns["spec"] = {
                "headers": f.spec_headers,
                "pattern": r"\]\((specs/[^)#\s]+\.md)",
                "relative": True,
                "optional": True,
            }
        if claim_prefix:
            columns["claim"] = {"headers": ["Owner"], "pattern": f"{claim_prefix}-{_ID}"}
        columns["closing_commit"] = {"headers": ["Owner"], "pattern": r"^\W*([0-9a-f]{7,40})\W*$"}
        tables.append({"paths": [f.path], "id_pattern": id_pattern, "values": {"area": area}, "columns": columns})
        out.reasons.append(
            f"{f.path}: {len(f.ids)} rows in {len(f.tables)} tables (ID, State and Owner columns); area {area}, "
            f"ids {id_pattern}"
        )
    for rel in skipped:
        out.reasons.append(f"{rel}: tables with ID and State but no Owner column: a summary, not rows (not read)")
    found = [s for f in files for s in f.states if s]
    order = [s for s in STATES if s in found] + sorted({s for s in found if s not in STATES})
    order += [s for s in STATES if s not in order]
    per_state: dict[str, list[int]] = {}
    for f in files:
        for idx, s in enumerate(f.states):
            per_state.setdefault(s, []).append(0)
            if claim_prefix and re.search(f"{claim_prefix}-{_ID}", f.owners[idx]):
                per_state[s][-1] = 1
    # an active state is one of the default active states whose rows (nearly) all hold a claim
    candidates = ("SPIKE", "ACTIVE", "GATING")
    active = [s for s in candidates if s in per_state and sum(per_state[s]) >= SHARE * len(per_state[s])]
    states = {s: {"claim": True} for s in active}
    out.reasons.append(
        f"states (as found): {', '.join(order)}; active: {', '.join(active) or 'none'} "
        f"(of SPIKE, ACTIVE, GATING: those where at least {int(SHARE * 100)}% of the rows name a "
        f"{claim_prefix or 'claim'}-* owner)"
    )
    tests = [d for d in top_dirs if d in TEST_DIRS]
    rows: dict[str, Any] = {
        "areas": areas,
        "id_pattern": f"(?:{'|'.join(all_prefixes)})-{_ID}",
        "state_order": order,
        "active_states": active,
        "states": states,
        "spec_sections": [],
        "orphan_specs": False,
        "inactive_claims": "ignored",
        "test_anchors": [f"{d}/**" for d in tests] + [".agents/*.md"],
        "code_anchors": [f"{d}/**" for d in top_dirs if d not in tests] + top_files,
    }
    out.reasons.append(
        "specs are linked, not named by heading: no spec_sections; specs no row links are allowed; "
        "a finished row's Owner keeps its last claim as history (inactive_claims: ignored)"
    )
    out.reasons.append(
        f"test anchors under {', '.join(tests) or '(no test folder)'} and .agents/*.md; code anchors elsewhere"
    )
    sources: dict[str, Any] = {"rows": {"files": False, "tables": tables}}
    if claims is not None and claim_prefix:
        rel, t = claims
        header = [clean(c) for c in t.header.cells]
        pick = {
            "id": header[0],
            "rows": next((h for h in header if "row" in normalize(h)), None),
            "owner": next((h for h in header if normalize(h) in ("agent", "owner", "who")), None),
            "branch": next((h for h in header if "branch" in normalize(h)), None),
            "since": next((h for h in header if normalize(h) in ("last update", "since", "date", "claimed")), None),
        }
        cols: dict[str, Any] = {"id": pick["id"]}
        ids_alt = "|".join(all_prefixes)
        if pick["rows"]:
            cols["rows"] = {
                "headers": [pick["rows"]],
                "pattern": rf"(?<![\w-])(?:{ids_alt})-[A-Za-z0-9_.-]*[A-Za-z0-9_]",
            }
        if pick["owner"]:
            cols["owner"] = pick["owner"]
        if pick["branch"]:
            cols["branch"] = {"headers": [pick["branch"]], "pattern": "`([^`]+)`"}
        if pick["since"]:
            cols["since"] = {"headers": [pick["since"]], "pattern": r"(\d{4}-\d{2}-\d{2})"}
        sources["claims"] = {
            "files": False,
            "tables": [
                {
                    "paths": [rel],
                    "id_pattern": f"{claim_prefix}-{_ID}",
                    "values": {"branch": "(not named)"},
                    "columns": cols,
                }
            ],
        }
        out.reasons.append(
            f"{rel}: the claims table (header line {t.header.line}), {claim_prefix}-* ids; "
            + ", ".join(f"{k} from {v!r}" for k, v in pick.items() if v)
        )
    out.sections["rows"] = rows
    out.sections["sources"] = sources
    out.reasons.append(f"areas in the order AGENTS.md names their files: {', '.join(areas)}")
    record: dict[str, Any] = {"count_areas": areas}
    if rollups:
        record["rollups"] = rollups
        out.reasons += [
            f"{r['path']}: a per-state summary table ({r['header']} | {r['count_column']} | states, a Total line)"
            for r in rollups
        ]
    out.sections["record"] = record
    out.sections["docs"] = {"views": [], "engine_paths": []}
    out.reasons.append("docs: the tables are the public records, so nothing is rendered from them (docs.views: [])")
    return out


CHECKPOINT_SHARE = 0.75  # of the commits that change a place, the share that also change the documents
DOC_SHARE = 0.5  # of all commits, the share that change a document for it to be a checkpoint document


def checkpoint_rule(history: list[list[str]]) -> tuple[dict[str, Any], list[str]] | None:
    """A doc-checkpoint rule read from the history (each commit's changed paths, newest first): the
    documents (markdown files) that at least half the commits change, and the places (a top folder as
    `dir/**`, or a file under .agents/) whose every change, nearly always, changes those documents too."""
    n = len(history)
    if n < 20:
        return None
    doc_counts = Counter(
        p for paths in history for p in set(paths) if p.endswith(".md") and not p.startswith(".agents/")
    )
    docs = sorted(p for p, c in doc_counts.items() if c >= DOC_SHARE * n)
    if not docs:
        return None
    seen: Counter[str] = Counter()
    with_docs: Counter[str] = Counter()
    for paths in history:
        places = {_place(p) for p in paths} - set(docs) - {_place(d) for d in docs}
        both = all(d in paths for d in docs)
        for place in places:
            seen[place] += 1
            with_docs[place] += both
    when = sorted(p for p, c in seen.items() if c >= 5 and with_docs[p] >= CHECKPOINT_SHARE * c)
    if not when:
        return None
    reasons = [
        f"{', '.join(docs)}: changed by at least {int(DOC_SHARE * 100)}% of the last {n} commits "
        f"({', '.join(str(doc_counts[d]) for d in docs)})",
        f"a change to {len(when)} places usually changes them too (at least {int(CHECKPOINT_SHARE * 100)}% "
        f"of the commits that change each): "
        + ", ".join(f"{p} {with_docs[p]}/{seen[p]}" for p in when[:8])
        + (f", ... (+{len(when) - 8})" if len(when) > 8 else ""),
    ]
    return {"name": "checkpoint", "when": when, "require": docs}, reasons


def history(git: Git, n: int = 500) -> list[list[str]]:
    """The changed paths of the last `n` non-merge commits of HEAD, one `git log`."""
    if git.resolve("HEAD") is None:
        return []
    out = git.text(
        "log", "-z", "--no-merges", "--no-renames", f"--max-count={n}", "--format=%x00%H", "--name-only", "HEAD", "--"
    )
    commits: list[list[str]] = []
    for field_ in out.split("\0"):
        field_ = field_.lstrip("\n")
        if len(field_) == 40 and all(c in "0123456789abcdef" for c in field_):
            commits.append([])
        elif field_ and commits:
            commits[-1].append(field_)
    return commits


_MERGED = re.compile(r"^Merge (?:remote-tracking )?branch '(?:origin/)?([A-Za-z0-9_.-]+/)[^']+'")


def merge_prefix(git: Git, n: int = 2000) -> tuple[str, int, int] | None:
    """The branch prefix most merges of the history name (`port/` in `Merge branch 'port/x'`), with how
    many merges name it and how many merges were read."""
    if git.resolve("HEAD") is None:
        return None
    subjects = git.text("log", "--merges", f"--max-count={n}", "--format=%s", "HEAD", "--").splitlines()
    counts = Counter(m.group(1) for s in subjects if (m := _MERGED.match(s)))
    if not counts:
        return None
    prefix, count = counts.most_common(1)[0]
    return prefix, count, len(subjects)


def _place(path: str) -> str:
    if path.startswith(".agents/"):
        return path if path.count("/") == 1 else path.split("/", 2)[0] + "/" + path.split("/", 2)[1] + "/**"
    return path.split("/", 1)[0] + "/**" if "/" in path else path
