"""Judge one commit message against a trailer contract: presets plus general rules, all data."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..results import Finding, Rule
from ..safe_regex import SafePattern, compile_pattern
from ..trailers import parser
from ..trailers.message import Message, paragraphs
from ..trailers.parser import Trailer
from ..trailers.presets import BUILTIN_PATTERNS, PRESETS
from ..trailers.skeleton import skeleton

if TYPE_CHECKING:
    # The rules arrive as these validated models, or as their cached sections (checkers.configcache):
    # the same attributes, without importing pydantic.
    from ..config import (
        TrailerContract,
        TrailerForbidRule,
        TrailerKeyRule,
        TrailerParagraphRule,
    )

RULES = (
    Rule("TR001", "trailer-missing", "a required trailer key is missing or below its minimum count"),
    Rule("TR002", "trailer-too-many", "a trailer key appears more often than its maximum"),
    Rule("TR003", "trailer-bad-value", "a trailer value does not match the key's pattern"),
    Rule("TR004", "trailer-forbidden-identity", "a Signed-off-by/Co-authored-by names an AI or a declared assistant"),
    Rule("TR005", "paragraph-count", "a required paragraph is missing or repeated"),
    Rule("TR006", "paragraph-in-trailers", "a required paragraph sits inside the trailer block"),
    Rule("TR007", "patch-divider", "a `---` line in the body cuts the message for git am and interpret-trailers"),
    Rule("TR008", "trailer-unknown-target", "a trailer value names a record that does not exist (Row: no such row)"),
    Rule("TR009", "signoff-not-author", "no Signed-off-by matches the commit author"),
    Rule("TR010", "merge-commit", "a merge commit where the configured merge policy forbids them"),
    Rule("TR011", "exception-unused", "a landed-message exception no longer matches any error"),
    Rule("TR012", "trailer-placeholder", "a trailer still holds the template placeholder (--filled)"),
)
R = {r.id: r for r in RULES}
_ORDER = {r.id: i for i, r in enumerate(RULES)}
GENERIC_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_-]*>")
DIVIDER_LINE = re.compile(r"^---[ \t\r\n]", re.M)


def _finding(rule: str, message: str, hint: str, line: int | None = None) -> Finding:
    """A finding of the message itself: no path (the caller knows the file or commit); `line` is 1-based in
    the message, where there is one."""
    return R[rule].finding(message, None, line, hint)


# Plain classes rather than dataclasses: judging starts in every commit-msg hook, and `dataclasses`
# imports `inspect`, a noticeable share of that start-up.


class Facts:
    """What the contract needs beyond the message text."""

    def __init__(
        self,
        author: str | None = None,
        mailmap: Callable[[str], str] = lambda ident: ident,
        exists: Callable[[str], bool] = lambda path: False,
        filled: bool = True,
    ):
        self.author = author  # `Name <email>`, mailmap applied
        self.mailmap = mailmap
        self.exists = exists
        self.filled = filled  # reject template placeholders
        self.memo: dict[tuple[int, str, str], tuple[Finding, ...]] = {}  # (rule, key, value): for one run
        # (contract, trailers, author) found clean: see judge
        self.clean: set[tuple[int, tuple[Trailer, ...], str | None]] = set()


class Compiled:
    """A contract with its presets expanded and its regexes compiled once."""

    def __init__(self, names: list[str]):
        self.names = names
        self.paragraphs: list[TrailerParagraphRule] = []
        self.keys: list[TrailerKeyRule] = []
        self.forbid: list[TrailerForbidRule] = []
        self.forbid_divider = False
        self.placeholders: set[str] = set()
        self.ruled_keys: set[str] = set()  # lower-cased keys that some key rule names
        self.lowered: list[tuple[TrailerKeyRule, str]] = []  # each key rule with its key lower-cased
        self.trailers_only = False  # no paragraph or divider rule: the trailers (and the author) alone decide

    @property
    def empty(self) -> bool:
        return not (self.paragraphs or self.keys or self.forbid or self.forbid_divider)

    @property
    def needs_author(self) -> bool:
        return any(k.author for k in self.keys)


def compile_contract(contract: TrailerContract, presets: list[str] | None = None) -> Compiled:
    """Expand presets (`presets` replaces the contract's own list when given) and the general rules."""
    names = list(contract.presets if presets is None else presets)
    parts = [PRESETS[n] for n in names] + [contract]
    out = Compiled(names=names)
    for part in parts:
        out.paragraphs += part.paragraphs
        out.keys += part.keys
        out.forbid += part.forbid
        out.forbid_divider |= part.forbid_divider
        out.placeholders |= set(part.placeholders)
    out.lowered = [(k, k.key.lower()) for k in out.keys]
    out.ruled_keys = {key for _, key in out.lowered}
    out.trailers_only = not (out.paragraphs or out.forbid_divider)
    for pattern in (
        [p.pattern for p in out.paragraphs]
        + [k.pattern for k in out.keys if k.pattern]
        + [k.when.pattern for k in out.keys if k.when]
        + [f.pattern for f in out.forbid if f.pattern]
        + [e.pattern for f in out.forbid for e in f.exempt]
    ):
        _re(pattern)  # a bad pattern fails here, once, not per commit
    for k in out.keys:
        if k.exists and (k.exists.count("{}") != 1 or "{" in k.exists.replace("{}", "")):
            raise ValueError(f"trailers: exists template {k.exists!r} must hold `{{}}` exactly once")
    return out


def _re(pattern: str, flags: int = 0, trusted: bool = False) -> SafePattern:
    """A pattern compiled once: a configured one's matches run with a time limit (checkers.safe_regex); the
    presets' own patterns, and those rowgate builds from escaped literals, are `trusted` (linear, on `re`)."""
    try:
        return compile_pattern(pattern, flags, trusted or pattern in BUILTIN_PATTERNS)
    except ValueError as exc:
        raise ValueError(f"trailers: {exc}") from None


def judge(msg: Message, contract: Compiled, facts: Facts) -> list[Finding]:
    """Every way `msg` breaks `contract`, in rule order."""
    # The same trailer block recurs across a range (one row, the same sign-offs). When the trailers alone
    # decide (with the author, for a sign-off rule), a block found clean once is clean again for the same
    # author (facts hold for the run); a block with problems is judged every time, since its hints quote
    # the message.
    clean = (id(contract), msg.trailers, facts.author)  # the author only matters to a sign-off rule: kept always
    if contract.trailers_only and clean in facts.clean:
        return []
    by_key: dict[str, list[Trailer]] = {}
    for t in msg.trailers:
        key = t.key.lower()
        if key in by_key:
            by_key[key].append(t)
        else:
            by_key[key] = [t]
    problems = _key_problems(msg, contract, facts, by_key)
    if contract.forbid:
        problems += _forbid_problems(contract, by_key)
    if contract.paragraphs:
        problems += _paragraph_problems(msg, contract)
    if contract.forbid_divider:
        problems += _divider_problems(msg.text)
    if not problems and contract.trailers_only:
        facts.clean.add(clean)
    return sorted(problems, key=lambda p: _ORDER[p.rule]) if len(problems) > 1 else problems


def _is_placeholder(value: str, contract: Compiled) -> bool:
    return value in contract.placeholders or (value[:1] == "<" and GENERIC_PLACEHOLDER.fullmatch(value) is not None)


def _holds(msg_keys: dict[str, list[Trailer]], rule: TrailerKeyRule) -> bool:
    if rule.when is None:
        return True
    pat = _re(rule.when.pattern)
    return any(pat.fullmatch(t.value) for t in msg_keys.get(rule.when.key.lower(), []))


def _key_problems(msg: Message, contract: Compiled, facts: Facts, by_key: dict[str, list[Trailer]]) -> list[Finding]:
    out: list[Finding] = []
    if facts.filled:
        ruled, placeholders = contract.ruled_keys, contract.placeholders
        out += [
            _finding(
                "TR012", f"{t.key}: {t.value} is the template placeholder", f"replace {t.value} with the real value"
            )
            for t in msg.trailers
            if (t.value in placeholders or t.value[:1] == "<")  # cheap test first
            and t.key.lower() in ruled
            and _is_placeholder(t.value, contract)
        ]
    for rule, lkey in contract.lowered:
        if rule.when is not None and not _holds(by_key, rule):
            continue
        found = by_key.get(lkey, ())
        n = len(found)
        if n < rule.min or (rule.max is not None and n > rule.max):
            out += _count_problems(msg, rule, n)
        if not n:
            continue
        if rule.pattern or rule.exists:
            for t in found:
                # Values repeat across a range (the same row, the same people): judge each one once.
                key = (id(rule), t.key, t.value)
                problems = facts.memo.get(key)
                if problems is None:
                    problems = facts.memo[key] = _value_problems(rule, t, contract, facts)
                out += problems
        if rule.author:
            pat = _re(rule.pattern) if rule.pattern else None
            real = [
                t for t in found if not _is_placeholder(t.value, contract) and (pat is None or pat.fullmatch(t.value))
            ]
            if real:
                out += _author_problems(rule, real, facts)
    return out


def _count_problems(msg: Message, rule: TrailerKeyRule, n: int) -> list[Finding]:
    cond = f" with {rule.when.key}: {rule.when.pattern}" if rule.when else ""
    plural = "s" if n != 1 else ""
    if n < rule.min:
        text = (
            f"no {rule.key} trailer{cond} (need at least {rule.min})"
            if n == 0
            else f"{n} {rule.key} trailer{plural}{cond} (need at least {rule.min})"
        )
        return [_finding("TR001", text, _missing_hint(msg, rule))]
    return [
        _finding(
            "TR002",
            f"{n} {rule.key} trailer{plural}{cond} (at most {rule.max})",
            rule.fix or f"keep at most {rule.max}",
        )
    ]


def _value_problems(rule: TrailerKeyRule, t: Trailer, contract: Compiled, facts: Facts) -> tuple[Finding, ...]:
    if _is_placeholder(t.value, contract):
        return ()  # reported once as TR012 under --filled; a template's placeholder is its shape
    if rule.pattern and not _re(rule.pattern).fullmatch(t.value):
        return (
            _finding(
                "TR003",
                f"{t.key}: {t.value!r} does not match {rule.pattern!r}",
                rule.fix or f"write a value that matches {rule.pattern}",
            ),
        )
    if rule.exists:
        path = rule.exists.format(t.value)
        if "/" in t.value or ".." in t.value or not facts.exists(path):
            return (
                _finding(
                    "TR008",
                    f"{t.key}: {t.value} names nothing ({path} does not exist)",
                    rule.fix or f"name an existing {rule.exists.format('*')}",
                ),
            )
    return ()


def _missing_hint(msg: Message, rule: TrailerKeyRule) -> str:
    hint = rule.fix or f"add a `{rule.key}:` trailer to the trailer block"
    stray = re.search(rf"^{re.escape(rule.key)}[ \t]*:", msg.text[: msg.body_end], re.M | re.I)
    if stray:
        line = msg.text.count("\n", 0, stray.start()) + 1
        hint = (
            f"line {line} `{rule.key}:` is not in the trailer block (git reads only the last paragraph, "
            f"when it is all trailers): move it there; {hint}"
        )
    return hint


def _author_problems(rule: TrailerKeyRule, found: list[Trailer], facts: Facts) -> list[Finding]:
    if facts.author is None:
        return [
            _finding(
                "TR009",
                f"cannot tell who the author is, so no {rule.key} can be matched",
                "set your identity (git config user.name / user.email), or pass --author 'Name <email>'",
            )
        ]
    want = _norm_ident(facts.author)
    if any(_norm_ident(facts.mailmap(t.value)) == want for t in found):
        return []
    names = ", ".join(t.value for t in found)
    return [
        _finding(
            "TR009",
            f"no {rule.key} matches the author {facts.author} (found: {names})",
            rule.fix or "sign off as the author",
        )
    ]


def _norm_ident(ident: str) -> str:
    ident = " ".join(ident.split())
    name, sep, email = ident.partition("<")
    return f"{name.strip()} <{email.strip().lower()}" if sep else ident


def _forbid_problems(contract: Compiled, by_key: dict[str, list[Trailer]]) -> list[Finding]:
    out: list[Finding] = []
    for rule in contract.forbid:
        declared = _declared(by_key.get(rule.declared_by.lower(), [])) if rule.declared_by else []
        pat = _re(rule.pattern, re.I) if rule.pattern else None
        for key in rule.keys:
            for t in by_key.get(key.lower(), []):
                if any(e.key.lower() == key.lower() and _re(e.pattern).search(t.value) for e in rule.exempt):
                    continue
                # matched as written and in its skeleton: a lookalike (`Claude3`, a Cyrillic `а`) is the name
                hit = (pat.search(t.value) or pat.search(skeleton(t.value))) if pat else None
                if hit:
                    why = f"names {rule.what} ({hit.group(0)})"
                else:
                    who = next(
                        (
                            d
                            for d in declared
                            if _re(rf"(?<![\w.-]){re.escape(d)}(?![\w.-])", re.I, trusted=True).search(t.value)
                        ),
                        None,
                    )
                    if who is None:
                        continue
                    why = f"names {who}, declared in {rule.declared_by}"
                out.append(_finding("TR004", f"{t.key}: {t.value} {why}", rule.fix or f"remove the {t.key} trailer"))
    return out


def _declared(trailers: list[Trailer]) -> list[str]:
    """The identities an `AGENT:MODEL [TOOL] [TOOL2] ...` value declares: the agent, the model and each tool."""
    out = []
    for t in trailers:
        ident = t.value.split(" [", 1)[0]
        out += [p.strip() for p in ident.split(":", 1) if p.strip()]
        out += [tool.strip() for tool in re.findall(r"\[([^\[\]]+)\]", t.value) if tool.strip()]
    return list(dict.fromkeys(out))


def _paragraph_problems(msg: Message, contract: Compiled) -> list[Finding]:
    out: list[Finding] = []
    if not contract.paragraphs:
        return out
    paras = paragraphs(msg.text[: msg.body_end])[1:]  # the title paragraph never counts
    block_lines = msg.text[msg.body_end : msg.block.end].split("\n")
    for rule in contract.paragraphs:
        pat = _re(rule.pattern)
        whole = rule.whole
        n = sum(1 for _, first, para in paras if pat.fullmatch(para if whole else first))
        inside = [ln for ln in block_lines if pat.fullmatch(ln.rstrip(" \t\r"))]
        if inside:
            out.append(
                _finding(
                    "TR006",
                    f"{rule.pattern} is inside the trailer block",
                    rule.fix or f"make {rule.pattern} its own paragraph before the trailers",
                )
            )
        want = (
            f"exactly {rule.min}"
            if rule.min == rule.max
            else (f"at least {rule.min}" if rule.max is None else f"{rule.min} to {rule.max}")
        )
        if n < rule.min or (rule.max is not None and n > rule.max):
            text = (
                f"no {rule.pattern} paragraph before the trailer block (need {want})"
                if n == 0
                else f"{n} {rule.pattern} paragraphs (need {want})"
            )
            out.append(_finding("TR005", text, rule.fix or f"write the {rule.pattern} paragraph {want} time(s)"))
    return out


def _divider_problems(text: str) -> list[Finding]:
    cut = parser.end_of_log_message(text, no_divider=True)  # scissors and trailing comments excluded
    out = []
    for m in DIVIDER_LINE.finditer(text, 0, cut):
        line = text.count("\n", 0, m.start()) + 1
        out.append(
            _finding(
                "TR007",
                f"line {line} starts with `---`, git's patch divider: git am and "
                f"git interpret-trailers drop everything after it",
                "use `***` for a separator line (or indent it)",
                line,
            )
        )
    return out
