"""`rowgate init`: write a commented config for the repository it stands in, and say what it chose and why.

Every choice comes from the repository itself: the trailer presets from its history, the path classes
from its top folders, the gencode audit from its CUDA sources, an arch feature table and a
compile_commands.json, the record checks from `.agents/rows/`, and the env-doc, gemv-invocation and
pr-size pairing sections from the layout detectors (`checkers.detect_layout`, called through DETECTORS).
The config says only what differs from the defaults, with a comment for each choice; a check with
nothing to work on here is disabled, with the reason.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from .. import registry
from ..configsource import CONFIG_PATH
from ..gitio import Git, GitError, discover
from ..results import EXIT_ERROR, EXIT_PASS, EXIT_USAGE, RecordError

HISTORY = 500  # the most recent commits read for the trailer conventions
MOST = 0.8  # the share of those commits that makes a convention the repository's
TOP_LEVEL_BUDGET = 300  # changed lines of top-level files (build files, READMEs, configs)
UNBUDGETED = ("third_party", "thirdparty", "vendor", "vendored", "external", "extern", "data", "assets")
CLASS_NAME = re.compile(r"[^a-z0-9-]+")
_TESTS = re.compile(r"(^|/)(tests?|fixtures|testdata)/")


@dataclass
class Section:
    """One top-level key of the config: its value and the lines that explain it (printed and written)."""

    key: str
    value: object
    reasons: list[str] = field(default_factory=list)


@dataclass
class Plan:
    sections: list[Section] = field(default_factory=list)
    disabled: dict[str, str] = field(default_factory=dict)  # check id -> why
    enabled: dict[str, str] = field(default_factory=dict)  # check id -> what it will check
    notes: list[str] = field(default_factory=list)  # printed first: what limits what init could see

    def section(self, key: str) -> Section | None:
        return next((s for s in self.sections if s.key == key), None)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = sub.add_parser(
        name,
        help="write a config for this repository, saying what it chose and why",
        description="Write a commented rowgate config for the repository in the current "
        "directory: trailer presets from its history, path classes from its top "
        "folders, and which checks apply here. Non-interactive when stdin is "
        "not a terminal.",
    )
    p.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    p.add_argument("--config", type=Path, metavar="PATH", help=f"where to write (default: {CONFIG_PATH})")
    p.add_argument("--dry-run", action="store_true", help="print the config instead of writing it")
    p.add_argument("--yes", "-y", action="store_true", help="write without asking")
    p.add_argument("--force", action="store_true", help="replace an existing config file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        root = discover(args.repo or Path.cwd())
        plan = detect(root)
    except GitError as exc:
        print(f"rowgate: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"    fix: {exc.hint}", file=sys.stderr)
        return EXIT_ERROR
    target = args.config if args.config else root / CONFIG_PATH
    target = target if target.is_absolute() else Path.cwd() / target
    text = render(plan, root)
    _validate(text, target)
    if args.dry_run:
        sys.stdout.write(text)
        return EXIT_PASS
    for line in describe(plan):
        print(line)
    if target.exists() and not args.force:
        print(
            f"rowgate: {_rel(root, target)} exists; nothing written (--force replaces it, --dry-run prints "
            "the new one)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not args.yes and sys.stdin.isatty():
        answer = input(f"write {_rel(root, target)}? [Y/n] ").strip().lower()
        if answer not in ("", "y", "yes"):
            print("nothing written")
            return EXIT_PASS
    _write(target, text)
    rel = _rel(root, target)
    flag = "" if target == root / CONFIG_PATH else f" --config {rel}"
    for line in commit_hint(plan, rel, flag):
        print(line)
    return EXIT_PASS


def commit_hint(plan: Plan, rel: str, flag: str) -> list[str]:
    """How to commit the config with a message that the contract just configured accepts (the commit comes
    after the cutover, so it is judged): the message is checked against that contract before it is shown."""
    from ..config import TrailerContract
    from ..trailers.contract import Facts, compile_contract, judge
    from ..trailers.message import read_message

    trailers = plan.section("trailers")
    presets = list(trailers.value.get("presets", [])) if trailers and isinstance(trailers.value, dict) else []
    lines = ["Add the rowgate configuration", ""]
    if "agents-protocol" in presets:
        lines += ["FOLLOWING_AGENTS_PROTOCOL", "", "Following-Agents-Protocol: true", "AI-Assisted: false"]
    sign = " -s" if "dco" in presets else ""
    body = "\n".join(lines).rstrip("\n") + "\n"
    # the sign-off `git commit -s` adds, with a stand-in author: the author rule compares it to the commit's
    author = "Init Check <init@example.invalid>"
    checked = body + (("\n" if "agents-protocol" not in presets else "") + f"Signed-off-by: {author}\n" if sign else "")
    problems = (
        []
        if "row" in presets
        else judge(read_message(checked, "hook"), compile_contract(TrailerContract(), presets), Facts(author=author))
    )
    if "agents-protocol" not in presets and "row" not in presets and not problems:  # a subject (and -s) is enough
        return [f"wrote {rel}; commit it (git add {rel} && git commit{sign}), then run `rowgate preflight{flag}`"]
    if "row" in presets or problems:
        return [
            f"wrote {rel}; commit it (git add {rel} && git commit{sign}) with a message the trailer contract "
            f"accepts (presets {', '.join(presets)}), then run `rowgate preflight{flag}`"
        ]
    return [
        f"wrote {rel}; commit it with a message the trailer contract you configured accepts:",
        f"  git add {rel} && git commit{sign} -F - <<'EOF'",
        *[f"  {line}" if line else "" for line in body.splitlines()],
        "  EOF",
        f"then run `rowgate preflight{flag}`",
    ]


# --- detection ------------------------------------------------------------------------------------


def detect(root: Path) -> Plan:
    git = Git(root)
    plan = Plan()
    paths = git.ls_files()
    _shallow(git, plan)
    _records(root, plan)
    _evidence(root, plan)
    _trailers(git, plan)
    _path_classes(paths, plan)
    _gencode(root, paths, plan)
    _layout(root, plan)
    return plan


def _records(root: Path, plan: Plan) -> None:
    from ..preflight import has_records

    record_checks = [c.id for c in registry.CHECKS if c.records]
    if has_records(root):
        for check in record_checks:
            plan.enabled[check] = "the records in .agents/rows/"
        return
    if _record_tables(root, plan):
        for check in record_checks:
            plan.enabled[check] = "the records in the markdown tables under .agents/ (sources:)"
        return
    for check in record_checks:
        plan.disabled[check] = "no records in .agents/rows/ (the rows workflow is not used here)"


def _record_tables(root: Path, plan: Plan) -> bool:
    """Rows and claims kept as markdown tables (checkers.detect_records): their config sections, each choice
    with its reason under the `sources` section."""
    from ..detect_records import checkpoint_rule, history, merge_prefix, record_tables

    git = Git(root)
    found = record_tables(root, git.ls_files())
    if found is None:
        return False
    rule = checkpoint_rule(history(git))
    merged = merge_prefix(git)
    if merged is not None:
        prefix, count, total = merged
        found.sections["role"] = {
            "mode": "branch",
            "branch_prefix": prefix,
            "topic_branches": True,
            "pr_refs": True,
            "exempt": [".agents/**"],
        }
        found.reasons.append(
            f"role: branch mode, {count} of {total} merges land a {prefix}<topic> branch; pull request "
            "subjects (#N) count; a commit that changes only .agents/ records needs no branch"
        )
    if rule is not None:
        found.sections["docs"]["checkpoints"] = [rule[0]]
        found.reasons += [f"docs.checkpoints, read from the history (review it): {r}" for r in rule[1]]
    for key, value in found.sections.items():
        plan.sections.append(Section(key, value, found.reasons if key == "sources" else []))
    return True


def _evidence(root: Path, plan: Plan) -> None:
    """evidence runs where a ledger is: it holds the documents' cited numbers to the records there."""
    ledger = root / ".agents" / "ledger"
    found = sum(1 for _ in ledger.glob("*.json")) if ledger.is_dir() else 0
    if found:
        plan.enabled["evidence"] = f"the {found} ledger records in .agents/ledger/"
    else:
        plan.disabled["evidence"] = "no ledger records in .agents/ledger/ (no numbers to hold to a record)"


def _trailers(git: Git, plan: Plan) -> None:
    """Presets from the history: most commits signed off by their author -> dco; Assisted-by trailers or
    the FOLLOWING_AGENTS_PROTOCOL paragraph -> agents-protocol; Row trailers (with records) -> row. Bot
    commits are left out of the counts (the config exempts them). The cutover is HEAD as found and the
    default range starts there, so CI judges what lands after init; merges are skipped where the history
    merges through a forge's button (its merge commits carry no trailers)."""
    from ..trailers.message import read_message

    head = git.resolve("HEAD")
    if head is None:
        plan.disabled["commit-trailers"] = "no commits yet: run `rowgate init` again after the first commit"
        return
    out = git.text("log", "-z", f"--max-count={HISTORY}", "--no-merges", "--format=%H%x1f%aN <%aE>%x1f%B", "HEAD")
    commits = [record.split("\x1f", 2) for record in out.split("\0") if record.strip()]
    bot_commits = [c for c in commits if _is_bot(c[1])]
    commits = [c for c in commits if not _is_bot(c[1])]
    n = len(commits)
    signed = protocol = rows = 0
    for _sha, author, message in commits:
        msg = read_message(message, "range")
        keys = {t.key.lower(): t.value for t in msg.trailers}
        sign_offs = [t.value for t in msg.trailers if t.key.lower() == "signed-off-by"]
        is_signed = _ident(author) in {_ident(v) for v in sign_offs}
        has_protocol = "assisted-by" in keys or "FOLLOWING_AGENTS_PROTOCOL" in message
        has_row = "row" in keys
        signed += is_signed
        protocol += has_protocol
        rows += has_row
    counts = {"dco": signed, "agents-protocol": protocol, "row": rows}
    what = {
        "dco": "signed off by their author",
        "agents-protocol": "carry Assisted-by or FOLLOWING_AGENTS_PROTOCOL",
        "row": "carry a Row trailer",
    }
    presets = [name for name in ("row", "dco", "agents-protocol") if n and counts[name] >= MOST * n]
    if "row" in presets and "agent-record" in plan.disabled:
        presets.remove("row")  # a Row trailer must name a row in .agents/rows/: there are none
    read = n + len(bot_commits)
    scope = f"of the last {n} commits" if read == HISTORY else f"of {n} commits"
    if bot_commits:
        scope += " by people"
    reasons = [f"{counts[name]} {scope} {what[name]}" for name in ("dco", "agents-protocol", "row")]
    if not presets:
        plan.disabled["commit-trailers"] = (
            f"no trailer convention in the history ({'; '.join(reasons)}); "
            "set trailers.presets (dco, row, agents-protocol) to enforce one"
        )
        return
    value: dict[str, object] = {"presets": presets}
    plan.enabled["commit-trailers"] = f"presets {', '.join(presets)}"
    why = [r for r, name in zip(reasons, ("dco", "agents-protocol", "row")) if name in presets]
    chosen = [f"presets [{', '.join(presets)}]: {'; '.join(why)}"]
    old = contract_breaks(git, presets, commits)
    value["default_range"] = "cutover"
    value["cutover_judged"] = "legacy"  # the cutover is HEAD as found, which predates the contract
    chosen.append("default_range: cutover: a run with no range judges the commits after the cutover")
    chosen += _merge_policy(git, presets, value)
    chosen += _bot_policy(value, len(bot_commits))
    chosen += legacy_rule(git, presets, commits, old, value)
    plan.sections.append(Section("cutover", head, _cutover_reasons(git, head, n, len(old), read)))
    plan.sections.append(Section("trailers", value, chosen))


def contract_breaks(git: Git, presets: list[str], commits: list[list[str]]) -> list[str]:
    """The commits read (sha, author, message) that the chosen presets' contract rejects, judged by the
    contract itself (a Row trailer must name a row file, a sign-off must be the author's), not by the
    markers that chose the presets."""
    from ..config import TrailerContract
    from ..trailers.contract import Facts, compile_contract, judge
    from ..trailers.message import read_message

    contract = compile_contract(TrailerContract(), presets)
    root = git.root
    facts = Facts(exists=lambda rel: (root / rel).is_file())
    out = []
    for sha, author, message in commits:
        facts.author = author
        if judge(read_message(message, "range"), contract, facts):
            out.append(sha)
    return out


# The conventions an older era may have kept, weakest claim first: (name, legacy rule, what it checks).
_LEGACY_CANDIDATES: tuple[tuple[str, dict[str, object], str], ...] = (
    (
        "marker",
        {"paragraphs": [{"pattern": "FOLLOWING_AGENTS_PROTOCOL", "whole": True, "max": None}]},
        "the FOLLOWING_AGENTS_PROTOCOL paragraph",
    ),
    ("assisted", {"keys": [{"key": "Assisted-by", "min": 1}]}, "an Assisted-by trailer"),
    ("signed", {"presets": ["dco"]}, "a sign-off by the author"),
)


def legacy_rule(
    git: Git, presets: list[str], commits: list[list[str]], broken: list[str], value: dict[str, object]
) -> list[str]:
    """A `legacy` rule for the commits before the cutover, where they break the presets but most of them keep
    an older convention: a history run then judges them by it (an empty legacy rule examines nothing, and
    the run would end in `examined 0 commits`)."""
    from ..config import TrailerContract
    from ..trailers.contract import Facts, compile_contract, judge
    from ..trailers.message import read_message

    if not broken or not commits:
        return []
    root = git.root
    for _name, rule, what in _LEGACY_CANDIDATES:
        contract = compile_contract(TrailerContract.model_validate(rule))
        facts = Facts(exists=lambda rel: (root / rel).is_file())
        kept = 0
        for _sha, author, message in commits:
            facts.author = author
            kept += not judge(read_message(message, "range"), contract, facts)
        if kept >= MOST * len(commits):
            value["legacy"] = rule
            return [
                f"legacy: {what}: {kept} of the {len(commits)} commits read keep it, where {len(broken)} break the "
                "presets; a history run judges the commits before the cutover by it"
            ]
    return []


def _cutover_reasons(git: Git, head: str, judged: int, broken: int, read: int) -> list[str]:
    """Why the cutover is where it is, with the honest count of what it puts out of judgement."""
    total = git.text("rev-list", "--count", "HEAD").strip()
    return [
        f"cutover: HEAD when init ran ({head[:12]}); it and its {int(total) - 1} ancestors are not judged by the "
        "presets",
        f"({broken} of the {judged} commits by people read break them; merges and bots not counted"
        + (f"; the newest {read} non-merge commits of {total} read)" if read == HISTORY else ")"),
    ]


def _shallow(git: Git, plan: Plan) -> None:
    """A shallow clone shows init only part of the history: say so before anything counted from it."""
    if git.is_shallow():
        total = git.text("rev-list", "--count", "HEAD").strip()
        plan.notes.append(
            f"note: the clone is shallow ({total} commits fetched): the counts below cover only those; "
            "`git fetch --unshallow` gives the whole history"
        )


# Merges: skipped when at least this share of the newest first-parent commits are merges that break the presets.
MERGE_BASED = 0.1


def _merge_policy(git: Git, presets: list[str], value: dict[str, object]) -> list[str]:
    """`merges: skip` for a history that merges through a forge's button (merge commits without the
    presets' trailers), as gitlint and the DCO app do; merges that carry them keep the contract."""
    from ..trailers.message import read_message

    out = git.text("log", "-z", "--first-parent", f"--max-count={HISTORY}", "--format=%P%x1f%aN <%aE>%x1f%B", "HEAD")
    records = [r.split("\x1f", 2) for r in out.split("\0") if r.strip()]
    merges = [(author, body) for parents, author, body in records if len(parents.split()) > 1]
    if not records or not merges:
        return []
    bare = 0
    for author, body in merges:
        keys = {t.key.lower(): t.value for t in read_message(body, "range").trailers}
        signed = _ident(author) in {_ident(v) for k, v in keys.items() if k == "signed-off-by"}
        ok = ("dco" not in presets or signed) and ("row" not in presets or "row" in keys)
        bare += not ok
    if bare < MERGE_BASED * len(records):
        return [
            f"merges: judged ({len(merges)} of the last {len(records)} first-parent commits are merges; "
            f"{bare} break the presets)"
        ]
    value["merges"] = "skip"
    return [
        f"merges: skip: {len(merges)} of the last {len(records)} first-parent commits are merges, {bare} without "
        "the presets' trailers",
        "(a forge's merge button writes none, and gitlint and the DCO app skip merges); the merged commits are judged",
    ]


# Known bots, as a commit's author (`Name <email>` after .mailmap): Dependabot, Renovate, github-actions and
# any GitHub App (`name[bot]`), whose sign-off, if any, names another address than the author's.
BOT_AUTHORS = (
    r"\[bot\] <",
    r"(?i)\[bot\]@users\.noreply\.github\.com>$",
    r"(?i)<bot@renovateapp\.com>$",
)


def _is_bot(author: str) -> bool:
    return any(re.search(p, author) for p in BOT_AUTHORS)


def _bot_policy(value: dict[str, object], seen: int) -> list[str]:
    value["exempt_authors"] = list(BOT_AUTHORS)
    return [
        "exempt_authors: commits by known bots (Dependabot, Renovate, github-actions, any *[bot]) are not "
        f"judged ({seen} in the history read); a config exemption, not .mailmap lines"
    ]


def _ident(contact: str) -> str:
    return " ".join(contact.split()).lower()


def _path_classes(paths: list[str], plan: Plan) -> None:
    """One class per top folder (budget the default's, unbudgeted for vendored or data folders), one for
    the top-level files, and one for rowgate's own config folder."""
    from ..config import DEFAULT_BUDGET

    folders = sorted({p.split("/", 1)[0] for p in paths if "/" in p} | {".agents"})
    classes: list[dict[str, object]] = []
    reasons = []
    names: set[str] = set()
    for folder in folders:
        name = CLASS_NAME.sub("-", folder.lower()).strip("-") or "root"
        while name in names:
            name += "-x"
        names.add(name)
        budget = None if folder.lower() in UNBUDGETED or folder == ".agents" else DEFAULT_BUDGET
        classes.append({"name": name, "paths": [f"{folder}/**"], "budget": budget})
        reasons.append(f"{folder}/: class {name}, " + (f"budget {budget} lines" if budget else "unbudgeted"))
    classes.append({"name": "top-level", "paths": ["*"], "budget": TOP_LEVEL_BUDGET})
    reasons.append(f"top-level files: class top-level, budget {TOP_LEVEL_BUDGET} lines")
    plan.sections.append(
        Section(
            "pr_size",
            {"classes": classes},
            [
                (
                    "path classes, one per top folder (the first class whose globs match a path "
                    "owns it); budgets in changed lines:"
                ),
                *reasons,
            ],
        )
    )
    plan.enabled["pr-size"] = f"{len(classes)} path classes"


def _gencode(root: Path, paths: list[str], plan: Plan) -> None:
    paths = [p for p in paths if not _TESTS.search(p)]  # a test's fixtures are not the repository's build
    cuda = [p for p in paths if p.endswith((".cu", ".cuh"))]
    tables = sorted(p for p in paths if p.endswith("/arch_features.yaml") or p == "arch_features.yaml")
    commands = [p for p in ("compile_commands.json", "build/compile_commands.json") if (root / p).is_file()]
    commands += sorted(p for p in paths if p.endswith("compile_commands.json") and p not in commands)
    if not cuda:
        plan.disabled["gencode"] = "no CUDA sources (*.cu) in the tree"
        return
    if not tables:
        from ..checks.gencode.cmake_table import find_cmake_table

        cmake = find_cmake_table(root, paths)
        if cmake is not None:
            plan.disabled["gencode"] = (
                f"{len(cuda)} CUDA sources and the CMake feature table {cmake[0]} ({', '.join(cmake[1])}); "
                "it names no sources: set gencode.table to it and map each source to its feature under "
                "gencode.sources, then enable the check"
            )
            return
        found = f"; found {commands[0]}" if commands else ""
        plan.disabled["gencode"] = (
            f"{len(cuda)} CUDA sources but no arch feature table (arch_features.yaml) "
            f"to compare their -gencode flags with{found}"
        )
        return
    value: dict[str, object] = {"table": tables[0]}
    reasons = [f"{len(cuda)} CUDA sources; the arch feature table {tables[0]}"]
    if commands:
        value["compile_commands"] = commands[0]
        reasons.append(f"audits the -gencode flags of {commands[0]}")
    else:
        reasons.append("audits the objects of a build (gencode.build_dir, or --build-dir)")
    plan.sections.append(Section("gencode", value, reasons))
    plan.enabled["gencode"] = reasons[-1]


# The layout detectors, one list: (check id, config section, function name in checkers.detect_layout).
DETECTORS: tuple[tuple[str, str, str], ...] = (
    ("env-doc", "env_doc", "env_doc"),
    ("gemv-invocation", "gemv", "gemv_invocation"),
    ("pr-size", "pr_size", "pr_size_pairs"),
)


def _layout(root: Path, plan: Plan, detectors: dict[str, Callable[[Path], Any]] | None = None) -> None:
    """env-doc, gemv-invocation and pr-size pairs from the layout detectors; a check with no detection is
    disabled, except env-doc where its default files are there."""
    if detectors is None:
        detectors = _load_detectors()
    for check, key, fn in DETECTORS:
        found = detectors[fn](root) if fn in detectors else None
        if found is not None:
            config, reasons = found.config, list(found.reasons)
            existing = plan.section(key)
            if existing is not None and isinstance(existing.value, dict):
                existing.value.update(config)
                existing.reasons += reasons
            else:
                plan.sections.append(Section(key, dict(config), reasons))
            plan.enabled.setdefault(check, reasons[0] if reasons else "detected")
        elif check == "env-doc":
            _env_doc_default(root, plan)
        elif check == "gemv-invocation":
            why = "no matmul/GEMV call sites found" if detectors else "the layout detector is not installed"
            plan.disabled[check] = why


def _env_doc_default(root: Path, plan: Plan) -> None:
    from ..config import EnvDocConfig

    cfg = EnvDocConfig.model_validate({})
    present = [p for p in (cfg.doc, cfg.allowlist) if (root / p).is_file()]
    if present:
        plan.enabled["env-doc"] = f"the defaults ({', '.join(present)})"
    else:
        plan.disabled["env-doc"] = f"no env var table or allowlist found ({cfg.doc}, {cfg.allowlist})"


def _load_detectors() -> dict[str, Callable[[Path], Any]]:
    try:
        from .. import detect_layout as layout  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return {}
    return {fn: getattr(layout, fn) for _, _, fn in DETECTORS if hasattr(layout, fn)}


def _dco(plan: Plan) -> bool:
    trailers = plan.section("trailers")
    value = trailers.value if trailers is not None else None
    return isinstance(value, dict) and "dco" in value.get("presets", [])


# --- output ---------------------------------------------------------------------------------------


def describe(plan: Plan) -> list[str]:
    """What init chose and why, as it prints it."""
    out = list(plan.notes)
    for s in plan.sections:
        out.append(f"{s.key}:")
        out += [f"  {line}" for line in s.reasons]
    out.append("checks:")
    for spec in registry.CHECKS:
        if spec.id in plan.disabled:
            out.append(f"  {spec.id:<16} disabled: {plan.disabled[spec.id]}")
        else:
            out.append(f"  {spec.id:<16} enabled: {plan.enabled.get(spec.id, 'its defaults')}")
    hooked = [spec.hook_id for spec in registry.CHECKS if spec.id in plan.disabled and not spec.records]
    if hooked:  # pre-commit shows a skipped hook's exit 0 as "Passed" and hides its line
        out.append(
            f"note: the hook of a disabled check passes without running (pre-commit prints Passed): "
            f"leave {', '.join(hooked)} out of .pre-commit-config.yaml"
        )
    return out


def render(plan: Plan, root: Path) -> str:
    """The config as commented YAML: each section with the reasons for it, then the disabled checks."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    from ..yamlio import dump_yaml

    doc = CommentedMap()
    doc["version"] = 1
    for s in plan.sections:
        # record sources nest maps in lists several levels deep: block style keeps them readable
        doc[s.key] = _flow(s.value, CommentedMap, CommentedSeq, top=True) if s.key != "sources" else s.value
        doc.yaml_set_comment_before_after_key(s.key, before="\n" + "\n".join(s.reasons))
    if plan.disabled:
        checks = CommentedMap()
        for spec in registry.CHECKS:
            if spec.id in plan.disabled:
                entry = CommentedMap(enabled=False)
                entry.fa.set_flow_style()
                checks[spec.id] = entry
                checks.yaml_add_eol_comment(plan.disabled[spec.id], spec.id, column=36)
        doc["checks"] = checks
        doc.yaml_set_comment_before_after_key(
            "checks", before="\nchecks with nothing to work on here (set enabled: true, or delete the line, to run one)"
        )
    head = (
        f"rowgate configuration for {root.name}, written by `rowgate init` on {date.today().isoformat()}.\n"
        "It says only what differs from the defaults; `rowgate config schema` lists every key.\n"
        "Rules are ignored by id or name: `ignore: [TR007]`, or per path: "
        '`per_file_ignores: {"tests/**": [PS001]}`.'
    )
    doc.yaml_set_start_comment(head)
    return dump_yaml(doc)


def _flow(value: object, cmap: type, cseq: type, top: bool = False) -> object:
    """Nested mappings in lists (path classes) in flow style, one per line."""
    if isinstance(value, dict):
        m = cmap()
        for k, v in value.items():
            m[k] = _flow(v, cmap, cseq)
        if not top:
            m.fa.set_flow_style()
        return m
    if isinstance(value, list):
        seq = cseq()
        seq.extend(_flow(v, cmap, cseq) for v in value)
        if all(isinstance(v, str) for v in value):
            seq.fa.set_flow_style()
        return seq
    return value


def _validate(text: str, target: Path) -> None:
    """What init writes must load: validate it as the checks will."""
    from ..config import parse_config

    try:
        parse_config(text.encode(), str(target))
    except RecordError as exc:  # a bug in init, not in the repository
        raise AssertionError("rowgate init produced an invalid config:\n" + "\n".join(exc.lines())) from None


def _write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)


def _rel(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
