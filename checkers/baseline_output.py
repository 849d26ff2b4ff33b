"""Renderers of a baseline comparison (checkers.baseline): text, json and SARIF with `baselineState`."""

from __future__ import annotations

import json
from typing import Any

from . import __version__
from .baseline import FIXED, INHERITED, NEW, SARIF_STATE, Baseline, Judged
from .output import render_sarif
from .paths import escape as _esc
from .results import Finding, Result, Rule, Status

JSON_SCHEMA_ID = "rowgate.baseline/1"
_LABEL = {NEW: "NEW", INHERITED: "INHERITED", FIXED: "FIXED"}


def render_baseline(
    fmt: str,
    report: Baseline,
    rules: list[Rule],
    fail_on_inherited: bool = False,
    anchors: dict[str, tuple[str, int | None]] | None = None,
) -> str:
    """`anchors`: for SARIF, where a finding without a file points (checkers.sarif_anchors.for_results)."""
    if fmt == "json":
        return render_json(report, fail_on_inherited)
    if fmt == "sarif":
        return render_sarif_baseline(report, rules, anchors)
    if fmt == "text":
        return render_text(report, fail_on_inherited)
    raise ValueError(f"--baseline writes text, json or sarif, not {fmt!r}")


def render_text(report: Baseline, fail_on_inherited: bool = False) -> str:
    width = max((len(g.check) for g in report.gates), default=0)
    out = [report.describe(), ""]
    for g in report.gates:
        bad = g.of(NEW) or g.new_error or (fail_on_inherited and (g.of(INHERITED) or g.inherited_error))
        label = "FAIL" if bad else ("SKIP" if g.head.status == Status.SKIP else "ok")
        out.append(f"{label:<5} {g.check:<{width}}  {_esc(g.line())}")
    for g in report.gates:
        if not g.judged:
            continue
        out += ["", f"--- {g.check} ---"]
        for j in sorted(g.judged, key=lambda j: [NEW, INHERITED, FIXED].index(j.state)):
            out.append(f"{_LABEL[j.state]:<9} {_finding(j)}")
        if g.fixed_note:
            out.append(f"    upstream: {_esc(g.fixed_note)}" + ("; rebase onto it" if g.fixed_by else ""))
    out += ["", verdict(report, fail_on_inherited)]
    return "\n".join(out) + "\n"


def _finding(j: Judged) -> str:
    f = j.finding
    loc = _esc(f.location())
    text = f"{loc + ': ' if loc else ''}{f.rule} {f.name}: {_esc(f.message)}"
    if j.touched is False:
        text += " [file not touched by this branch]"
    return text


def verdict(report: Baseline, fail_on_inherited: bool = False) -> str:
    new = [g.check for g in report.gates if g.of(NEW) or g.new_error]
    inherited = [g.check for g in report.gates if g.of(INHERITED) or g.inherited_error]
    code = report.exit_code(fail_on_inherited)
    parts = []
    if new:
        count = sum(len(g.of(NEW)) for g in report.gates)
        errors = sum(g.new_error for g in report.gates)
        what = ", ".join(
            x for x in (f"{count} new" if count else "", f"{errors} could not verify" if errors else "") if x
        )
        parts.append(f"{what} ({', '.join(new)})")
    if inherited:
        upstream = [f"{g.check} at {g.fixed_by[:12]}" for g in report.gates if g.fixed_by]
        tail = "; fixed upstream: " + ", ".join(upstream) if upstream else ""
        parts.append(f"inherited from the base ({', '.join(inherited)}){tail}")
    if code:
        return "NOT green: " + "; ".join(parts) + ("" if fail_on_inherited else " (only new failures count)")
    fixes = sum(len(g.of(FIXED)) for g in report.gates)
    also = f"; the branch fixes {fixes} the base has" if fixes else ""
    if inherited:
        return "No new failures: " + "; ".join(parts) + also + " (--fail-on-inherited makes them count)"
    return f"No new failures: the branch adds none{also or ' and the base has none'}"


def render_json(report: Baseline, fail_on_inherited: bool = False) -> str:
    doc = {
        "schema": JSON_SCHEMA_ID,
        "tool": {"name": "rowgate", "version": __version__},
        "exit_code": report.exit_code(fail_on_inherited),
        "base": {"ref": report.ref, "source": report.source, "sha": report.base_sha},
        "merge_base": report.merge_base,
        "head": report.head,
        "gates": [
            {
                "check": g.check,
                "summary": g.line(),
                "base": None if g.base is None else g.base.to_json(),
                "head": g.head.to_json(),
                "counts": {s: len(g.of(s)) for s in (NEW, INHERITED, FIXED)},
                "fixed_upstream": None if g.fixed_by is None else {"commit": g.fixed_by, "note": g.fixed_note},
                "findings": [j.to_json() for j in g.judged],
            }
            for g in report.gates
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def sarif_results(report: Baseline) -> tuple[list[Result], list[Judged]]:
    """Per gate, a result holding its judged findings (the head's, then the base's fixed ones), and the
    judged findings in the same order."""
    results: list[Result] = []
    states: list[Judged] = []
    for g in report.gates:
        judged = [j for j in g.judged if j.state != FIXED] + g.of(FIXED)
        copy = Result(g.check, g.head.status, g.head.summary, g.head.examined, g.head.unit, _findings(judged))
        results.append(copy)
        states.extend(judged)
    return results, states


def render_sarif_baseline(
    report: Baseline, rules: list[Rule], anchors: dict[str, tuple[str, int | None]] | None = None
) -> str:
    """The plain SARIF of the judged findings (head findings, then the base's fixed ones), each result given
    its `baselineState`: new, unchanged (inherited) or absent (fixed); inherited ones on files the branch
    did not touch say so in their properties."""
    results, states = sarif_results(report)
    doc: dict[str, Any] = json.loads(render_sarif(results, rules, anchors))
    for item, j in zip(doc["runs"][0]["results"], states, strict=True):
        item["baselineState"] = SARIF_STATE[j.state]
        item["properties"]["baseline"] = j.state
        if j.touched is not None:
            item["properties"]["fileTouched"] = j.touched
    return json.dumps(doc, indent=2) + "\n"


def _findings(judged: list[Judged]) -> list[Finding]:
    return [j.finding for j in judged]
