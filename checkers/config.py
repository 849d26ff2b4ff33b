"""The toolkit configuration, `.agents/config.yaml`: pydantic models and the loader.

Each check owns one section below. Unknown keys are errors everywhere (`extra="forbid"`), so a misspelled
key fails with its file and line instead of being ignored.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from checkers.yamlio import load_model

CONFIG_PATH = ".agents/config.yaml"

STATES = ("INVENTORIED", "SPIKE", "READY", "ACTIVE", "GATING", "PARTIAL", "DONE", "BLOCKED")
State = Literal["INVENTORIED", "SPIKE", "READY", "ACTIVE", "GATING", "PARTIAL", "DONE", "BLOCKED"]


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
    states: dict[State, StateRule] = Field(default_factory=dict)
    active_states: list[State] = Field(default_factory=lambda: ["SPIKE", "ACTIVE", "GATING"])
    spec_sections: list[str] = Field(default_factory=lambda: ["Goal", "Acceptance", "Issues"])


# --- per-check sections (each check module reads only its own) -------------

class TrailersConfig(Strict):
    pass


class PrSizeConfig(Strict):
    pass


class EnvDocConfig(Strict):
    pass


class GemvConfig(Strict):
    """gemv-invocation: where the engine's matmul/GEMV call sites live, and how many must be found."""

    python: list[str] = Field(default_factory=lambda: ["engine/**/*.py"], description="globs of Python sources")
    cuda: list[str] = Field(default_factory=lambda: ["engine/**/*.cu", "engine/**/*.cuh"],
                            description="globs of CUDA sources (launch sites and cuBLAS/heuristic calls)")
    min_sites: int = Field(1, ge=0, description="fail below this many examined call sites: a moved or renamed "
                           "tree must not pass vacuously")


class LiveRowsConfig(Strict):
    pass


class RoleConfig(Strict):
    pass


class GencodeConfig(Strict):
    """Where the arch feature table, the sources and the compiled objects are, and how PTX is held."""

    table: str = Field("engine/cuda/arch_features.yaml", description="the feature table, repo-relative")
    source_dir: str | None = Field(None, description="directory the table's source names are in; unset: the table's")
    build_dir: str | None = Field(None, description="objects to audit; unset: $VT_CUDA_CACHE, else ~/.cache/rowgate/cuda")
    archs: list[str] | None = Field(None, description="requested archs (e.g. ['9.0']); unset: the table's union")
    ptx: Literal["all", "subset", "none"] = Field(
        "all", description="all: PTX for exactly the expected archs; subset: no PTX beyond them; none: PTX not audited")


class RecordConfig(Strict):
    pass


class DocsConfig(Strict):
    pass


class Config(Strict):
    version: Literal[1] = 1
    cutover: str | None = Field(None, description="full sha of the first commit the contract applies after")
    base: BaseRefConfig = Field(default_factory=BaseRefConfig)
    rows: RowsConfig = Field(default_factory=RowsConfig)
    trailers: TrailersConfig = Field(default_factory=TrailersConfig)
    pr_size: PrSizeConfig = Field(default_factory=PrSizeConfig)
    env_doc: EnvDocConfig = Field(default_factory=EnvDocConfig)
    gemv: GemvConfig = Field(default_factory=GemvConfig)
    live_rows: LiveRowsConfig = Field(default_factory=LiveRowsConfig)
    role: RoleConfig = Field(default_factory=RoleConfig)
    gencode: GencodeConfig = Field(default_factory=GencodeConfig)
    record: RecordConfig = Field(default_factory=RecordConfig)
    docs: DocsConfig = Field(default_factory=DocsConfig)


def load_config(root: Path) -> Config:
    """Load and validate `.agents/config.yaml` under `root`; raises RecordError naming file, line, field."""
    config, _ = load_model(Config, root / CONFIG_PATH, CONFIG_PATH)
    return config


def json_schema() -> dict:
    schema = Config.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rowgate .agents/config.yaml"
    return schema
