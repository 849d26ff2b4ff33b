"""Paths of the repository as the checks see them: root-anchored globs, and the one way a check lists files
(Context.files: the tracked paths, from one `git ls-files` per run, filtered here)."""

from __future__ import annotations

from collections.abc import Sequence

from . import globmatch

PLACEHOLDER = globmatch.PLACEHOLDER


def select(paths: Sequence[str], include: Sequence[str], exclude: Sequence[str] = ()) -> list[str]:
    """The paths (in their order) that match an `include` glob and no `exclude` glob, each in time linear
    in the path (checkers.globmatch: no backtracking, whatever the configured glob)."""
    return globmatch.select(paths, include, exclude)
