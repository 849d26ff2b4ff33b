"""A pull request's body carries the trailer contract (filled in) and its issue references hold: `Closes #N` names a closed issue record, `Refs #N` an existing one, and each number agrees with its record and its row's spec.

The body comes from --message-file (a file, or - for stdin), else from the pull request in the GitHub event
($GITHUB_EVENT_PATH); with neither the check skips, saying so. It is not a tree gate, so `rowgate preflight`
does not run it: CI runs it on a pull request (ci/pr-body.sh).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ...checks.records.agent_record import check_message
from ...checks.records.issuerefs import body_rows, issue_refs, ref_pattern
from ...context import Context
from ...records import Loaded
from ...results import CheckError, Finding, Result, Rule, Status

ID = "pr-body"
RULES = (
    Rule("PB001", "closes-open-issue", "a body closes an issue whose intake record is not closed"),
    Rule("PB002", "ref-unknown-issue", "a body references an issue that has no intake record"),
)
R_OPEN, R_UNKNOWN = RULES
# GitHub's closing keywords: a body that says one of these before #N closes the issue when it merges.
CLOSING = ("close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved")
MAX_BODY = 1 << 20  # a PR body is at most 65,536 characters on GitHub; a megabyte bounds a local file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--message-file", metavar="PATH|-", help="the PR body (- reads stdin; default: the event's pull request)"
    )


def run(ctx: Context, args: argparse.Namespace) -> Result:
    body, display = read_body(ctx, args.message_file)
    if body is None:
        return Result.skip(ID, display)
    records = ctx.records
    keywords = ctx.config.record.ref_keywords
    closing = [k for k in keywords if k.lower() in CLOSING] or ["Closes"]
    findings = check_closing(body, records.issues, closing, display)
    findings += check_known(body, records.issues, keywords, display)
    findings += check_message(body, body_rows(body), records, ref_pattern(keywords), display, None)
    trailers, note = trailer_findings(ctx, body, display)
    findings += trailers
    refs = len(set(_numbers(body, keywords)))
    ok = f"OK: {display} carries the trailer contract{note} and its {refs} issue references hold"
    return Result.judge(ID, findings, 1, f"body ({refs} issue references)", ok)


def read_body(ctx: Context, message_file: str | None) -> tuple[str | None, str]:
    """The body and how to name it, or None and why there is none."""
    if message_file == "-":
        return sys.stdin.buffer.read(MAX_BODY).decode("utf-8", "replace"), "<stdin>"
    if message_file:
        try:
            with open(message_file, "rb") as f:
                return f.read(MAX_BODY).decode("utf-8", "replace"), message_file
        except OSError as exc:
            raise CheckError(f"--message-file {message_file}: {exc.strerror}", hint="pass a file or -") from None
    event = ctx.env.get("GITHUB_EVENT_PATH")
    if event:
        try:
            with open(event, "rb") as f:
                data = json.loads(f.read(64 * MAX_BODY))
        except (OSError, ValueError) as exc:
            raise CheckError(f"cannot read the event {event}: {exc}") from None
        pr = data.get("pull_request") if isinstance(data, dict) else None
        if isinstance(pr, dict):
            return str(pr.get("body") or ""), f"pull request #{pr.get('number')}"
    return None, "no PR body: pass --message-file FILE (or -), or run on a pull_request event"


def _numbers(body: str, keywords: list[str]) -> list[int]:
    return issue_refs(body, ref_pattern(keywords))


def check_closing(body: str, issues: list[Loaded], closing: list[str], display: str) -> list[Finding]:
    """`Closes #N`: the intake record of #N says it is closed (`state: closed`), in this very change."""
    out = []
    for n in _numbers(body, closing):
        records = [i for i in issues if i.model.number == n]
        if records and not any(i.model.state == "closed" for i in records):
            out.append(
                R_OPEN.finding(
                    f"closes #{n}, but its intake record {records[0].path} is not closed "
                    f"(state: {records[0].model.state})",
                    display,
                    None,
                    f"set `state: closed` in {records[0].path} in this change, or say `Refs #{n}`",
                )
            )
    return out


def check_known(body: str, issues: list[Loaded], keywords: list[str], display: str) -> list[Finding]:
    known = {i.model.number for i in issues}
    return [
        R_UNKNOWN.finding(
            f"references #{n}, which has no intake record under .agents/issues/",
            display,
            None,
            f"file .agents/issues/<ROW-ID>/ISSUE-{n}.md, or fix the number",
        )
        for n in _numbers(body, keywords)
        if n not in known
    ]


def trailer_findings(ctx: Context, body: str, display: str) -> tuple[list[Finding], str]:
    """The trailer contract in --filled mode (placeholders such as <ROW-ID> rejected)."""
    from ..commit_trailers import run as run_trailers

    with tempfile.TemporaryDirectory(prefix="rowgate-pr-body-") as tmp:
        path = Path(tmp) / "body.txt"
        path.write_text(body, encoding="utf-8")
        ns = argparse.Namespace(
            base=None,
            head=None,
            range=None,
            cutover=None,
            message_file=str(path),
            preset=None,
            filled=True,
            author=None,
        )
        try:
            result = run_trailers(ctx, ns)
        except CheckError as exc:
            if "contract is empty" in str(exc):
                return [], " (none configured)"
            raise
    if result.status == Status.ERROR:
        raise CheckError(result.summary, result.hint)
    return [f._replace(path=display) for f in result.findings], ""
