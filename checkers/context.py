"""What a check runs against: the repository root, the config, git, the records, and the one range resolver.
Precedence for every setting is written once here: defaults, then `.agents/config.yaml`, then the
environment, then command-line flags."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

from .files import select
from .gitio import EMPTY_TREE, Commit, Git, GitError, ignore_message

if TYPE_CHECKING:
    from .config import Config
    from .configsource import ConfigSource
    from .records import Records

ZERO_SHA = "0" * 40  # what git hands a pre-push hook for a ref the remote does not have
T = TypeVar("T")


class Range:
    """A resolved range: the base as named (`ref`) and where that name came from (`source`), the base and
    head commits, and the merge base the range starts at. The merge base is asked of git once, when first
    needed; `commits()` finds it in the same `git log` that reads the range (Git.range_commits)."""

    __slots__ = ("_git", "_merge_base", "_notes", "base", "head", "ref", "source")

    def __init__(self, ref: str, source: str, base: str, head: str, git: Git, notes: TextIO | None = None):
        self.ref, self.source, self.base, self.head = ref, source, base, head
        self._git = git
        self._notes = notes  # where the range is printed once, when its merge base is known
        self._merge_base: str | None = None

    @property
    def merge_base(self) -> str:
        if self._merge_base is None and self.base == EMPTY_TREE:
            self._found(EMPTY_TREE)  # from the root: every commit of head
        if self._merge_base is None:
            self._found(self._git.merge_base(self.base, self.head))
        assert self._merge_base is not None
        return self._merge_base

    @property
    def spec(self) -> str:
        """`merge_base..head`, for the git reads that take a revision range (`head` from the root)."""
        return self.head if self.merge_base == EMPTY_TREE else f"{self.merge_base}..{self.head}"

    def commits(self, mailmap: bool = False, parents: bool = True, authors: bool = True) -> list[Commit]:
        """The commits of merge_base..head, oldest first, from one `git log` that usually also finds the
        merge base."""
        return self.read(ignore_message, mailmap, parents, authors)[0]

    def read(
        self, read: Callable[[str], T], mailmap: bool = False, parents: bool = True, authors: bool = True
    ) -> tuple[list[Commit], list[T]]:
        """commits(), and `read` of each commit's message, called while git still writes the log."""
        start = self.base if self._merge_base is None else self._merge_base
        merge_base, commits, out = self._git.range_read(
            start, self.head, read, mailmap=mailmap, parents=parents, authors=authors
        )
        if self._merge_base is None:
            self._found(merge_base)
        return commits, out

    def describe(self) -> str:
        if self.base == EMPTY_TREE:
            return f"base none ({self.source}): every commit of head {self.head[:12]}, from the root"
        return (
            f"base {self.ref} ({self.source}) = {self.base[:12]}; merge base {self.merge_base[:12]}; "
            f"head {self.head[:12]}"
        )

    def _found(self, merge_base: str) -> None:
        # a shallow or grafted cut inside the range would let a check judge part of it: an error instead
        self._git.require_complete_history(f"{merge_base}..{self.head}")
        self._merge_base = merge_base
        if self._notes is not None:
            print(f"rowgate: {self.describe()}", file=self._notes)


class Context:
    """A plain class, not a dataclass: `rowgate check` starts without importing `dataclasses`."""

    def __init__(
        self,
        root: Path,
        config: Config,
        env: Mapping[str, str] | None = None,
        notes: TextIO | None = None,
        source: ConfigSource | None = None,
    ):
        self.root = root
        self.config = config  # or, for a check that declares CONFIG_SECTIONS, only those (checkers.configcache)
        self.source = source  # which config file was read (None: built in code, as tests do)
        self.env: Mapping[str, str] = dict(os.environ) if env is None else env
        self.notes: TextIO = sys.stderr if notes is None else notes  # where resolved settings are printed, once
        self._git: Git | None = None
        self._records: Records | None = None
        self._tracked: list[str] | None = None
        self._ranges: dict[tuple[str | None, str | None, str | None, str | None, str], Range] = {}

    @property
    def git(self) -> Git:
        if self._git is None:
            self._git = Git(self.root)
        return self._git

    @property
    def records(self) -> Records:
        if self._records is None:
            from .config import Config
            from .records import load_records  # pydantic models: only for the checks that read records

            # a check given only some config sections (configcache) reads records from the default places
            self._records = load_records(self.root, self.config if isinstance(self.config, Config) else None)
        return self._records

    def files(self, include: Sequence[str] = ("**",), exclude: Sequence[str] = ()) -> list[str]:
        """The repository's files, as every check lists them: the tracked paths (one `git ls-files` per
        run) that match an `include` glob and no `exclude` glob (root-anchored; `**` spans folders)."""
        if self._tracked is None:
            self._tracked = self.git.ls_files()
        return select(self._tracked, include, exclude)

    def range(
        self,
        base: str | None = None,
        head: str | None = None,
        *,
        since: str | None = None,
        since_source: str | None = None,
        flag: str = "--base",
    ) -> Range:
        """The range a check judges: resolved once per arguments, printed once with where its base came from.

        The base is the first of:
          1. `base`, the command line's (`flag` names it: --base, or --range's left side);
          2. the environment variable `base.env` names ($ROWGATE_BASE);
          3. in a pre-push hook, the branch being pushed, judged whole: its merge base with the default
             branch of the remote pushed to (PRE_COMMIT_REMOTE_NAME, else base.remote, else the upstream);
             a remote without one (empty, or never fetched) judges the commits it lacks, from the root when
             it has none of them; else PRE_COMMIT_FROM_REF (the remote's old tip);
          4. `since`, the start of a check that judges its history since a commit (the config cutover,
             docs.since; `since_source` names it), unless this is a pre-push hook: a push is judged
             against the base like every other range check, so all of them judge the same commits;
          5. `base.ref` in the config;
          6. the detected upstream (`upstream` before `origin`, so a fork's own main is never the base);
          7. in a repository with no remote at all, nothing is published yet: every commit of head.
        The head is `head` (--head), else PRE_COMMIT_TO_REF, else the pushed PRE_COMMIT_LOCAL_BRANCH, else
        HEAD. The range starts at the merge base of base and head.

        Outside a push, a check that passes `since_source` has no range when none of 1-4 applies: NoRange."""
        key = (base, head, since, since_source, flag)
        if key not in self._ranges:
            head_ref = (
                head or self._hook_env("PRE_COMMIT_TO_REF") or self._hook_env("PRE_COMMIT_LOCAL_BRANCH") or "HEAD"
            )
            head_sha = self.git.must_resolve(head_ref, "head")
            ref, source = self._base(base, since, since_source, flag, head_sha)
            base_sha = (
                EMPTY_TREE
                if ref == EMPTY_TREE
                else self.git.must_resolve(ref, "base" if source != since_source else f"range start ({source})")
            )
            self._ranges[key] = Range(ref, source, base_sha, head_sha, self.git, self.notes)
        return self._ranges[key]

    @property
    def pushing(self) -> bool:
        """In a pre-push hook run by pre-commit (which names the pushed refs in the environment)."""
        return any(self._hook_env(k) for k in ("PRE_COMMIT_TO_REF", "PRE_COMMIT_REMOTE_BRANCH"))

    def _base(
        self, base: str | None, since: str | None, since_source: str | None, flag: str, head: str
    ) -> tuple[str, str]:
        for ref, source in self._base_candidates(base, since, since_source, flag, head):
            if ref:
                return ref, source
        if since_source is not None and not self.pushing:
            raise NoRange(
                f"no range: the config has no cutover and no {flag} was given",
                hint="set cutover: in .agents/config.yaml or pass --base REF",
            )
        cfg = self.config.base
        raise GitError(
            "no base given and no upstream detected",
            hint=f"pass --base REF, set ${cfg.env}, or set base.ref in .agents/config.yaml",
        )

    def _base_candidates(
        self, base: str | None, since: str | None, since_source: str | None, flag: str, head: str
    ) -> Iterator[tuple[str | None, str]]:
        """The base sources in precedence order (Context.range), each looked up only when reached."""
        cfg = self.config.base
        yield base, flag
        yield self.env.get(cfg.env), f"${cfg.env}"
        if self.pushing:
            yield self._pushed_branch_base(head)
        yield self._hook_env("PRE_COMMIT_FROM_REF"), "pre-push PRE_COMMIT_FROM_REF"
        if since_source is not None and not self.pushing:
            yield since, since_source
            return  # outside a push, a check that judges its history since a start has no other base
        yield cfg.ref, "config base.ref"
        yield self.git.default_upstream(cfg.remote), "detected upstream"
        if not self.git.remotes():
            yield EMPTY_TREE, "no remote: no commit is published yet"

    def _pushed_branch_base(self, head: str) -> tuple[str | None, str]:
        """Where the branch being pushed starts: the remote's default branch, else the commits the remote
        lacks (EMPTY_TREE: it has none of them, as a first push to an empty remote)."""
        remote = self.env.get("PRE_COMMIT_REMOTE_NAME") or self.config.base.remote
        default = self.git.default_upstream(remote)
        if default:
            return default, f"pre-push: the default branch of {remote or 'the upstream'}"
        if remote and remote in self.git.remotes():
            start = self.git.unpushed_base(head, remote)
            if start is not None:
                what = (
                    "the remote has none of its history; for a new fork or mirror that already holds it, "
                    f"`git fetch {remote}` first (or set ${self.config.base.env}) so only new commits are judged"
                    if start == EMPTY_TREE
                    else "the commits it lacks"
                )
                return start, f"pre-push to {remote}: {what}"
        return None, "pre-push"

    def _hook_env(self, name: str) -> str | None:
        ref = self.env.get(name)
        return ref if ref and ref != ZERO_SHA else None

    def rel(self, path: Path) -> str:
        return path.resolve().relative_to(self.root.resolve()).as_posix()


class NoRange(GitError):
    """A check that judges its history since a start has neither a start nor a base."""


def add_range_arguments(parser: argparse.ArgumentParser) -> None:
    """The shared --base/--head pair of every range check."""
    parser.add_argument(
        "--base",
        metavar="REF",
        help="base of the range (default: $ROWGATE_BASE, "
        "config base.ref, then the detected upstream); the range starts at the merge base",
    )
    parser.add_argument("--head", metavar="REF", help="head of the range (default: HEAD)")
