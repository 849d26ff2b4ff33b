"""The built-in trailer presets, as data in the shape a repository's own validated rules take.

They are built as config sections (`checkers.configcache.Section`), not pydantic models, so that judging a
range needs no pydantic; the builders below take the models' defaults, and a test validates every preset
against the models in `checkers.config` and holds each builder's defaults to its model's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from ..configcache import Section
from ..ids import ROW_ID

if TYPE_CHECKING:  # what each builder's section reads as
    from ..config import (
        TrailerCondition,
        TrailerContract,
        TrailerExemption,
        TrailerForbidRule,
        TrailerKeyRule,
        TrailerParagraphRule,
    )

# Names of coding assistants and their vendors, and the generic words for one (ai, agent, bot, llm, gpt),
# each a whole word (`Alice` is not `ai`, `Abbott` not `bot`); a Signed-off-by or Co-authored-by naming one
# is refused.
AI_IDENTITY = (
    r"\b(ai|agent|bot|llm|claude|claudecode|anthropic|chatgpt|openai|gpt(-?\d[\w.-]*)?|codex|copilot"
    r"|gemini|bard|llama|mistral|devin|aider|cursor|windsurf|codeium|tabnine|codewhisperer|amazon q"
    r"|qwen|deepseek|grok|kimi|gemma)\b"
)
ASSISTED_BY = r"[^\s:\[\]]+:[^\s\[\]]+( \[[^\[\]]+\])+"
# A forge's own account address (what a web squash writes for the pull request's author): any case, and only
# at the end of the value, so `<x@users.noreply.github.com.evil>` or text after the address is no exemption.
GITHUB_NOREPLY = r"(?i)<[^<>]*@users\.noreply\.github\.com>[ \t]*$"


# --- builders: one per model in checkers.config, with its defaults ------------------------------------


def contract(
    *,
    paragraphs: Sequence[TrailerParagraphRule] = (),
    keys: Sequence[TrailerKeyRule] = (),
    forbid: Sequence[TrailerForbidRule] = (),
    forbid_divider: bool = False,
    placeholders: Sequence[str] = (),
) -> TrailerContract:
    """A TrailerContract."""
    return cast(
        "TrailerContract",
        Section(
            presets=[],
            paragraphs=list(paragraphs),
            keys=list(keys),
            forbid=list(forbid),
            forbid_divider=forbid_divider,
            placeholders=list(placeholders),
        ),
    )


def key_rule(
    key: str,
    *,
    min: int = 0,
    max: int | None = None,
    pattern: str | None = None,
    exists: str | None = None,
    author: bool = False,
    when: TrailerCondition | None = None,
    fix: str | None = None,
) -> TrailerKeyRule:
    """A TrailerKeyRule."""
    return cast(
        "TrailerKeyRule",
        Section(key=key, min=min, max=max, pattern=pattern, exists=exists, author=author, when=when, fix=fix),
    )


def condition(key: str, pattern: str) -> TrailerCondition:
    """A TrailerCondition."""
    return cast("TrailerCondition", Section(key=key, pattern=pattern))


def paragraph_rule(
    pattern: str, *, min: int = 1, max: int | None = 1, whole: bool = False, fix: str | None = None
) -> TrailerParagraphRule:
    """A TrailerParagraphRule."""
    return cast("TrailerParagraphRule", Section(pattern=pattern, min=min, max=max, whole=whole, fix=fix))


def forbid_rule(
    keys: list[str],
    *,
    what: str = "a forbidden identity",
    pattern: str | None = None,
    declared_by: str | None = None,
    exempt: Sequence[TrailerExemption] = (),
    fix: str | None = None,
) -> TrailerForbidRule:
    """A TrailerForbidRule."""
    return cast(
        "TrailerForbidRule",
        Section(keys=list(keys), what=what, pattern=pattern, declared_by=declared_by, exempt=list(exempt), fix=fix),
    )


def exemption(key: str, pattern: str) -> TrailerExemption:
    """A TrailerExemption."""
    return cast("TrailerExemption", Section(key=key, pattern=pattern))


# --- the presets ------------------------------------------------------------------------------------

AGENTS_PROTOCOL = contract(
    paragraphs=[
        paragraph_rule(
            "FOLLOWING_AGENTS_PROTOCOL",
            min=1,
            max=1,
            whole=True,
            fix="put a paragraph `FOLLOWING_AGENTS_PROTOCOL` (alone, after a blank line) before the trailer block",
        )
    ],
    keys=[
        key_rule(
            "Following-Agents-Protocol",
            min=1,
            max=1,
            pattern="true",
            fix="end the message with exactly one `Following-Agents-Protocol: true` trailer",
        ),
        key_rule(
            "AI-Assisted",
            min=1,
            max=1,
            pattern="true|false",
            fix="add exactly one `AI-Assisted: true` or `AI-Assisted: false` trailer",
        ),
        key_rule(
            "Assisted-by",
            min=1,
            when=condition("AI-Assisted", "true"),
            fix="name each assistant in an `Assisted-by: AGENT:MODEL [TOOL]` trailer",
        ),
        key_rule(
            "Assisted-by",
            max=0,
            when=condition("AI-Assisted", "false"),
            fix="drop the Assisted-by trailers, or set `AI-Assisted: true`",
        ),
        key_rule(
            "Assisted-by",
            pattern=ASSISTED_BY,
            fix="write `Assisted-by: AGENT:MODEL [TOOL]`, one or more bracketed tools",
        ),
    ],
    forbid=[
        forbid_rule(
            ["Signed-off-by", "Co-authored-by"],
            what="an AI",
            pattern=AI_IDENTITY,
            declared_by="Assisted-by",
            exempt=[exemption("Co-authored-by", GITHUB_NOREPLY)],
            fix="an assistant is declared with Assisted-by; Signed-off-by and Co-authored-by name people",
        )
    ],
    forbid_divider=True,
    placeholders=["AGENT:MODEL [TOOL]"],
)

# The sign-off hint depends on where it is read: a commit-msg hook runs before the commit exists (so
# `--amend` would rewrite the previous one), a range judges commits already made.
DCO_FIX = {
    "range": "sign off each listed commit as its author: git rebase --signoff BASE (only the last commit: "
    "git commit --amend -s); or fix the author, or map the identity in .mailmap",
    "hook": "commit again with git commit -s, which adds `Signed-off-by: {author}`; or fix the author "
    "(git config user.name / user.email), or map the identity in .mailmap",
}
DCO = contract(keys=[key_rule("Signed-off-by", min=1, author=True, fix=DCO_FIX["range"])])

ROW = contract(
    keys=[
        key_rule(
            "Row",
            min=1,
            pattern=ROW_ID.strip("^$"),
            exists=".agents/rows/{}.yaml",
            fix="end the message with a blank line and `Row: <ROW-ID>` naming a row in .agents/rows/",
        )
    ],
    placeholders=["<ROW-ID>"],
)

PRESETS: dict[str, TrailerContract] = {"agents-protocol": AGENTS_PROTOCOL, "dco": DCO, "row": ROW}

# Every pattern the presets hold: rowgate's own and linear, so they run on `re` without a time limit
# (checkers.safe_regex, trusted); a test holds each one equal under `re` and `regex` on sample values.
BUILTIN_PATTERNS = frozenset(
    pattern
    for preset in PRESETS.values()
    for pattern in (
        [p.pattern for p in preset.paragraphs]
        + [k.pattern for k in preset.keys if k.pattern]
        + [k.when.pattern for k in preset.keys if k.when]
        + [f.pattern for f in preset.forbid if f.pattern]
        + [e.pattern for f in preset.forbid for e in f.exempt]
    )
)
