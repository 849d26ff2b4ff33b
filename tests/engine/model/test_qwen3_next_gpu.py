"""On the GPU: the tiny Qwen3-Next checkpoints decode (graphed) token-exact against transformers on the same
device, with the gated delta net arms off and on (the kernel table's counters prove they ran), and the captured
decode step equals the eager one, tokens and recurrent state.

In bf16 the near-tie razor is no gate for this model: it teacher-forces the oracle, whose forward over a whole
sequence runs the chunked form where its own generate runs the recurrent step, and transformers' own greedy ids
fall out of its band (measured below). The bf16 gate is token-exact against transformers' generate."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.runner import Runner
from lab.drive import greedy, greedy_llm, greedy_tokens
from lab.gates.neartie import near_tie_gate
from lab.gates.oracle import Oracle
from lab.gates.tokens import default_prompts, token_gate
from tests.engine.model.qwen3_next_tiny import LENS, NEW, next_checkpoint

__all__ = ["next_checkpoint"]  # the fixture, imported
pytestmark = pytest.mark.gpu

# the gated delta net's arms, and the MoE kernels (without them the MoE experts run their routed arm, which reads no
# ids on the host: the decode step is captured either way)
GDN_ARMS = {"VT_GDN_KERNEL": True, "VT_MOE_KERNELS": True}
# the references set off explicitly: the gate holds whichever default the flags have
ARMS = {"references": {"VT_GDN_KERNEL": False}, "gdn-kernels": GDN_ARMS}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture(autouse=True)
def cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the Qwen3-Next GPU gates need one")
    # both sides' depthwise convolutions in true fp32 (cuDNN may take TF32 otherwise)
    torch.backends.cudnn.allow_tf32 = False


def generate(path, dtype: torch.dtype, prompts: list[list[int]], settings: dict[str, bool]) -> Runner:
    """The greedy ids through LLM (as `.tokens` on its runner, returned)."""
    flags = FlagSnapshot.defaults().with_(**settings)
    llm = greedy_llm(path, dtype, "cuda", prompts, NEW, flags)
    tokens = greedy(llm, prompts, NEW)
    llm.runner.tokens = tokens  # type: ignore[attr-defined]
    return llm.runner


@pytest.mark.parametrize("arm", list(ARMS))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("model", ["moe-shared-expert", "d128"])
def test_greedy_ids_equal_transformers_on_the_gpu(next_checkpoint, model: str, dtype: str, arm: str) -> None:
    path = next_checkpoint(model)
    prompts = default_prompts(211, 11, LENS)
    kernels.reset_counts()
    runner = generate(path, DTYPES[dtype], prompts, ARMS[arm])
    seen = kernels.counts()
    print(f"{model} {dtype} {arm}: graphed={runner.captured}\n{kernels.render_counts(seen)}")
    oracle = Oracle(path, DTYPES[dtype], device="cuda")
    theirs = [oracle.greedy(p, NEW) for p in prompts]
    result = token_gate(prompts, runner.tokens, theirs)  # type: ignore[attr-defined]
    assert result.passed, result.render()
    assert runner.captured and runner.use_graph  # the decode step was captured (with the GDN kernel in it, or not)
    if arm == "gdn-kernels":
        # every prompt of more than one token, both delta net layers: the chunked prefill on its reference (its
        # kernel retired); a one-token prompt takes the decode recurrence
        assert seen.ran[("gated_delta_chunked", "reference")] == sum(len(p) > 1 for p in prompts) * 2
        assert seen.ran[("gated_delta_decode", "cuda")] > 0 and kernels.arms_ran("VT_GDN_KERNEL", seen) > 0
    else:
        assert kernels.arms_ran("VT_GDN_KERNEL", seen) == 0 and seen.ran[("gated_delta_chunked", "reference")] > 0
        assert seen.ran[("moe_experts", "routed")] > 0 and seen.ran[("moe_experts", "reference")] == 0


@pytest.mark.parametrize("model", ["moe-shared-expert", "d128"])
def test_graphed_decode_equals_eager_with_the_gdn_kernel(next_checkpoint, model: str) -> None:
    path = next_checkpoint(model)
    prompts = default_prompts(211, 12, LENS)
    graphed = generate(path, torch.bfloat16, prompts, GDN_ARMS)
    eager = generate(path, torch.bfloat16, prompts, {**GDN_ARMS, "VT_EAGER": True})
    assert graphed.captured and graphed.use_graph and not eager.captured
    assert graphed.tokens == eager.tokens  # type: ignore[attr-defined]
    assert graphed.recurrent is not None and eager.recurrent is not None
    rows = len(prompts)  # the sequences' slots, after the last decode step; the scratch slot may differ
    for layer, ssm in graphed.recurrent.ssm.items():
        assert torch.equal(ssm[:rows], eager.recurrent.ssm[layer][:rows]), layer
        assert torch.equal(graphed.recurrent.conv[layer][:rows], eager.recurrent.conv[layer][:rows]), layer


RAZOR_LENS = (1, 6, 13, 31, 2, 9, 17, 33, 4, 15, 24, 47, 8, 20, 40, 63)  # the razor's 16 prompts x 64 tokens


# Known to fail, and held so (strict: a pass is reported): on the H200 3 and 9 of the 16 prompts diverge at
# near-ties, the same counts with the GDN arms on (2026-12-01, `2026-12-01-gdn-flip-gates.json`), with the chunked
# kernel retired and the MoE experts by the kernel, the routed arm or the reference (2026-12-05); the bf16 evidence
# is the razor with the fp32 twin as second judge (the MODEL-QWEN3-NEXT spec)
@pytest.mark.xfail(strict=True, reason="bf16 near-ties diverge from transformers' generate (3 and 9 of 16 prompts)")
@pytest.mark.parametrize("model", ["moe-shared-expert", "d128"])
def test_bf16_razor_prompts_token_exact_and_the_oracles_own_razor(next_checkpoint, model: str) -> None:
    """Token-exact on the razor's prompts with the GDN arms on (graphed); then the razor of transformers' own greedy
    ids against its own teacher forcing, printed: where it fails, the oracle disagrees with itself."""
    path = next_checkpoint(model)
    prompts = default_prompts(211, 0, RAZOR_LENS)
    flags = FlagSnapshot.defaults().with_(**GDN_ARMS)
    kernels.reset_counts()
    ours = greedy_tokens(path, prompts, 64, torch.bfloat16, "cuda", flags)
    assert kernels.arms_ran("VT_GDN_KERNEL") > 0
    oracle = Oracle(path, torch.bfloat16, device="cuda")
    theirs = [oracle.greedy(p, 64) for p in prompts]
    result = token_gate(prompts, ours, theirs)
    own = near_tie_gate(
        prompts, theirs, [oracle.teacher_forced_logprobs(p, c) for p, c in zip(prompts, theirs)], 0.5, 5
    )
    print(
        f"{model}: {result.render().splitlines()[-1]}\n{model}: transformers' own ids, razor: {own.verdict}: {own.summary}"
    )
    assert result.passed, result.render()
