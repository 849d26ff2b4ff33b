"""Render the public views from the records: one matrix per area, the roadmap table, and the environment
table from the engine's flag registry. Pure functions: records in, {path: text} out."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from .config import STATES, Config
from .flagdecls import FlagDecl, read_flag_decls
from .paths import confine, escape
from .records import Records

BANNER = "<!-- Rendered by `rowgate render` from {source}; edit those, never this file. -->"
ENV_HEADER = "| flag | default | gates | description |"


def render_all(records: Records, decls: list[FlagDecl], config: Config) -> dict[str, str]:
    """Every rendered file, keyed by its repository-relative path."""
    docs = config.docs
    views: dict[str, str] = {}
    if "matrices" in docs.views:
        views.update({f"{docs.matrices_dir}/{area}.md": render_matrix(records, area) for area in config.rows.areas})
    if "roadmap" in docs.views:
        views[docs.roadmap] = render_roadmap(records, config.rows.areas, config.rows.state_order)
    if "environment" in docs.views:
        views[docs.environment] = render_environment(decls, docs.flags_file)
    return views


def render_matrix(records: Records, area: str) -> str:
    lines = [
        BANNER.format(source=".agents/rows"),
        "",
        f"# {area} rows",
        "",
        "| row | state | title | claim | issues | evidence |",
        "|---|---|---|---|---|---|",
    ]
    rows = sorted((r.model for r in records.rows.values() if r.model.area == area), key=lambda r: r.id)
    for row in rows:
        claim = records.claims.get(row.claim) if row.claim else None
        who = f"{row.claim} ({claim.model.owner}, `{claim.model.branch}`)" if claim else (row.claim or "")
        issues = ", ".join(f"#{n}" for n in row.issues)
        evidence = ", ".join(f"`{Path(e).name}`" for e in row.evidence)
        lines.append(_cells(row.id, row.state, row.title, who, issues, evidence))
    if not rows:
        lines.append(f"\nNo {area} rows.")
    return "\n".join(lines) + "\n"


def render_roadmap(records: Records, areas: list[str], states: Sequence[str] = STATES) -> str:
    models = sorted((r.model for r in records.rows.values()), key=lambda r: (_order(areas, r.area), r.id))
    lines = [
        BANNER.format(source=".agents/rows"),
        "",
        "# Roadmap",
        "",
        "Rows per area and state, derived from `.agents/rows/` (never counted by hand).",
        "",
        "| area | " + " | ".join(states) + " | total |",
        "|---" * (len(states) + 2) + "|",
    ]
    for area in areas:
        counts = [sum(1 for m in models if m.area == area and m.state == s) for s in states]
        lines.append(_cells(f"[{area}](matrices/{area}.md)", *(str(c) if c else "" for c in counts), str(sum(counts))))
    lines += ["", "| row | area | state | title | issues |", "|---|---|---|---|---|"]
    for m in models:
        lines.append(_cells(m.id, m.area, m.state, m.title, ", ".join(f"#{n}" for n in m.issues)))
    return "\n".join(lines) + "\n"


def render_environment(decls: list[FlagDecl], source: str = "engine/flags.py") -> str:
    """One row per declared flag, in declaration order; the env-doc check reads the first column, so the
    format is fixed."""
    lines = [
        "# Environment variables",
        "",
        f"<!-- Rendered from {source} by `rowgate render`; edit the declarations, not this file. -->",
        "",
        "Every `VT_*` flag the engine reads, as declared in its flag registry. Boolean flags take",
        "`1/0`, `true/false`, `on/off` or `yes/no`; a kernel flag stays OFF until it passes the flip gates.",
        "",
        ENV_HEADER,
        "|---|---|---|---|",
    ]
    for d in decls:
        lines.append(_cells(f"`{d.name}`", d.default, d.gates, d.doc))
    return "\n".join(lines) + "\n"


def stale_views(root: Path, views: dict[str, str]) -> dict[str, str]:
    """Path -> unified diff of each rendered file that is missing or differs from what is on disk."""
    stale = {}
    for rel, want in views.items():
        path = confine(root, rel)
        have = path.read_text(encoding="utf-8") if path.is_file() else ""
        if have != want:
            diff = difflib.unified_diff(
                have.splitlines(keepends=True),
                want.splitlines(keepends=True),
                f"a/{rel}" if path.is_file() else "/dev/null",
                f"b/{rel}",
                n=1,
            )
            stale[rel] = "".join(diff)
    return stale


def load_views(root: Path, records: Records, config: Config) -> dict[str, str]:
    """Every rendered file; OutsideRepo, naming the config key, when one of them would lie outside the
    repository (stale_views and the writer confine each path again)."""
    for field in ("matrices_dir", "roadmap", "environment"):
        confine(root, getattr(config.docs, field), f"docs.{field}")
    wanted = config.docs.views
    decls = read_flag_decls(root, config.docs.flags_file, "docs.flags_file") if "environment" in wanted else []
    return render_all(records, decls, config)


def _cells(*values: str) -> str:
    """One table row. A value from a record is data, not markup: control, C1 and bidirectional
    characters are escaped (checkers.paths.escape) and `<` written as `&lt;`, so a title cannot open an
    HTML comment (`<!--`) that hides the rest of the page, nor any other tag."""
    return "| " + " | ".join(_cell(v) for v in values) + " |"


def _cell(value: str) -> str:
    return escape(value.replace("\n", " "), keep="\t").replace("<", "&lt;").replace("|", "\\|")


def _order(areas: list[str], area: str) -> int:
    return areas.index(area) if area in areas else len(areas)
