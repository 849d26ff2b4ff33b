"""A small excerpt of vllm.cpp's own records (github.com/mudler/vllm.cpp at d85906ae), trimmed: one or two
rows of several matrix header shapes, its lifecycle summary, and its claims table (split by a prose line,
as the real one is). Written into a temporary repository by the tests; the config is the documented
example, docs/checks/examples/vllm.cpp.records.yaml."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import GitRepo, init_repo

CONFIG = Path(__file__).resolve().parents[2] / "docs" / "checks" / "examples" / "vllm.cpp.records.yaml"

ENGINE = """\
# Engine Matrix

| Area | Rows | `ANCHOR-BACKFILL` | `ACTIVE` | `DONE` |
|---|---:|---:|---:|---:|
| **Total** | **3** | **1** | **1** | **1** |

## Engine and scheduling

| ID | Item | Tier | Upstream code/tests | Our code | Our tests/evidence | Spike/spec | State | Owner |
|---|---|---|---|---|---|---|---|---|
| `ENG-CHUNKED-PREFILL` | Basic token-budget chunked prefill | T0 | `vllm/config/scheduler.py:84` | `src/vllm/v1/core/sched/scheduler.cpp:2,3` | `tests/vllm/v1/test_scheduler.cpp:2` | `planned: specs/chunked-prefill.md` | `ANCHOR-BACKFILL` | - |
| `ENG-SCHED-CORE` | Unified scheduler, FCFS, token budget | T0 | `vllm/v1/core/sched/scheduler.py:396,640` | `src/vllm/v1/core/sched/scheduler.cpp:1,4` | `tests/vllm/v1/test_scheduler.cpp:1-3` | [spec](specs/unified-scheduler.md) | `DONE` | `{done}` |
| `KV-OFFLOAD` | KV offload tiering | T1 | `vllm/v1/kv_offload/` | - | - | [spike](specs/kv-persistence-lmcache.md) | `ACTIVE` | `CLAIM-KV-PERSISTENCE-LMCACHE` |
"""

MODEL = """\
# Model Matrix

| ID | Item / architecture aliases | Upstream | Task / modality | Dependencies | Spike/spec | State | Our code + tests/evidence | Owner |
|---|---|---|---|---|---|---|---|---|
| `MODEL-TEXT-afmoe-afmoe-for-causal-lm` | `AfmoeForCausalLM` | `registry.py:73` | causal generation / text | model loader/forward | ☐ required | `INVENTORIED` | none | unassigned |
| `MODEL-TEXT-apertus-apertus-for-causal-lm` | `ApertusForCausalLM` | `registry.py:74` | causal generation / text | model loader/forward | ☐ required | `INVENTORIED` | none | unassigned |
"""

QUANT = """\
# Quantization Matrix

| ID | Encoding | ggml ID / upstream role | R | M | C | E | P | State | Our code + tests/evidence | Spike/spec | Owner |
|---|---|---|:---:|:---:|:---:|:---:|:---:|---|---|---|---|
| `QUANT-GGUF-F32` | F32 | 0 / output | Y | Y | - | Y | - | `PARTIAL` | [dequant dispatch](../src/vllm/model_executor/model_loader/gguf_dequant.cpp#L2); [unit](../tests/vllm/test_gguf_dequant.cpp#L1) | coverage spike; leaf open | - |
"""

KERNEL = """\
| ID | Item | Upstream | Our code | Tests/evidence | Spike/spec | State | Owner |
|---|---|---|---|---|---|---|---|
| `KERNEL-GEMM-FP8` | FP8 GEMM | `csrc/quantization/fp8` | - | - | - | `INVENTORIED` | - |
"""

BACKEND = """\
| ID | Item | Upstream/reference | Our code | Tests/evidence | Spike/spec | State | Owner |
|---|---|---|---|---|---|---|---|
| `BACKEND-XPU` | Intel XPU | `vllm/platforms/xpu.py` | - | - | - | `INVENTORIED` | - |
"""

COORDINATION = """\
# Coordination

| Claim | Row IDs | Agent | Worktree / remote dir | Branch | Owned scope | State | Last update |
|---|---|---|---|---|---|---|---|
| `CLAIM-KV-PERSISTENCE-LMCACHE` | `KV-OFFLOAD`, `ENG-CHUNKED-PREFILL` | Claude Code (opus-4-8) | isolated worktree | worktree branch, base `72f5db2` | SPIKE ONLY | `ACTIVE` | 2026-07-22 |

A note written between two claims, as the real table has one.

| `CLAIM-SECOND` | `KV-OFFLOAD` | Claude Code (opus-4-8) | isolated worktree | `feat/second` | the rest | `ACTIVE` | 2026-07-23 |
"""

SOURCES = {
    "src/vllm/v1/core/sched/scheduler.cpp": "a\nb\nc\nd\n",
    "tests/vllm/v1/test_scheduler.cpp": "a\nb\nc\n",
    "src/vllm/model_executor/model_loader/gguf_dequant.cpp": "a\nb\n",
    "tests/vllm/test_gguf_dequant.cpp": "a\n",
    ".agents/specs/unified-scheduler.md": "# Unified scheduler\n\n`ENG-SCHED-CORE`\n",
    ".agents/specs/kv-persistence-lmcache.md": "# KV persistence\n\n`KV-OFFLOAD`\n",
}


def excerpt_repo(path: Path, **overrides: str) -> GitRepo:
    """A repository holding the excerpt, its sources and the example config, committed; `overrides` replace
    whole files (by path). The DONE row's closing commit is the first commit."""
    repo = init_repo(path)
    first = repo.commit("Sources", SOURCES)
    files = {
        ".agents/config.yaml": CONFIG.read_text(encoding="utf-8"),
        ".agents/engine-matrix.md": ENGINE.replace("{done}", first[:7]),
        ".agents/model-matrix.md": MODEL,
        ".agents/quantization-matrix.md": QUANT,
        ".agents/kernel-matrix.md": KERNEL,
        ".agents/backend-matrix.md": BACKEND,
        ".agents/coordination.md": COORDINATION,
    }
    files.update({k: v.replace("{done}", first[:7]) for k, v in overrides.items()})
    repo.commit("docs: records", files)
    return repo
