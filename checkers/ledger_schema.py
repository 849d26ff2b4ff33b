"""Ledger record schema 2: a record that proves where its numbers came from.

A schema-1 record (legacy) names a command, a device and, at best, a sha with `-dirty` appended. Schema 2
adds what a reader needs to trust or re-run a number: the full commit and whether the tree was clean (the
diff's hash and paths when not), every resolved `VT_*` flag (defaults included), device, driver and library
versions, the figures with units, and, for a numerics or token gate, whether its comparator was shown able to
fail in the same run. Per-case arrays go in a side file outside the repository, which the record names by its
sha256 (`details`); the record stays under `SIZE_CAP` bytes (`rowgate check agent-record`, AR009). A record that
was made smaller after it was written says what was dropped and the original's size and hashes (`trimmed`).

The engine writes these records without importing this module (it must not import the toolkit); its tests
validate what it writes against `LedgerRecord2`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SIZE_CAP = 8192  # bytes of one record file (record.ledger_size_cap); per-case arrays go in its `details` file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Diff(_Strict):
    """What made a tree dirty: enough to tell two dirty runs apart and to see what was edited."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of `git diff HEAD --binary`")
    paths: list[str] = Field(min_length=1, description="the tracked paths that differ from the commit")


class Device(_Strict):
    name: str = Field(min_length=1, description="e.g. NVIDIA H200, or cpu")
    driver: str | None = Field(None, description="the GPU driver version; null on the CPU")
    cuda: str | None = Field(None, description="the CUDA runtime torch was built with; null on the CPU")


class Figure(_Strict):
    """One number the record stands behind, as a document may cite it."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.:/=-]*$", description="stable id, e.g. tok_per_s.256")
    value: float
    unit: str = Field(min_length=1, description="e.g. tok/s, ms, x (a ratio), % , count")


class SelfTest(_Strict):
    """The comparator self-test: corruption seeded into known outputs, and how many the comparator caught.
    A comparison that never failed on a seeded error has not shown it can fail."""

    seeded: int = Field(ge=1, description="corruptions seeded in this run")
    caught: int = Field(ge=0, description="of them, the ones the comparison reported")


class Details(_Strict):
    """The side file that holds a record's per-case arrays, kept outside the repository: the sha256 names it
    wherever it is kept (a CI artifact, a device run's output folder)."""

    path: str = Field(min_length=1, description="where the writer put it (informative; not a repository path)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the side file's bytes")
    bytes: int = Field(ge=0)


class Dropped(_Strict):
    """One per-case array a trim took out of a record."""

    path: str = Field(min_length=1, description="where the array was, e.g. results.cases")
    entries: int = Field(ge=0, description="how many entries it had")
    kept: int = Field(ge=0, description="of them, the ones left in the record (those a document cites)")
    counts: dict[str, dict[str, int]] | None = Field(
        None, description="entries per arm and verdict, where the entries name them"
    )


class Trimmed(_Strict):
    """A record made smaller after it was written: what went, and how to get the original back
    (`git cat-file -p <git_blob>` in any clone whose history holds it)."""

    bytes: int = Field(ge=0, description="the original file's size")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the original file's bytes")
    git_blob: str = Field(pattern=r"^[0-9a-f]{40}$", description="the original's git blob id")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$", description="a commit whose tree holds the original")
    by: str = Field(min_length=1, description="the program that trimmed it")
    dropped: list[Dropped] = Field(description="the arrays taken out; empty where re-indenting alone made it fit")


class LegacyDirty(_Strict):
    """What a legacy record's dirty tree (`sha` ending in `-dirty`) may have held, written after the fact by
    scripts/ledger-dirty.py: the diff itself was not kept, so the record names the range git can show, from the
    commit measured to the first commit holding the record, the code paths that differ in it (`git diff
    --name-only <range> -- engine lab ci scripts/bench`), that diff's sha256 (the most the run's edits can have
    been) and the commits that make it. Flags: those the command sets, the rest at the measured commit's defaults."""

    range: str = Field(pattern=r"^[0-9a-f]{40}\.\.[0-9a-f]{40}$", description="<measured commit>..<commit adding it>")
    code_paths: list[str] = Field(description="engine/, lab/, ci/ and scripts/bench paths that differ in the range")
    other_paths: int = Field(ge=0, description="how many other paths differ in the range (docs, records, tests)")
    diff_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="sha256 of `git diff --binary <range> -- <code_paths>`"
    )
    commits: list[str] = Field(description="`<short sha> <subject>` of the range's commits that touch the code")
    note: str = Field(min_length=1, description="what is known of the run's tree beyond the range")


class LedgerRecord2(_Strict):
    schema_: Literal[2] = Field(alias="schema")
    date: dt.date
    kind: Literal["gate", "bench", "flip", "note"]
    rows: list[str] = Field(min_length=1)
    command: str = Field(min_length=1, description="the exact command line that reproduces the record")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$", description="the full sha of HEAD when the run started")
    clean: bool = Field(description="the tracked files equal the commit's")
    dirty_allowed: bool = Field(False, description="written from a dirty tree by an explicit switch")
    diff: Diff | None = Field(None, description="required when clean is false")
    flags: dict[str, bool | str] = Field(description="every declared VT_* flag as the run resolved it")
    device: Device
    versions: dict[str, str] = Field(description="python, torch and the other libraries that shaped the run")
    summary: str = Field(min_length=1)
    figures: list[Figure] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list, description="files the record measured, beyond its rows' anchors")
    comparator_selftest: SelfTest | None = None
    details: Details | None = Field(None, description="the side file of the per-case arrays, if any")
    trimmed: Trimmed | None = None
    results: Any = None

    @model_validator(mode="after")
    def _provenance(self) -> LedgerRecord2:
        if not self.clean and self.diff is None:
            raise ValueError("a record from a dirty tree (clean: false) needs `diff` (its sha256 and paths)")
        if not self.clean and not self.dirty_allowed:
            raise ValueError("a record from a dirty tree needs dirty_allowed: true (the writer's explicit switch)")
        if self.clean and self.diff is not None:
            raise ValueError("a clean record has no diff")
        names = [f.name for f in self.figures]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"figure {dupes[0]!r} appears twice")
        return self


def json_schema() -> dict[str, Any]:
    schema = LedgerRecord2.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rowgate ledger record, schema 2 (.agents/ledger/<date>-<slug>.json)"
    return schema
