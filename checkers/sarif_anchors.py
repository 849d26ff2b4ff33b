"""Where each check is configured: the config file and the line of its section, for SARIF locations.

A commit-level finding has no file of its own; code scanning accepts only results that point at a file
in the repository, so such a finding points at the config line of the rule it broke (and names its
commit in a logical location). Found by a line scan of the file, without parsing it again. Where no
config file exists, it points at the first file the commit changes that is still in the work tree, else
at the first tracked file (`commit_paths`): always something that exists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from .configsource import CONFIG_PATH, ConfigSource
from .gitio import Git

if TYPE_CHECKING:
    from .context import Context
    from .results import Result

# check id -> (its config section, the key in it that states the rule, if one does)
SECTIONS: dict[str, tuple[str, str | None]] = {
    "agent-record": ("rows", None),
    "live-rows": ("live_rows", None),
    "doc-checkpoint": ("docs", None),
    "env-doc": ("env_doc", None),
    "gemv-invocation": ("gemv", None),
    "role-discipline": ("role", None),
    "commit-trailers": ("trailers", "presets"),
    "pr-size": ("pr_size", "classes"),
    "gencode": ("gencode", None),
}


def config_anchors(source: ConfigSource | None) -> dict[str, tuple[str, int | None]]:
    """Per check id: (config path, 1-based line of its section or None). With no config file, the path
    `rowgate init` writes, without a line."""
    if source is None or source.path is None:
        return {check: (CONFIG_PATH, None) for check in SECTIONS}
    lines = source.raw.decode("utf-8", errors="replace").splitlines()
    anchors = {}
    for check, (section, key) in SECTIONS.items():
        line = _toml_line(lines, section, key) if source.kind == "pyproject" else _yaml_line(lines, section, key)
        if line is None:
            line = _yaml_line(lines, "checks", None) if source.kind != "pyproject" else None
        anchors[check] = (source.display, line)
    return anchors


def _yaml_line(lines: list[str], section: str, key: str | None) -> int | None:
    top = re.compile(rf"^{re.escape(section)}\s*:")
    for i, text in enumerate(lines):
        if top.match(text):
            if key:
                inner = re.compile(rf"^\s+{re.escape(key)}\s*:")
                for j in range(i + 1, len(lines)):
                    if lines[j] and not lines[j][0].isspace() and not lines[j].startswith("#"):
                        break
                    if inner.match(lines[j]):
                        return j + 1
            return i + 1
    return None


def _toml_line(lines: list[str], section: str, key: str | None) -> int | None:
    header = re.compile(rf"^\s*\[\s*tool\.rowgate\.{re.escape(section)}\s*[\].]")
    dotted = re.compile(rf"^\s*{re.escape(section)}\s*[.=]")
    for i, text in enumerate(lines):
        if header.match(text) or dotted.match(text):
            return i + 1
    return None


def commit_paths(git: Git, root: Path, shas: list[str]) -> dict[str, str]:
    """Per commit: the first file it changes that exists in the work tree, else the first tracked file
    (one `git log --no-walk` for all of them). A sha that names no path (an empty repository) is left out."""
    if not shas:
        return {}
    out = git.text("log", "--no-walk=unsorted", "-z", "--format=%x01%H", "--name-only", "--no-renames", *shas)
    found: dict[str, str] = {}
    sha = None
    for part in out.split("\0"):
        part = part.strip("\n")
        if part.startswith("\x01"):
            sha, _, part = part[1:].partition("\n")
        if sha and part and sha not in found and (root / part).is_file():
            found[sha] = part
    missing = [s for s in shas if s not in found]
    if missing:
        tracked = next((p for p in git.ls_files() if (root / p).is_file()), None)
        if tracked is not None:
            found.update(dict.fromkeys(missing, tracked))
    return found


def for_results(ctx: Context, fmt: str, results: list[Result]) -> dict[str, tuple[str, int | None]] | None:
    """For SARIF: per check, the config file and line that configure it, where that file exists; else, per
    commit a finding is about, a file that commit changes (keyed by the sha)."""
    if fmt != "sarif":
        return None
    anchors = {k: v for k, v in config_anchors(ctx.source).items() if (ctx.root / v[0]).is_file()}
    shas = list(
        dict.fromkeys(
            f.commit for r in results for f in r.findings if f.commit and not f.path and r.check not in anchors
        )
    )
    anchors.update({sha: (path, None) for sha, path in commit_paths(ctx.git, ctx.root, shas).items()})
    return anchors
