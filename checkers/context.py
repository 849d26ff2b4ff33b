"""What a check runs against: the repository root, the config, git, the records, the resolved base.
Precedence for every setting is written once here: defaults, then `.agents/config.yaml`, then the
environment, then command-line flags."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, TextIO

from checkers.gitio import BaseRange, Git, resolve_base

if TYPE_CHECKING:
    from checkers.config import Config
    from checkers.records import Records

_ZERO_SHA = "0" * 40


class Context:
    """A plain class, not a dataclass: `rowgate check` starts without importing `dataclasses`."""

    def __init__(self, root: Path, config: Config, env: Mapping[str, str] | None = None,
                 notes: TextIO | None = None):
        self.root = root
        self.config = config  # or, for a check that declares CONFIG_SECTIONS, only those (checkers.configcache)
        self.env: Mapping[str, str] = dict(os.environ) if env is None else env
        self.notes: TextIO = sys.stderr if notes is None else notes  # where resolved settings are printed, once
        self._git: Git | None = None
        self._records: Records | None = None
        self._bases: dict[tuple[str | None, str | None], BaseRange] = {}

    @property
    def git(self) -> Git:
        if self._git is None:
            self._git = Git(self.root)
        return self._git

    @property
    def records(self) -> Records:
        if self._records is None:
            from checkers.records import load_records  # pydantic models: only for the checks that read records

            self._records = load_records(self.root)
        return self._records

    def base_range(self, base: str | None = None, head: str | None = None) -> BaseRange:
        """Resolve the range once per (base, head) and print where it came from.

        Precedence: --base flag; $ROWGATE_BASE (or config base.env); pre-commit's
        PRE_COMMIT_FROM_REF in a pre-push hook; config base.ref; the detected upstream."""
        key = (base, head)
        if key not in self._bases:
            cfg = self.config.base
            head = head or self._precommit_ref("PRE_COMMIT_TO_REF") or "HEAD"
            env = dict(self.env)
            if not base and not env.get(cfg.env):
                from_ref = self._precommit_ref("PRE_COMMIT_FROM_REF")
                if from_ref:
                    base = from_ref
            rng = resolve_base(self.git, base, env, cfg.ref, env_var=cfg.env, remote=cfg.remote, head=head)
            print(f"rowgate: {rng.describe()}", file=self.notes)
            self._bases[key] = rng
        return self._bases[key]

    def _precommit_ref(self, name: str) -> str | None:
        ref = self.env.get(name)
        return ref if ref and ref != _ZERO_SHA else None

    def rel(self, path: Path) -> str:
        return path.resolve().relative_to(self.root.resolve()).as_posix()


def add_range_arguments(parser: argparse.ArgumentParser) -> None:
    """The shared --base/--head pair of every range check."""
    parser.add_argument("--base", metavar="REF", help="base of the range (default: $ROWGATE_BASE, "
                        "config base.ref, then the detected upstream); the range starts at the merge base")
    parser.add_argument("--head", metavar="REF", help="head of the range (default: HEAD)")
