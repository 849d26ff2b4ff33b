"""The toolkit configuration: pydantic models and the loader.

The file is `--config PATH`, else `$ROWGATE_CONFIG`, else `.agents/config.yaml`, else the `[tool.rowgate]`
table of `pyproject.toml` (checkers.configsource.locate); with none, every check runs on its defaults.
Each check owns one section below. Unknown keys are errors everywhere (`extra="forbid"`), so a misspelled
key fails with its file and line instead of being ignored.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from .configsource import ConfigSource, locate
from .ids import ROW_ID
from .paths import checked_relative
from .results import RecordError
from .safe_regex import checked
from .yamlio import line_of, parse_yaml, validate

CONFIG_PATH = ".agents/config.yaml"

# A config field holding a regex, compiled when the config loads (checkers.safe_regex runs it with a limit).
ConfigPattern = Annotated[str, AfterValidator(checked)]
# A config field naming a file or folder of the repository: relative, no `..` out, no control character
# (checked when the config loads); checks open it through checkers.paths.confine(), which also refuses a
# symlink out of the repository.
RepoPath = Annotated[str, AfterValidator(checked_relative)]

STATES = ("INVENTORIED", "SPIKE", "READY", "ACTIVE", "GATING", "PARTIAL", "DONE", "BLOCKED")
State = str  # one of rows.state_order (default STATES): the set is configuration, checked when records load


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BaseRefConfig(Strict):
    """Where a range's base comes from when no flag or environment variable names one."""

    ref: str | None = Field(None, description="base ref, e.g. origin/main; unset: the detected upstream")
    env: str = Field("ROWGATE_BASE", description="environment variable that overrides `ref`")
    remote: str | None = Field(None, description="upstream remote; unset: `upstream` if present, else `origin`")


class StateRule(Strict):
    """What a row must have to be in a state."""

    claim: bool = False  # a live claim in .agents/claims/
    spec: bool = False  # a spec with the required sections
    anchors: bool = False  # code and test anchors that exist in the tree
    evidence: bool = False  # ledger entries
    closing_commit: bool = False  # an ancestor of HEAD
    blocker: bool = False  # a blocker with an unblocking condition


class RowsConfig(Strict):
    areas: list[str] = Field(default_factory=lambda: ["ENGINE", "MODEL", "QUANT", "KERNEL", "BACKEND", "GOV"])
    id_pattern: ConfigPattern = Field(ROW_ID, description="regex every row id must fully match")
    state_order: list[str] = Field(
        default_factory=lambda: list(STATES), min_length=1, description="the states a row may be in, in order"
    )
    states: dict[str, StateRule] = Field(default_factory=dict, description="what a row needs in each state")
    active_states: list[str] = Field(default_factory=lambda: ["SPIKE", "ACTIVE", "GATING"])
    spec_sections: list[str] = Field(default_factory=lambda: ["Goal", "Acceptance", "Issues"])
    orphan_specs: bool = Field(True, description="a spec that no row names is a finding (AR003)")
    inactive_claims: Literal["checked", "ignored"] = Field(
        "checked",
        description="a claim named by a row outside the active states: must exist and name the row (checked), "
        "or is history and not looked up (ignored, for tables that keep the last claim's name)",
    )
    code_anchors: list[str] | None = Field(
        None, description="globs of the anchors that count as code; unset: every anchor that is not a test"
    )
    test_anchors: list[str] | None = Field(
        None, description="globs of the anchors that count as tests; unset: tests/ paths and test_*/*_test.py files"
    )

    @field_validator("states", "active_states")
    @classmethod
    def _known_states(cls, value: Any, info: ValidationInfo) -> Any:
        order = info.data.get("state_order")
        unknown = [s for s in value if order is not None and s not in order]
        if unknown:
            raise ValueError(f"state {unknown[0]!r} is not in rows.state_order ({', '.join(order or ())})")
        return value


# --- record sources: one file per record, or markdown tables ----------------


def _column_shorthand(value: Any) -> Any:
    # `state: State` and `anchors: [Our code, Tests/evidence]` are header names only
    if isinstance(value, str):
        return {"headers": [value]}
    if isinstance(value, list):
        return {"headers": value}
    return value


class TableColumn(Strict):
    """Where one record field comes from in a table: the columns whose header is one of `headers`."""

    headers: list[str] = Field(min_length=1, description="header names, compared without case, markup or punctuation")
    pattern: ConfigPattern | None = Field(
        None,
        description="take what this regex finds in the cell (its first group, if it has one); unset: the "
        "cell's text, or for a list field each code span (else each comma-separated item)",
    )
    relative: bool = Field(False, description="the values are paths relative to the table's file (link targets)")
    links: bool = Field(
        False,
        description="also take the cell's local markdown link targets, relative to the table's file "
        "(a `#L12` or `#L12-L20` fragment becomes `:12` or `:12-20`)",
    )
    optional: bool = Field(False, description="a table without this column is still read (the field stays unset)")


class TableSource(Strict):
    """Markdown tables that hold records: every table, in the named files, whose header has the columns of
    all its non-optional fields."""

    paths: list[str] = Field(min_length=1, description="markdown files or root-anchored globs of them")
    columns: dict[str, Annotated[TableColumn, BeforeValidator(_column_shorthand)]] = Field(
        description="record field -> its column(s); the `id` field's column is required"
    )
    id_pattern: ConfigPattern | None = Field(
        None, description="lines whose id cell does not fully match are not records (summary lines, notes)"
    )
    values: dict[str, str] = Field(default_factory=dict, description="fields every record here gets, e.g. area")
    placeholders: list[str] = Field(
        default_factory=lambda: ["", "-", "none"], description="cell texts that leave a field unset (any case)"
    )
    imported: bool = Field(
        False,
        description="its records were imported into record files (`rowgate records import`): the table is no "
        "longer read as records, the kind's record files are, and `rowgate render --tables` writes it back",
    )

    @field_validator("columns")
    @classmethod
    def _has_id(cls, columns: dict[str, TableColumn]) -> dict[str, TableColumn]:
        if "id" not in columns and "number" not in columns:
            raise ValueError("a table source needs an `id` column (`number` for issue records)")
        return columns


class KindSource(Strict):
    files: bool = Field(True, description="read the one-file-per-record folder under .agents/")
    tables: list[TableSource] = Field(default_factory=list)


class SourcesConfig(Strict):
    """Where each record kind is read from; several table sources may feed one kind."""

    rows: KindSource = Field(default_factory=KindSource)
    claims: KindSource = Field(default_factory=KindSource)
    issues: KindSource = Field(default_factory=KindSource)
    ledger: KindSource = Field(default_factory=KindSource)


# --- per-check sections (each check module reads only its own) -------------


class TrailerCondition(Strict):
    """Holds when some trailer `key` has a value that fully matches `pattern`."""

    key: str
    pattern: ConfigPattern


class TrailerKeyRule(Strict):
    """Counts and values of one trailer key (keys compare case-insensitively, as in git)."""

    key: str
    min: int = Field(0, ge=0)
    max: int | None = Field(None, ge=0)
    pattern: ConfigPattern | None = Field(None, description="regex every value must fully match")
    exists: RepoPath | None = Field(None, description="path template every value must name, e.g. .agents/rows/{}.yaml")
    author: bool = Field(False, description="one value must be the commit author `Name <email>` (mailmap honoured)")
    when: TrailerCondition | None = Field(None, description="the rule applies only when this holds")
    fix: str | None = None


class TrailerExemption(Strict):
    key: str
    pattern: ConfigPattern = Field(description="regex searched in the value")


class TrailerForbidRule(Strict):
    """Values of these keys that name a forbidden identity."""

    keys: list[str] = Field(min_length=1)
    what: str = Field("a forbidden identity", description="what a match names, for the message")
    pattern: ConfigPattern | None = Field(None, description="regex searched (case-insensitively) in the value")
    declared_by: str | None = Field(None, description="identities declared in this key's `AGENT:MODEL` values")
    exempt: list[TrailerExemption] = Field(default_factory=list)
    fix: str | None = None


class TrailerParagraphRule(Strict):
    """A paragraph whose first line fully matches `pattern`, `min`..`max` times, before the trailer block."""

    pattern: ConfigPattern
    min: int = Field(1, ge=0)
    max: int | None = Field(1, ge=0)
    whole: bool = Field(False, description="the paragraph is exactly one line, and it matches (a marker)")
    fix: str | None = None


class TrailerContract(Strict):
    """What every judged message must satisfy: named presets plus general rules."""

    presets: list[Literal["agents-protocol", "dco", "row"]] = Field(default_factory=list)
    paragraphs: list[TrailerParagraphRule] = Field(default_factory=list)
    keys: list[TrailerKeyRule] = Field(default_factory=list)
    forbid: list[TrailerForbidRule] = Field(default_factory=list)
    forbid_divider: bool = Field(False, description="a `---` line in the body is an error (git's patch divider)")
    placeholders: list[str] = Field(default_factory=list, description="template values --filled rejects")


class TrailerDebt(Strict):
    """A landed message that breaks the contract: the full sha plus the exact error text."""

    sha: str = Field(pattern=r"^[0-9a-f]{40}$")
    error: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class TrailersConfig(TrailerContract):
    default_range: Literal["base", "cutover"] = Field(
        "base", description="range when none is given: from the shared base, or from the top-level cutover"
    )
    merges: Literal["contract", "skip", "forbid"] = Field(
        "contract", description="merge commits (2+ parents): judged by the contract, skipped, or an error"
    )
    legacy: TrailerContract = Field(
        default_factory=TrailerContract, description="the rule for the ancestors of the cutover commit"
    )
    cutover_judged: Literal["contract", "legacy"] = Field(
        "contract",
        description="the cutover commit itself: judged by the contract (it is the first commit to carry it), or "
        "by the legacy rule (`rowgate init` sets the cutover to the HEAD it found, which predates the contract)",
    )
    exceptions: list[TrailerDebt] = Field(default_factory=list)
    exempt_authors: list[ConfigPattern] = Field(
        default_factory=list,
        description="regexes searched in a commit's author (`Name <email>`, after .mailmap): a matching commit "
        "is not judged (bots such as Dependabot, whose sign-off names another address); `rowgate init` writes "
        "the known bots",
    )


class PathClass(Strict):
    """A path class: the first class (in list order) whose patterns match a path owns it."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    paths: list[str] = Field(min_length=1, description="globs: `*` within a segment, `**` any segments")
    budget: int | None = Field(None, ge=0, description="review budget in changed lines; null: unbudgeted")
    deletion_weight: float | None = Field(None, ge=0, description="overrides pr_size.deletion_weight")


class PairRule(Strict):
    """When a path matching `when` changes, the path `require` (same `{placeholders}`) must change too."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    when: str = Field(description="glob with `{name}` placeholders, e.g. checkers/checks/{name}/**/*")
    require: str | list[str] = Field(
        description="path with the same placeholders, e.g. tests/checkers/test_{name}.py; "
        "a list: any one of them; `{name|snake}` writes kebab-case as snake_case "
        "(also `kebab`, `lower`)"
    )
    exclude: list[str] = Field(default_factory=list, description="globs that the rule does not apply to")


DEFAULT_BUDGET = 1000  # changed lines of the one default class, where no classes are configured


def _default_classes() -> list[PathClass]:
    return [PathClass(name="all", paths=["**"], budget=DEFAULT_BUDGET)]


class PrSizeConfig(Strict):
    renames: Literal["edits", "full"] = Field(
        "edits",
        description="edits: a pure rename costs nothing, a rename with edits costs the edits; "
        "full: a rename costs its whole delete and add",
    )
    deletion_weight: float = Field(1.0, ge=0, description="weight of a deleted line against an added one")
    classes: list[PathClass] = Field(
        default_factory=_default_classes, description=f"unset: one class `all` (every path, budget {DEFAULT_BUDGET})"
    )
    pairs: list[PairRule] = Field(default_factory=list)

    @field_validator("classes")
    @classmethod
    def _unique_names(cls, classes: list[PathClass]) -> list[PathClass]:
        names = [c.name for c in classes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"class {dupes[0]!r} is defined twice")
        return classes


class EnvDocConfig(Strict):
    prefixes: list[str] = Field(default_factory=lambda: ["VT_"], description="env var name prefixes in scope")
    doc: RepoPath = Field("docs/ENVIRONMENT.md", description="the rendered table of documented names")
    allowlist: RepoPath = Field("scripts/env-doc-allowlist.txt", description="`NAME  CLASS  reason` lines")
    classes: list[str] = Field(default_factory=lambda: ["kernel-switch", "debug", "test-only", "build"])
    flags_file: RepoPath | None = Field(
        "engine/flags.py",
        description='the flag registry: each declare("NAME", ...) '
        "is a flag that some read must consult (a declaration is not a read)",
    )
    exclude: list[str] = Field(default_factory=list, description="globs of tracked files not scanned")
    include: list[str] = Field(default_factory=list, description="globs of the tracked files scanned; empty: all")
    docs: list[RepoPath] = Field(default_factory=list, description="further documents whose tables document names")
    table_headers: list[str] = Field(
        default_factory=lambda: ["flag"],
        description="first header cells (any case) "
        "of the tables whose first column holds the documented names, e.g. Variable",
    )
    allowlist_format: Literal["classified", "names"] = Field(
        "classified", description="classified: `NAME  CLASS  reason` per line; names: one name per line"
    )
    allowlist_sorted: bool = Field(True, description="the allowlist's entries must be sorted by name")
    readers: list[str] = Field(
        default_factory=list,
        description="functions and macros (C/C++/CUDA and Python, "
        "by name or dotted name) whose first string argument is an env read, e.g. EnvOnOr",
    )


class CublasLtRules(Strict):
    """gemv-invocation's cuBLASLt rule set: C/D layouts take the caller's out dtype, algo counts are constants."""

    heuristic_calls: list[str] = Field(
        default_factory=lambda: ["cublasLtMatmulAlgoGetHeuristic"],
        description="heuristic queries whose requestedAlgoCount is judged",
    )
    algo_count_arg: int = Field(8, ge=1, description="1-based position of requestedAlgoCount in those calls")
    marker: str = Field("requestedAlgoCount", description="the argument is written `/*<marker>=*/ NAME`")
    algo_constants: list[str] = Field(
        default_factory=list,
        description="the policy constants an algo count may "
        "name; empty: any name declared constexpr or #define in the unit",
    )
    layout_calls: list[str] = Field(
        default_factory=lambda: ["cublasLtMatrixLayoutCreate", "MakeRowMajor", "MakeRowMajorBatched"],
        description="calls whose first argument is a layout and second its dtype",
    )
    output_layouts: list[str] = Field(
        default_factory=lambda: ["lc"], description="C/D layout variable names (`&lc.v`, `p.lc` and `lc` all name `lc`)"
    )
    out_dtype_vars: list[str] = Field(
        default_factory=lambda: ["out_type"], description="variables holding the caller's out dtype"
    )


class GemvConfig(Strict):
    """gemv-invocation: where the engine's matmul/GEMV call sites live, and how many must be found."""

    python: list[str] = Field(default_factory=lambda: ["engine/**/*.py"], description="globs of Python sources")
    cuda: list[str] = Field(
        default_factory=lambda: ["engine/**/*.cu", "engine/**/*.cuh"],
        description="globs of CUDA sources (launch sites and cuBLAS/heuristic calls)",
    )
    min_sites: int = Field(
        1, ge=0, description="fail below this many examined call sites: a moved or renamed tree must not pass vacuously"
    )
    rule_sets: list[Literal["engine", "cublaslt"]] = Field(
        default_factory=lambda: list[Literal["engine", "cublaslt"]](["engine"]),
        description="engine: torch/GEMV launch rules (A1, A2 on every launch); "
        "cublaslt: cuBLASLt output layouts and requestedAlgoCount (see `cublaslt`)",
    )
    cublaslt: CublasLtRules = Field(default_factory=lambda: CublasLtRules())


class LiveRowsConfig(Strict):
    remote: str | None = Field("origin", description="remote whose row branches count; null: local branches only")
    branch_prefix: str = Field("row/", description="a row's branch is <prefix><ROW-ID>")


class RoleConfig(Strict):
    mode: Literal["branch", "trailer"] = Field(
        "trailer",
        description="branch: main's first-parent history is merges of <prefix><ROW-ID> branches; "
        "trailer: every commit names its row in a Row: trailer",
    )
    branch_prefix: str = Field("row/", description="the prefix of row branches in branch mode (compared case-exact)")
    topic_branches: bool = Field(
        False,
        description="branch mode: a merge of any <prefix><name> branch counts (topic branches such as port/x); "
        "false: the name must be an existing row",
    )
    pr_refs: bool = Field(
        False,
        description="a first-parent commit whose subject names a pull request (`#12`, `(#12)`, `Merge pull "
        "request #12`) reached main through review",
    )
    exempt: list[str] = Field(
        default_factory=list,
        description="globs of integration paths (records, docs): a commit that changes only these needs no row",
    )
    protected: str = Field("main", description="the branch changes land on; a run on it (or a push to it) lands")
    protected_ref: str | None = Field(
        None, description="the ref holding the protected branch's tip; unset: base.ref, else the detected upstream"
    )
    pending: bool = Field(
        True,
        description="commits not yet on the protected branch are pending: a branch is judged from its merge "
        "base, and a pending commit may name an issue (Refs #N) or carry outside_marker instead of a row",
    )
    outside_marker: str | None = Field(
        None, description="a trailer line marking an outside contribution, e.g. 'Contribution: outside'"
    )


class GencodeConfig(Strict):
    """Where the arch feature table, the sources and the compiled objects are, and how PTX is held."""

    table: RepoPath = Field("engine/cuda/arch_features.yaml", description="the feature table, repo-relative")
    source_dir: RepoPath | None = Field(
        None, description="directory the table's source names are in; unset: the table's"
    )
    build_dir: RepoPath | None = Field(
        None, description="objects to audit; unset: $VT_CUDA_CACHE, else ~/.cache/rowgate/cuda"
    )
    archs: list[str] | None = Field(None, description="requested archs (e.g. ['9.0']); unset: the table's union")
    compile_commands: RepoPath | None = Field(
        None, description="a CMake compile_commands.json to audit instead of objects (as --compile-commands)"
    )
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="source file -> feature, for a CMake feature table (`table: cmake/CudaArchFeatures.cmake`), "
        "which names features and archs but no sources",
    )
    ptx: Literal["all", "subset", "none"] = Field(
        "all", description="all: PTX for exactly the expected archs; subset: no PTX beyond them; none: PTX not audited"
    )


class Rollup(Strict):
    """A hand-written summary table whose counts must agree with the detailed rows' states."""

    path: RepoPath = Field(description="the file holding the summary table")
    header: str = Field(description="the summary table's first header cell, e.g. Area")
    total: str = Field("Total", description="the first cell of the line holding the totals")
    rows_from: list[RepoPath] = Field(
        default_factory=list, description="the record tables whose rows it sums; empty: `path` itself"
    )
    count_column: str = Field("Rows", description="the column holding the number of all rows")


class RecordConfig(Strict):
    ref_keywords: list[str] = Field(
        default_factory=lambda: ["Refs", "Closes", "Fixes"], description="words before #N that make an issue reference"
    )
    rollups: list[Rollup] = Field(default_factory=list, description="summary tables checked against the rows (AR008)")
    count_areas: list[str] | None = Field(
        None, description="the areas whose row counts the OK line prints; unset: rows.areas"
    )
    ledger_size_cap: int = Field(
        8192, ge=256, description="bytes one ledger record file may take (AR009); per-case arrays go in side files"
    )
    ledger_size_exempt: dict[RepoPath, Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=dict,
        description="ledger record path -> why it stays over the cap (reviewed; an entry under the cap is a finding)",
    )


class CheckpointRule(Strict):
    """A change to any `when` path is a checkpoint: the same commit must also change every `require` path."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    when: list[str] = Field(min_length=1, description="globs of checkpoint paths (`src/**`, `.agents/state.md`)")
    require: list[RepoPath] = Field(min_length=1, description="paths every checkpoint commit must also change")
    exclude: list[str] = Field(default_factory=list, description="globs that are no checkpoint")


class DocsConfig(Strict):
    views: list[Literal["matrices", "roadmap", "environment"]] = Field(
        default_factory=lambda: list[Literal["matrices", "roadmap", "environment"]](
            ["matrices", "roadmap", "environment"]
        ),
        description="the views `rowgate render` writes and DC001 compares; empty where the records are "
        "themselves the public tables",
    )
    checkpoints: list[CheckpointRule] = Field(default_factory=list, description="path rules judged per commit (DC005)")
    matrices_dir: RepoPath = Field("docs/matrices", description="one rendered matrix per area")
    roadmap: RepoPath = Field("docs/ROADMAP.md", description="the rendered roadmap table")
    environment: RepoPath = Field("docs/ENVIRONMENT.md", description="rendered from the engine's flag registry")
    flags_file: RepoPath = Field("engine/flags.py", description="the engine's flag registry, read as AST")
    engine_paths: list[str] = Field(
        default_factory=lambda: ["engine/"], description="path prefixes of engine code (a change owes a benchmark note)"
    )
    benchmarks: RepoPath = Field("docs/BENCHMARKS.md", description="the benchmark summary")
    bench_trailer: str = Field(
        "Bench-Impact", description="trailer that says why an engine change has no benchmark or ledger update"
    )
    since: str | None = Field(None, description="full sha after which the range rule applies; unset: cutover")


class EvidenceConfig(Strict):
    """evidence: which documents cite which ledger records, and how strictly the records must back them."""

    ledger_dir: RepoPath = Field(".agents/ledger", description="the folder of ledger records (<name>.json)")
    documents: list[RepoPath] = Field(
        default_factory=lambda: ["README.md", "docs/BENCHMARKS.md"], description="the documents whose numbers are held"
    )
    marker: ConfigPattern = Field(
        r"\[ledger:\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*?)(?:\.json)?(?:\s*@\s*(?P<label>[^\]]*))?\]",
        description="a citation beside a number: group `name` is the record's file name (without .json), "
        "optional group `label` its dated label (`DATE SHA [dirty]`)",
    )
    file_names: bool = Field(
        True, description="a record's file name (`<name>.json`) in the text is a reference: the record must exist"
    )
    headline_sections: list[str] = Field(
        default_factory=lambda: ["Numbers"],
        description="headings whose every list item is a headline (it must cite a record)",
    )
    defaults_words: list[str] = Field(
        default_factory=lambda: ["the defaults", "default flags", "default settings"],
        description="phrases that present a number as what the defaults give",
    )
    legacy: Literal["fail", "note"] = Field(
        "fail",
        description="a headline backed by a schema-1 (legacy) record, or one dated before `legacy_before`: fail, "
        "or a printed note",
    )
    legacy_before: dt.date | None = Field(None, description="records dated before this day are legacy too")
    stale: Literal["fail", "note"] = Field(
        "fail", description="a current (undated) citation of a record whose measured paths changed since its commit"
    )
    require_selftest: list[Literal["gate", "bench", "flip", "note"]] = Field(
        default_factory=lambda: list[Literal["gate", "bench", "flip", "note"]](["gate"]),
        description="record kinds whose schema-2 records must carry a comparator self-test that caught every seed",
    )
    flags_file: RepoPath | None = Field(
        "engine/flags.py", description="today's flag defaults (declare() calls, read as AST); null: no defaults rule"
    )
    anchors_from: RepoPath | None = Field(
        ".agents/rows",
        description="where rows (<ROW-ID>.yaml with `anchors`) live: a record measured its rows' anchors",
    )


class CiConfig(Strict):
    """Where `rowgate ci base` looks for the base a CI job judges, and the oldest base it may pick."""

    floor: str | None = Field(
        None, description="full sha of the reviewed enforcement floor: no CI base is ever older than it"
    )
    green_ref: str = Field("refs/rowgate/last-green", description="ref the job moves to each commit it passed")
    green_file: RepoPath | None = Field(None, description="file holding the last green sha (e.g. a CI cache)")


class CheckControl(Strict):
    """Whether a check runs (`rowgate preflight` and its hook name a disabled check and do not run it)."""

    enabled: bool = True


class Config(Strict):
    version: Literal[1] = 1
    checks: dict[str, CheckControl] = Field(
        default_factory=dict, description="per check id, e.g. {pr-size: {enabled: false}}; unknown ids are errors"
    )
    ignore: list[str] = Field(
        default_factory=list, description="rule ids or names never reported (TR007, patch-divider)"
    )
    per_file_ignores: dict[str, list[str]] = Field(
        default_factory=dict,
        description="glob -> rule ids or names not reported for the paths it matches, "
        'as ruff\'s per-file-ignores: {"tests/fixtures/**": [ED001]}',
    )
    cutover: str | None = Field(None, description="full sha of the first commit the contract applies after")
    base: BaseRefConfig = Field(default_factory=BaseRefConfig)
    rows: RowsConfig = Field(default_factory=RowsConfig)
    sources: SourcesConfig = Field(default_factory=SourcesConfig)
    trailers: TrailersConfig = Field(default_factory=TrailersConfig)
    pr_size: PrSizeConfig = Field(default_factory=PrSizeConfig)
    env_doc: EnvDocConfig = Field(default_factory=EnvDocConfig)
    gemv: GemvConfig = Field(default_factory=GemvConfig)
    live_rows: LiveRowsConfig = Field(default_factory=LiveRowsConfig)
    role: RoleConfig = Field(default_factory=RoleConfig)
    gencode: GencodeConfig = Field(default_factory=GencodeConfig)
    record: RecordConfig = Field(default_factory=RecordConfig)
    docs: DocsConfig = Field(default_factory=DocsConfig)
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig)

    ci: CiConfig = Field(default_factory=CiConfig)


def load_config(root: Path, path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Locate, load and validate the config of the repository at `root` (the defaults where there is none);
    raises RecordError naming file, line, field."""
    return parse_source(locate(root, path, env))


def parse_source(source: ConfigSource, git_dir: Path | None = None) -> Config:
    """Validate a located config: exactly the bytes the config cache keys on (`git_dir`: see parse_config)."""
    if source.kind == "none":
        return Config()
    if source.kind == "pyproject":
        return parse_pyproject(source.raw, source.display)
    return parse_config(source.raw, source.display, git_dir)


def parse_config(raw: bytes, display: str = CONFIG_PATH, git_dir: Path | None = None) -> Config:
    """Validate the bytes of a YAML config. With `git_dir`, bytes that parsed and validated before are
    validated again from their cached parse (checkers.recordcache), without ruamel.yaml's round trip; a
    problem found that way is reported from a fresh parse, with its lines."""
    cache, key = None, ""
    if git_dir is not None:
        from .contentcache import ContentCache
        from .recordcache import ParsedCache

        cache, key = ParsedCache.at(git_dir, "config"), ContentCache.key("config", raw)
        hit = cache.hit(key)
        if hit is not None:
            try:
                config = Config.model_validate(hit[0])
                check_names(config, display, lambda loc: None)
                cache.cache.save()
                return config
            except (ValidationError, RecordError):
                pass  # the schema changed since: the fresh parse below reports where
    doc = parse_yaml(raw, display)
    config = validate(Config, doc, display)
    check_names(config, display, lambda loc: line_of(doc, loc))
    if cache is not None:
        cache.keep(key, doc)
        cache.cache.save()
    return config


def parse_pyproject(raw: bytes, display: str = "pyproject.toml") -> Config:
    """Validate the `[tool.rowgate]` table of a pyproject.toml (TOML keys as in the YAML file)."""
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RecordError(display, [(None, "", f"invalid TOML: {exc}")]) from None
    table = data.get("tool", {}).get("rowgate")
    if not isinstance(table, dict):
        raise RecordError(display, [(None, "tool.rowgate", "no [tool.rowgate] table")])
    config = validate(Config, table, f"{display} [tool.rowgate]")
    check_names(config, f"{display} [tool.rowgate]", lambda loc: None)
    return config


def check_names(config: Config, display: str, line: Callable[[tuple[str | int, ...]], int | None]) -> None:
    """Check ids under `checks` and rule ids or names under `ignore`/`per_file_ignores` must exist; the
    error names the known ones."""
    from . import registry  # the check modules: only when a config is validated

    checks = [c.id for c in registry.CHECKS]
    rules = registry.all_rules()
    known = {r.id for r in rules} | {r.name for r in rules}
    problems: list[tuple[int | None, str, str]] = []
    for check_id in config.checks:
        if check_id not in checks:
            problems.append(
                (
                    line(("checks", check_id)),
                    f"checks.{check_id}",
                    f"unknown check {check_id!r}{_did_you_mean(check_id, list(checks))}; "
                    f"known checks: {', '.join(checks)}",
                )
            )
    named: list[tuple[tuple[str | int, ...], str, str]] = [
        (("ignore", i), f"ignore.{i}", key) for i, key in enumerate(config.ignore)
    ]
    named += [
        (("per_file_ignores", glob, i), f"per_file_ignores.{glob}", key)
        for glob, keys in config.per_file_ignores.items()
        for i, key in enumerate(keys)
    ]
    for loc, field_, key in named:
        if key not in known and key.upper() not in known:
            # the nearest id or name, not all of them on one line: `rowgate rules` lists them
            names = {r.id: f"{r.id} {r.name}" for r in rules} | {r.name: f"{r.id} {r.name}" for r in rules}
            near = difflib.get_close_matches(key.upper() if key[:1].isupper() else key, list(names), n=1, cutoff=0.6)
            hint = f" (did you mean {names[near[0]]}?)" if near else ""
            why = f"unknown rule {key!r}{hint}; `rowgate rules` lists the {len(rules)} rules and explains each"
            problems.append((line(loc), field_, why))
    if problems:
        raise RecordError(display, problems)


def _did_you_mean(word: str, choices: list[str]) -> str:
    near = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def json_schema() -> dict[str, Any]:
    schema = Config.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rowgate config (.agents/config.yaml, or [tool.rowgate] in pyproject.toml)"
    return schema
