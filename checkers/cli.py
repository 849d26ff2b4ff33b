"""The `rowgate` command line: check, preflight, rules, doctor, config, and the record commands.

`rowgate check ID` is what hooks run, often once per commit, so its path imports only the check and what
it uses: the other subcommands' modules load when their parser is built, and pydantic and ruamel.yaml
load only to validate the config (checkers.configcache serves a check the sections it declares).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path

from . import __version__, registry, sarif_anchors
from .configcache import load_sections
from .configsource import locate
from .context import Context
from .gitio import Git, GitError, discover, discover_repo
from .output import FORMATS, render
from .preflight import CONTROL_SECTIONS, check_parser, run_check, run_preflight
from .results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE, RecordError, exit_code

# The dependencies load lazily, so a missing one would surface only when the config cache misses: fail at
# once instead (scripts/_rowgate.py re-runs under the checkout's .venv on this ModuleNotFoundError).
for _dep in ("pydantic", "ruamel.yaml"):
    if importlib.util.find_spec(_dep) is None:
        raise ModuleNotFoundError(f"No module named {_dep!r}", name=_dep)

# Subcommands that live in their own modules: name -> module (relative to this package, which installs as
# `rowgate`) exposing add_parser(subparsers) and run(args).
EXTRA_COMMANDS: dict[str, str] = {
    "render": ".commands.render",
    "row": ".commands.row",
    "records": ".commands.records",
    "claim": ".commands.claim",
    "trailers": ".commands.trailers",
    "init": ".commands.init",
    "ci": ".commands.ci_base",
}

EXIT_OUTPUT_CLOSED = 141  # what a shell reports for a command that SIGPIPE ended

EPILOG = """exit codes: 0 pass, 1 fail, 2 usage, 3 could not verify; 141 when the output is closed early.
Run `rowgate check --help` for the checks and `rowgate rules` for every rule id."""


def main(argv: list[str] | None = None) -> int:
    """Run one command. No traceback reaches the user: a failure is exit 2 (usage) or 3 (could not verify)
    with one line saying what and where; `--debug` (anywhere on the line) or $ROWGATE_DEBUG=1 shows it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:
        argv.remove("--debug")
        os.environ["ROWGATE_DEBUG"] = "1"
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # also after --help's SystemExit: a reader that went away fails here, not at exit
    except BrokenPipeError:
        return _output_closed()
    except KeyboardInterrupt:
        print("rowgate: interrupted", file=sys.stderr)
        return 130
    except (GitError, RecordError) as exc:
        if os.environ.get("ROWGATE_DEBUG"):
            raise
        return _setup_error(exc)
    except Exception as exc:
        if os.environ.get("ROWGATE_DEBUG"):
            raise
        print(f"rowgate: {describe_crash(exc)} (run again with --debug for the traceback)", file=sys.stderr)
        return EXIT_ERROR


def _output_closed() -> int:
    """The reader of the output went away (`rowgate rules | head`): stop quietly, as a Unix tool that
    SIGPIPE ends, with its status (128 + 13). Nothing more is written: what is still buffered goes to
    /dev/null, so the interpreter's own flush at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    os.close(devnull)
    return EXIT_OUTPUT_CLOSED


def describe_crash(exc: BaseException) -> str:
    """`internal error: Type: message at file:line` (the innermost frame), on one line."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    text = " ".join(str(exc).split())
    return f"internal error: {type(exc).__name__}: {text}{where}"


def _main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        return cmd_check(argv[1:])  # its own parser: the full one imports every subcommand's module
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    code: int = args.func(args)
    return code


def run_script(check_id: str) -> int:
    """Entry point of the conventional `scripts/<name>.py` wrappers."""
    return main(["check", check_id, *sys.argv[1:]])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rowgate",
        epilog=EPILOG,
        description="Gates for a roadmap-row workflow: rows, trailers, budgets, "
        "records, and the engine's build and call sites.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rowgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("check", help="run one check (rowgate check ID --help for its options)", add_help=False)
    p.add_argument("id", nargs="?")

    p = sub.add_parser("preflight", help="run every gate in order, one line each, and one verdict")
    _common(p)
    p.add_argument("--base", metavar="REF", help="base for the range checks (see `rowgate check ID --help`)")
    p.add_argument("--only", metavar="ID", action="append", help="run only this check (repeatable)")
    p.add_argument("--fail-on-skip", action="store_true", help="a skipped gate fails the run (for CI)")
    p.add_argument(
        "--baseline",
        nargs="?",
        const="",
        metavar="REF",
        help="also run every gate on the merge base with REF (default: the resolved base) and report each "
        "finding as new, inherited or fixed; only new failures fail the run",
    )
    p.add_argument("--fail-on-inherited", action="store_true", help="with --baseline: inherited failures count too")
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("rules", help="list every rule id and name, or explain one")
    p.add_argument("rule", nargs="?", help="a rule id (TR001) or name (trailer-missing-row)")
    p.set_defaults(func=cmd_rules)

    p = sub.add_parser("doctor", help="report git, history depth, which config was read, optional tools")
    p.add_argument("--repo", type=Path, help="repository to inspect (default: the one containing the cwd)")
    _config_arg(p)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("config", help="validate the config or print its JSON Schema")
    p.add_argument("action", choices=("check", "schema"))
    p.add_argument("--ledger", action="store_true", help="with schema: print the ledger record schema (2) instead")
    p.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    _config_arg(p)
    p.set_defaults(func=cmd_config)

    for name, module in EXTRA_COMMANDS.items():
        importlib.import_module(module, __package__).add_parser(sub, name)
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    p.add_argument("--repo", type=Path, help="repository to check (default: the one containing the cwd)")
    _config_arg(p)


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="the config file (default: $ROWGATE_CONFIG, "
        ".agents/config.yaml, then [tool.rowgate] in pyproject.toml; none: every check's defaults)",
    )


def load_context(repo: Path | None, sections: tuple[str, ...] | None = None, config: Path | None = None) -> Context:
    """Discover the repository and load its config (`--config`, `$ROWGATE_CONFIG`, `.agents/config.yaml`,
    `[tool.rowgate]` in pyproject.toml, else the defaults), or only the `sections` one check reads (from
    the validated-config cache); raises GitError or RecordError."""
    root, git_dir = discover_repo(repo or Path.cwd(), explicit=repo is not None)
    source = locate(root, config)
    if sections is not None:
        view = load_sections(root, git_dir, (*sections, *CONTROL_SECTIONS), source)
        return Context(root=root, config=view, source=source)
    from .config import parse_source

    return Context(root=root, config=parse_source(source, git_dir), source=source)


def _usage_error(message: str) -> int:
    print(f"rowgate: {message}", file=sys.stderr)
    return EXIT_USAGE


def _setup_error(exc: Exception) -> int:
    """A repository or config that cannot be read: exit 3 (could not verify), naming file and line."""
    if isinstance(exc, RecordError):
        for line in exc.lines():
            print(f"rowgate: {line}", file=sys.stderr)
    else:
        print(f"rowgate: {exc}", file=sys.stderr)
        hint = getattr(exc, "hint", None)
        if hint:
            print(f"    fix: {hint}", file=sys.stderr)
    return EXIT_ERROR


def cmd_check(rest: list[str]) -> int:
    known = ", ".join(c.id for c in registry.CHECKS)
    if not rest or rest[0] in ("-h", "--help"):
        print("usage: rowgate check ID [options]\n\nchecks, in preflight order:")
        for c in registry.CHECKS:
            print(f"  {c.id:<18} {c.summary}")
        return EXIT_PASS if rest else EXIT_USAGE
    spec = registry.get(rest[0])
    if spec is None:
        return _usage_error(f"unknown check {rest[0]!r}; known checks: {known}")
    module = spec.load()
    cparser = check_parser(spec)
    _common(cparser)
    try:
        args = cparser.parse_args(rest[1:])
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_PASS
    try:
        ctx = load_context(args.repo, getattr(module, "CONFIG_SECTIONS", None), args.config)
    except (GitError, RecordError) as exc:
        return _setup_error(exc)
    ctx.git.freeze_refs()  # a check only reads refs: each ref and merge base it resolves twice, git answers once
    result = run_check(spec, ctx, args)
    sys.stdout.write(
        render(args.format, [result], list(module.RULES), anchors=sarif_anchors.for_results(ctx, args.format, [result]))
    )
    return result.exit_code


def cmd_preflight(args: argparse.Namespace) -> int:
    unknown = [i for i in args.only or [] if registry.get(i) is None]
    if unknown:
        return _usage_error(f"unknown check {unknown[0]!r}; known checks: {', '.join(c.id for c in registry.CHECKS)}")
    try:
        ctx = load_context(args.repo, config=args.config)
    except (GitError, RecordError) as exc:
        return _setup_error(exc)
    if args.fail_on_inherited and args.baseline is None:
        return _usage_error("--fail-on-inherited needs --baseline")
    if args.baseline is not None:
        from .commands.baseline import run_baseline_command

        return run_baseline_command(ctx, args)
    not_run: list[tuple[str, str]] = []
    ctx.git.freeze_refs()  # the gates only read: each asks for the same refs and merge bases, git answers once
    results = run_preflight(ctx, args.only, args.base, not_run)
    sys.stdout.write(
        render(
            args.format,
            results,
            registry.all_rules(),
            args.fail_on_skip,
            preflight=True,
            not_run=not_run,
            anchors=sarif_anchors.for_results(ctx, args.format, results),
        )
    )
    if not results:
        return EXIT_ERROR
    return exit_code(results, args.fail_on_skip)


def cmd_rules(args: argparse.Namespace) -> int:
    if args.rule:
        found = registry.find_rule(args.rule)
        if not found:
            return _usage_error(f"unknown rule {args.rule!r}; `rowgate rules` lists them")
        spec, rule = found
        print(f"{rule.id} {rule.name} ({spec.id}): {rule.summary}")
        return EXIT_PASS
    for spec in registry.CHECKS:
        for rule in spec.load().RULES:
            print(f"{rule.id:<7} {rule.name:<32} {spec.id}: {rule.summary}")
    return EXIT_PASS


def cmd_config(args: argparse.Namespace) -> int:
    import json

    from .config import json_schema

    if args.action == "schema" and args.ledger:
        from .ledger_schema import json_schema as ledger_schema

        print(json.dumps(ledger_schema(), indent=2))
        return EXIT_PASS
    if args.action == "schema":
        print(json.dumps(json_schema(), indent=2))
        return EXIT_PASS
    try:
        ctx = load_context(args.repo, config=args.config)
    except (GitError, RecordError) as exc:
        return _setup_error(exc)
    source = ctx.source
    if source is None or source.path is None:
        print(f"OK: no config file: {source.describe() if source else 'the defaults'}")
    else:
        print(f"OK: {source.describe()} is valid")
    return EXIT_PASS


def cmd_doctor(args: argparse.Namespace) -> int:
    import shutil
    import subprocess

    from .config import parse_source
    from .gitio import git_env

    problems = 0
    try:
        ver = subprocess.run(
            ["git", "--version"], capture_output=True, text=True, env=git_env(), timeout=30, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        ver = ""
    print(f"git:        {ver or 'not found: install git 2.30 or newer'}")
    try:
        root = discover(args.repo or Path.cwd(), explicit=args.repo is not None)
    except GitError as exc:
        print(f"repo:       {exc}")
        return EXIT_ERROR
    git = Git(root)
    print(f"repo:       {root}")
    print(f"head:       {_describe_head(git)}")
    shallow = git.is_shallow()
    problems += shallow
    print(f"history:    {'SHALLOW: range checks cannot verify; run git fetch --unshallow' if shallow else 'complete'}")
    try:
        source = locate(root, args.config)
        parse_source(source)
        print(f"{'config:':<12}{source.describe()}" + (": valid" if source.path else ""))
    except RecordError as exc:
        problems += 1
        print(f"{'config:':<12}" + ("\n" + " " * 12).join(exc.lines()))
    upstream = git.default_upstream()
    print(f"upstream:   {upstream or 'none detected (range checks need --base or $ROWGATE_BASE)'}")
    for tool in ("nvcc", "cuobjdump", "pre-commit"):
        found = shutil.which(tool) or shutil.which(tool, path=str(Path(sys.executable).parent))
        print(f"{tool + ':':<12}{found or 'not found (optional)'}")
    has_torch = importlib.util.find_spec("torch") is not None
    print(f"torch:      {'importable' if has_torch else 'not installed (only the engine needs it)'}")
    print(f"python:     {sys.version.split()[0]} ({sys.executable})")
    return EXIT_FAIL if problems else EXIT_PASS


def _describe_head(git: Git) -> str:
    """Branch, commit and dirtiness for a human report, from plain git calls (with the parsing overrides
    of checkers.gitio: no fsmonitor program, no hooks, no user config)."""
    head = git.resolve("HEAD")
    if head is None:
        return "no commits yet"
    branch = git.current_branch()
    where = f"branch {branch}" if branch else "detached HEAD"
    # diff-index, not status: it compares by the index's file times and hashes nothing, so no clean filter
    # (nor any other program) runs; a file only touched counts as changed.
    status = git.run(
        "diff-index", "--name-only", "-z", "--no-ext-diff", "--no-textconv", "--ignore-submodules", "HEAD", "--"
    ).stdout
    dirty = ", uncommitted changes" if status else ""
    refs = git.refs("refs/remotes/")
    remotes = (
        ", ".join(f"{r} ({sum(name.startswith(f'refs/remotes/{r}/') for name in refs)} refs)" for r in git.remotes())
        or "no remotes"
    )
    return f"{head[:12]} on {where}{dirty}; {remotes}"


if __name__ == "__main__":
    sys.exit(main())
