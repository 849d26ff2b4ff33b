"""Where each check is configured: the config file and the line of its section, for SARIF locations.

A commit-level finding has no file of its own; code scanning accepts only results that point at a file
in the repository, so such a finding points at the config line of the rule it broke (and names its
commit in a logical location). Found by a line scan of the file, without parsing it again.
"""

from __future__ import annotations

import re

from .configsource import CONFIG_PATH, ConfigSource

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
