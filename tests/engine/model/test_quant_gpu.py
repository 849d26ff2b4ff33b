"""On the GPU, in bf16: each tiny quantized checkpoint decodes (graphed) token-exact against transformers on
its dequantized twin, under the default flags and with each dequant arm on; the kernel table's counters prove
the arm under test ran."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from lab.drive import greedy_tokens
from lab.gates.oracle import Oracle
from lab.gates.tokens import default_prompts, token_gate

pytestmark = pytest.mark.gpu

LENS = (1, 5, 17, 23)
NEW = 12
# arm -> (flag settings, the (op, arm) of the kernel table that must run, with "{m}" the method family)
ARMS: dict[str, tuple[dict[str, bool], tuple[str, str] | None]] = {
    "defaults": ({}, None),
    "dequant-kernel": ({"VT_DEQUANT_KERNEL": True, "VT_DEQUANT_GEMV": False}, ("dequant_{m}", "cuda")),  # M > 1
    "dequant-gemv": ({"VT_DEQUANT_KERNEL": True, "VT_DEQUANT_GEMV": True}, ("{m}_linear", "gemv")),  # M = 1
}
# the 4-bit methods the CUDA arms take (8-bit GPTQ runs the torch reference on the GPU too)
METHODS = ("awq", "gptq", "gptq-act-order", "gptq-v2", "nvfp4", "nvfp4-ct")


def family(method: str) -> str:
    return method.split("-")[0]


@pytest.mark.parametrize("arm", list(ARMS))
@pytest.mark.parametrize("method", METHODS)
def test_bf16_greedy_ids_equal_transformers_on_the_gpu(quant_pair, method: str, arm: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU token gate needs one")
    settings, entry = ARMS[arm]
    quant, dense = quant_pair(method)
    prompts = default_prompts(211, 3, LENS)
    kernels.reset_counts()
    flags = FlagSnapshot.defaults().with_(**settings)

    def run(batch: list[list[int]]) -> list[list[int]]:
        return greedy_tokens(quant, batch, NEW, torch.bfloat16, "cuda", flags)

    # The fused GEMV is the M = 1 arm: a batch of three decodes at M = 3 and takes dequant-then-GEMM, so that
    # arm's gate decodes each prompt alone.
    solo = arm == "dequant-gemv"
    tokens = [run([p])[0] for p in prompts] if solo else run(prompts)
    oracle = Oracle(dense, torch.bfloat16, "cuda")
    result = token_gate(prompts, tokens, [oracle.greedy(p, NEW) for p in prompts])
    assert result.passed, result.render()
    if entry is not None:
        op, name = entry[0].format(m=family(method)), entry[1]
        assert kernels.counts().ran[(op, name)], f"{arm}: {op}/{name} never ran\n{kernels.render_counts()}"


@pytest.mark.parametrize("method", ("awq", "gptq-act-order", "nvfp4"))  # one checkpoint per GEMV kernel family
def test_the_fused_gemv_passes_the_near_tie_razor_at_batch_one(quant_pair, method: str) -> None:
    """The flip protocol's razor for VT_DEQUANT_GEMV: the razor's default prompts, each decoded alone (the
    GEMV is the M = 1 arm), held to transformers on the dequantized twin; the counter proves the arm ran."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the fused GEMV runs only on a GPU")
    from lab.gates import harness

    quant, dense = quant_pair(method)
    prompts = default_prompts(211, 5)
    new = 32
    kernels.reset_counts()
    flags = FlagSnapshot.defaults().with_(VT_DEQUANT_GEMV=True)
    ours = [greedy_tokens(quant, [p], new, torch.bfloat16, "cuda", flags)[0] for p in prompts]
    op = f"{family(method)}_linear"
    assert kernels.counts().ran[(op, "gemv")], f"{op}/gemv never ran\n{kernels.render_counts()}"
    setup = harness.Setup(quant, prompts, new, "bfloat16", "cuda", oracle_dir=dense)
    result = harness.neartie(setup, ours=ours)
    assert result.passed, result.render()
