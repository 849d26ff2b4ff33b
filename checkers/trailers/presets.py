"""The built-in trailer presets, as data in the same model a repository's own rules use."""
from __future__ import annotations

from checkers.config import (TrailerCondition, TrailerContract, TrailerExemption, TrailerForbidRule,
                             TrailerKeyRule, TrailerParagraphRule)
from checkers.records import ROW_ID

# Names of coding assistants and their vendors; a Signed-off-by or Co-authored-by naming one is refused.
AI_IDENTITY = (r"\b(claude|anthropic|chatgpt|openai|gpt-?\d[\w.-]*|codex|copilot|gemini|bard|llama|mistral"
               r"|devin|aider|cursor|windsurf|codeium|tabnine|codewhisperer|amazon q)\b")
ASSISTED_BY = r"[^\s:\[\]]+:[^\s\[\]]+( \[[^\[\]]+\])+"
GITHUB_NOREPLY = r"@users\.noreply\.github\.com>"

AGENTS_PROTOCOL = TrailerContract(
    paragraphs=[TrailerParagraphRule(
        pattern="FOLLOWING_AGENTS_PROTOCOL", min=1, max=1,
        fix="put a paragraph `FOLLOWING_AGENTS_PROTOCOL` (alone, after a blank line) before the trailer block")],
    keys=[
        TrailerKeyRule(key="Following-Agents-Protocol", min=1, max=1, pattern="true",
                       fix="end the message with exactly one `Following-Agents-Protocol: true` trailer"),
        TrailerKeyRule(key="AI-Assisted", min=1, max=1, pattern="true|false",
                       fix="add exactly one `AI-Assisted: true` or `AI-Assisted: false` trailer"),
        TrailerKeyRule(key="Assisted-by", min=1, when=TrailerCondition(key="AI-Assisted", pattern="true"),
                       fix="name each assistant in an `Assisted-by: AGENT:MODEL [TOOL]` trailer"),
        TrailerKeyRule(key="Assisted-by", max=0, when=TrailerCondition(key="AI-Assisted", pattern="false"),
                       fix="drop the Assisted-by trailers, or set `AI-Assisted: true`"),
        TrailerKeyRule(key="Assisted-by", pattern=ASSISTED_BY,
                       fix="write `Assisted-by: AGENT:MODEL [TOOL]`, one or more bracketed tools"),
    ],
    forbid=[TrailerForbidRule(
        keys=["Signed-off-by", "Co-authored-by"], what="an AI", pattern=AI_IDENTITY, declared_by="Assisted-by",
        exempt=[TrailerExemption(key="Co-authored-by", pattern=GITHUB_NOREPLY)],
        fix="an assistant is declared with Assisted-by; Signed-off-by and Co-authored-by name people")],
    forbid_divider=True,
    placeholders=["AGENT:MODEL [TOOL]"],
)

DCO = TrailerContract(keys=[TrailerKeyRule(
    key="Signed-off-by", min=1, author=True,
    fix="sign off as the author: git commit --amend -s (or fix the author, or add the identity to .mailmap)")])

ROW = TrailerContract(
    keys=[TrailerKeyRule(key="Row", min=1, pattern=ROW_ID.strip("^$"), exists=".agents/rows/{}.yaml",
                         fix="end the message with a blank line and `Row: <ROW-ID>` naming a row in .agents/rows/")],
    placeholders=["<ROW-ID>"],
)

PRESETS: dict[str, TrailerContract] = {"agents-protocol": AGENTS_PROTOCOL, "dco": DCO, "row": ROW}
