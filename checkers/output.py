"""Renderers over one list of results: text, json, github, sarif, junit. Nothing else prints findings."""

from __future__ import annotations

import json
from typing import Any

from . import __version__
from .paths import escape as _esc
from .results import Finding, Result, Rule, Status, exit_code

FORMATS = ("text", "json", "github", "sarif", "junit")
JSON_SCHEMA_ID = "rowgate.results/1"
_LABEL = {Status.PASS: "ok", Status.FAIL: "FAIL", Status.SKIP: "SKIP", Status.ERROR: "ERROR"}


def render(
    fmt: str,
    results: list[Result],
    rules: list[Rule],
    fail_on_skip: bool = False,
    preflight: bool = False,
    not_run: list[tuple[str, str]] | None = None,
    anchors: dict[str, tuple[str, int | None]] | None = None,
) -> str:
    """`not_run`: (check, why) of the checks the config disabled; `anchors`: per check, the config file
    and line that configure it (SARIF points commit-level findings there)."""
    if fmt == "text":
        return render_text(results, preflight=preflight, fail_on_skip=fail_on_skip, not_run=not_run)
    if fmt == "json":
        return render_json(results, fail_on_skip, not_run)
    if fmt == "github":
        return render_github(results)
    if fmt == "sarif":
        return render_sarif(results, rules, anchors)
    if fmt == "junit":
        return render_junit(results)
    raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


# --- text -------------------------------------------------------------------


def finding_lines(result: Result) -> list[str]:
    """The findings, each hint printed once per run under the first finding that carries it (a range of
    58 unsigned commits shares one fix); JSON and SARIF keep the hint on every finding."""
    shared: dict[str, int] = {}
    for f in result.findings:
        if f.hint:
            shared[f.hint] = shared.get(f.hint, 0) + 1
    lines = []
    for f in result.findings:  # every field escaped: data never breaks or forges a line
        loc = _esc(f.location() or "")
        lines.append(f"{loc + ': ' if loc else ''}{f.rule} {f.name}: {_esc(f.message)}")
        n = shared.pop(f.hint, 0) if f.hint else 0
        if f.hint and n:
            lines.append(f"    fix{f' (all {n} findings with this hint)' if n > 1 else ''}: {_esc(f.hint)}")
    return lines


def render_text(
    results: list[Result],
    preflight: bool = False,
    fail_on_skip: bool = False,
    not_run: list[tuple[str, str]] | None = None,
) -> str:
    out: list[str] = []
    if preflight:
        width = max((len(c) for c in [r.check for r in results] + [c for c, _ in not_run or ()]), default=0)
        for r in results:
            out.append(f"{_LABEL[r.status]:<5} {r.check:<{width}} {r.duration_s:6.2f}s  {_esc(r.summary)}")
        for check, why in not_run or ():
            out.append(f"{'--':<5} {check:<{width}} {'':>7}  not run: {_esc(why)}")
        for r in results:
            if r.status in (Status.FAIL, Status.ERROR) or r.details and r.status != Status.PASS:
                out.append("")
                out.append(f"--- {r.check} ---")
                out.extend(_esc(d, keep="\t") for d in r.details)
                out.extend(finding_lines(r))
                if r.hint:
                    out.append(f"    fix: {_esc(r.hint)}")
        out.append("")
        out.append(verdict(results, fail_on_skip))
        return "\n".join(out) + "\n"
    for r in results:
        out.extend(_esc(d, keep="\t") for d in r.details)
        out.extend(finding_lines(r))
        prefix = {Status.PASS: "OK", Status.FAIL: "FAIL", Status.SKIP: "SKIP", Status.ERROR: "ERROR"}[r.status]
        # A pass summary is written by the check as the full success line ("OK: ...").
        out.append(f"{prefix}: {r.check}: {_esc(r.summary)}" if r.status != Status.PASS else _esc(r.summary))
        if r.hint and r.status != Status.PASS:
            out.append(f"    fix: {_esc(r.hint)}")
    return "\n".join(out) + "\n"


def verdict(results: list[Result], fail_on_skip: bool = False) -> str:
    counts = {s: sum(r.status == s for r in results) for s in Status}
    total = sum(r.duration_s for r in results)
    if not results:
        return "NOT green: no gates ran"
    if counts[Status.FAIL] == counts[Status.ERROR] == counts[Status.SKIP] == 0:
        return f"All gates green ({len(results)} gates, {total:.2f}s)"
    parts = [
        f"{counts[s]} {name}"
        for s, name in ((Status.FAIL, "failed"), (Status.ERROR, "could not verify"), (Status.SKIP, "skipped"))
        if counts[s]
    ]
    tail = "" if exit_code(results, fail_on_skip) else " (skips do not fail this run; --fail-on-skip makes them)"
    return f"NOT green: {', '.join(parts)} of {len(results)} gates ({total:.2f}s){tail}"


# --- json -------------------------------------------------------------------


def render_json(results: list[Result], fail_on_skip: bool = False, not_run: list[tuple[str, str]] | None = None) -> str:
    doc = {
        "schema": JSON_SCHEMA_ID,
        "tool": {"name": "rowgate", "version": __version__},
        "exit_code": exit_code(results, fail_on_skip),
        "results": [r.to_json() for r in results],
        "not_run": [{"check": c, "reason": why} for c, why in not_run or ()],
    }
    return json.dumps(doc, indent=2) + "\n"


# --- github workflow commands --------------------------------------------------


def _gh_data(s: str) -> str:
    """A workflow-command value: `%`, CR and LF encoded as the runner decodes them, every other control
    character escaped, so no value ends the command line or starts another (`::error`, `::stop-commands`)."""
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return _esc(s)


def _gh_prop(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


def render_github(results: list[Result]) -> str:
    out = []
    for r in results:
        for f in r.findings:
            props = []
            if f.path:
                props.append(f"file={_gh_prop(f.path)}")
                if f.line:
                    props.append(f"line={f.line}")
            props.append(f"title={_gh_prop(f'{f.rule} {f.name}')}")
            msg = f.message + (f"\n(fix: {f.hint})" if f.hint else "")
            out.append(f"::error {','.join(props)}::{_gh_data(msg)}")
        if r.status == Status.ERROR:
            out.append(
                f"::error title={_gh_prop(r.check)}::{_gh_data(r.summary + (f' (fix: {r.hint})' if r.hint else ''))}"
            )
        elif r.status == Status.SKIP:
            out.append(f"::warning title={_gh_prop(r.check)}::{_gh_data('skipped: ' + r.summary)}")
        else:
            out.append(f"::notice title={_gh_prop(r.check)}::{_gh_data(r.status.value + ': ' + r.summary)}")
    return "\n".join(out) + "\n"


# --- SARIF 2.1.0 ----------------------------------------------------------------

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
CONFIG_FILE = ".agents/config.yaml"  # where a commit-level finding points when no config file was read


def render_sarif(
    results: list[Result], rules: list[Rule], anchors: dict[str, tuple[str, int | None]] | None = None
) -> str:
    """Every result has a physical location, as code scanning requires: the finding's file, or for a
    finding about a commit (or a whole range) the config line of its check, with the commit named in a
    logical location."""
    ordered = sorted({r.id: r for r in rules}.values(), key=lambda r: r.id)
    index = {r.id: i for i, r in enumerate(ordered)}
    checks = _rule_checks(ordered, results)
    anchors = anchors or {}
    sarif_results = []
    seen: dict[str, int] = {}
    for r in results:
        for f in r.findings:
            item: dict[str, Any] = {
                "ruleId": f.rule,
                "level": "error",
                "message": {"text": _esc(f.message + (f" (fix: {f.hint})" if f.hint else ""))},
                "properties": {"check": r.check},
                "partialFingerprints": {"rowgate/v1": _fingerprint(f, seen)},
            }
            if f.rule in index:
                item["ruleIndex"] = index[f.rule]
            if f.path:
                path, line = f.path, f.line
            else:  # the config line of its check, else (no config file) a file its commit changes
                path, line = anchors.get(r.check) or anchors.get(f.commit or "") or (CONFIG_FILE, None)
            phys: dict[str, Any] = {"artifactLocation": {"uri": _uri(path), "uriBaseId": "%SRCROOT%"}}
            if line:
                phys["region"] = {"startLine": line}
            location: dict[str, Any] = {"physicalLocation": phys}
            if f.commit:
                location["logicalLocations"] = [
                    {"name": f.commit, "fullyQualifiedName": f"commit/{f.commit}", "kind": "resource"}
                ]
            item["locations"] = [location]
            sarif_results.append(item)
    notifications = [
        {
            "level": "error" if r.status == Status.ERROR else "warning",
            "message": {"text": _esc(f"{r.check}: {r.summary}")},
        }
        for r in results
        if r.status in (Status.ERROR, Status.SKIP)
    ]
    doc = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "rowgate",
                        "version": __version__,
                        "rules": [_sarif_rule(r, checks.get(r.id)) for r in ordered],
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": not any(r.status == Status.ERROR for r in results),
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": sarif_results,
            }
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def _uri(path: str) -> str:
    """A relative URI reference for a repository path: control characters, space, `%`, `?` and `#`
    percent-encoded (as UTF-8 bytes), the rest as it is."""

    def enc(ch: str) -> str:
        if ord(ch) < 33 or ord(ch) == 127 or ch in "%?#":
            return "".join(f"%{b:02X}" for b in ch.encode("utf-8", errors="surrogateescape"))
        return ch

    return "".join(enc(ch) for ch in path)


# Where each check's page is published: docs/checks/<check>.md of the release this version was cut from
# (the tag v<version>, docs/RELEASING.md).
DOCS_URL = "https://github.com/rowgate/rowgate/blob/v{version}/docs/checks/{check}.md"


def _rule_checks(rules: list[Rule], results: list[Result]) -> dict[str, str]:
    """Rule id -> the check that owns it: from the results, else from the registry."""
    from . import registry

    owner = {f.rule: r.check for r in results for f in r.findings}
    for spec in registry.CHECKS:
        if all(rule.id in owner for rule in rules):
            break
        for rule in spec.load().RULES:
            owner.setdefault(rule.id, spec.id)
    return owner


def _fingerprint(f: Finding, seen: dict[str, int]) -> str:
    """Stable across runs and unique per result: the rule and the commit for a commit-level finding (a
    second finding of the same rule on the same commit gets `:2`), else the rule, the path and the message
    (not the line, which moves with unrelated edits)."""
    import hashlib

    key = f"{f.rule}\0commit\0{f.commit}" if f.commit else f"{f.rule}\0{f.path or ''}\0{f.message}"
    seen[key] = seen.get(key, 0) + 1
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return digest if seen[key] == 1 else f"{digest}:{seen[key]}"


def _sarif_rule(rule: Rule, check: str | None) -> dict[str, Any]:
    text = (
        f"{rule.summary}. `rowgate rules {rule.id}` explains it; `ignore: [{rule.id}]` in the config turns "
        f"it off, `per_file_ignores` for some paths."
    )
    out: dict[str, Any] = {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.summary},
        "help": {"text": text, "markdown": text},
        "defaultConfiguration": {"level": "error"},
    }
    if check:
        url = DOCS_URL.format(version=__version__, check=check)
        out["helpUri"] = url
        out["help"]["text"] += f" The check: {url}"
        out["help"]["markdown"] = (
            f"**{rule.id} {rule.name}**: {rule.summary}.\n\n"
            f"- explain: `rowgate rules {rule.id}`\n"
            f"- turn off: `ignore: [{rule.id}]` in the config, or `per_file_ignores` for some paths\n"
            f"- the check `{check}`: [docs/checks/{check}.md]({url})"
        )
    return out


# --- JUnit XML ------------------------------------------------------------------


def render_junit(results: list[Result]) -> str:
    import xml.etree.ElementTree as ET  # here, not at the top: the other formats do not pay for it

    suite = ET.Element(
        "testsuite",
        name="rowgate",
        tests=str(len(results)),
        failures=str(sum(r.status == Status.FAIL for r in results)),
        errors=str(sum(r.status == Status.ERROR for r in results)),
        skipped=str(sum(r.status == Status.SKIP for r in results)),
        time=f"{sum(r.duration_s for r in results):.3f}",
    )
    for r in results:
        # XML 1.0 cannot hold most control characters at all: every value is escaped first
        case = ET.SubElement(suite, "testcase", classname="rowgate", name=_esc(r.check), time=f"{r.duration_s:.3f}")
        body = "\n".join([_esc(d, keep="\t") for d in r.details] + finding_lines(r))
        summary = _esc(r.summary)
        if r.status == Status.FAIL:
            ET.SubElement(case, "failure", message=summary, type="fail").text = body
        elif r.status == Status.ERROR:
            ET.SubElement(case, "error", message=summary, type="error").text = _esc(r.hint or "")
        elif r.status == Status.SKIP:
            ET.SubElement(case, "skipped", message=summary)
        else:
            ET.SubElement(case, "system-out").text = summary
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
