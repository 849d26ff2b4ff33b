"""The MoE models' decode step can be captured at the default flags: the routed experts' arm (engine/ops/moe.py
`moe_experts_routed`) and the gated delta net's decode read no value on the host, give the reference's tokens on
the CPU, and on the GPU the runner captures the step of a Qwen3-MoE and a Qwen3-Next model with graphed tokens
equal to eager ones (Qwen3-Next's GPU test: tests/engine/test_llm_qwen3_next.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.llm import LLM
from engine.model.qwen3_moe import Qwen3MoeSparseMoeBlock
from engine.model.qwen3_next import Qwen3NextGatedDeltaNet
from lab.drive import greedy, greedy_llm
from lab.gates.oracle import Oracle
from lab.gates.tokens import default_prompts
from tests.engine.host_reads import HostReads
from tests.engine.model.qwen3_next_tiny import next_checkpoint

__all__ = ["next_checkpoint"]  # the fixture, imported

LENS = (1, 6, 13, 31, 4)  # five rows: 2 * rows * top_k > experts, every expert's way (engine/ops/moe.py)
NEW = 10
ROUTED = ("moe_experts", "routed")


@contextmanager
def routed_everywhere() -> Iterator[None]:
    """The routed arm takes every moe_experts call, on the CPU too (the table's injected arm): the CPU stands in
    for the GPU's default choice, where arms run only on CUDA tensors."""
    op = kernels.moe_experts
    assert op.injected is None
    op.injected = op.arm("routed")
    try:
        yield
    finally:
        op.injected = None


@pytest.fixture(scope="module")
def moe_dir(tiny_checkpoint) -> Path:
    return tiny_checkpoint("moe", seed=3, num_experts=9, num_experts_per_tok=2)


@pytest.mark.parametrize("rows", [1, len(LENS)])  # one row decodes by its drawn experts, five by every expert
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_routed_experts_give_the_reference_tokens_on_a_qwen3_moe(moe_dir: Path, dtype: str, rows: int) -> None:
    prompts = default_prompts(211, 5, LENS)[:rows]
    want = greedy(greedy_llm(moe_dir, dtype, "cpu", prompts, NEW), prompts, NEW)
    kernels.reset_counts()
    with routed_everywhere():
        got = greedy(greedy_llm(moe_dir, dtype, "cpu", prompts, NEW), prompts, NEW)
    assert kernels.counts().ran[ROUTED] > 0 and kernels.counts().ran[("moe_experts", "reference")] == 0
    assert got == want
    assert len({t for row in want for t in row}) > 5, want  # teeth: not one repeated token


def test_routed_experts_give_transformers_tokens_on_a_qwen3_next(next_checkpoint) -> None:
    path = next_checkpoint("moe-shared-expert")
    prompts = default_prompts(211, 6, LENS)
    oracle = Oracle(path, torch.float32)
    with routed_everywhere():
        got = greedy(greedy_llm(path, "float32", "cpu", prompts, NEW), prompts, NEW)
    assert got == [oracle.greedy(p, NEW) for p in prompts]


def decode_host_reads(llm: LLM, prompts: list[list[int]]) -> tuple[list[str], int]:
    """The host reads inside the MoE blocks and the gated delta net layers during decode steps, and how many
    such module calls the decode steps made."""
    mode, decoding, calls = HostReads(), [False], [0]
    mode.watching = False

    def step_starts(_: torch.nn.Module, args: tuple) -> None:
        decoding[0] = not args[2].is_prefill  # (input_ids, positions, batch)

    def enters(_: torch.nn.Module, __: tuple) -> None:
        mode.watching = decoding[0]
        calls[0] += decoding[0]

    def leaves(_: torch.nn.Module, __: tuple, ___: object) -> None:
        mode.watching = False

    model = llm.runner.model
    hooks = [model.register_forward_pre_hook(step_starts)]
    for m in model.modules():
        if isinstance(m, (Qwen3MoeSparseMoeBlock, Qwen3NextGatedDeltaNet)):
            hooks += [m.register_forward_pre_hook(enters), m.register_forward_hook(leaves)]
    try:
        with mode:
            greedy(llm, prompts, 4)
    finally:
        for h in hooks:
            h.remove()
    return mode.seen, calls[0]


@pytest.mark.parametrize("model", ["qwen3-moe", "qwen3-next"])
def test_decode_steps_of_moe_and_delta_net_layers_read_nothing_on_the_host(model, moe_dir, next_checkpoint) -> None:
    path = moe_dir if model == "qwen3-moe" else next_checkpoint("moe-shared-expert")
    prompts = default_prompts(211, 7, LENS)
    with routed_everywhere():
        seen, calls = decode_host_reads(greedy_llm(path, "float32", "cpu", prompts, 4), prompts)
    assert calls > 0 and seen == []
    # teeth: the reference experts (the CPU's choice) group tokens by expert on the host, which the capture refuses
    seen, calls = decode_host_reads(greedy_llm(path, "float32", "cpu", prompts, 4), prompts)
    assert calls > 0 and "Tensor.tolist" in seen and "aten._unique2.default" in seen, seen


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_qwen3_moe_decode_step_is_captured_at_the_default_flags(moe_dir: Path, dtype: str, capsys) -> None:
    """The runner captures the MoE decode step (the routed arm, counted at the capture's warm-up) and the graphed
    tokens equal eager ones; fp32 also equal transformers' on the GPU."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the decode-step graph needs one")
    prompts = default_prompts(211, 8, LENS)
    defaults = FlagSnapshot.defaults()
    kernels.reset_counts()
    graph = greedy_llm(moe_dir, dtype, "cuda", prompts, NEW, defaults)
    got = greedy(graph, prompts, NEW)
    seen = kernels.counts()
    print(f"qwen3-moe {dtype}: captured={graph.runner.captured}")
    print(kernels.render_counts(seen))
    assert "not capturable" not in capsys.readouterr().err
    assert graph.runner.use_graph and graph.runner.captured, "the MoE decode step fell back to eager"
    assert seen.ran[ROUTED] > 0
    eager = greedy_llm(moe_dir, dtype, "cuda", prompts, NEW, defaults.with_(VT_EAGER=True))
    assert got == greedy(eager, prompts, NEW), f"{dtype}: graphed MoE decode gives other tokens than eager"
    if dtype == "float32":
        oracle = Oracle(moe_dir, torch.float32, device="cuda")
        assert got == [oracle.greedy(p, NEW) for p in prompts]
