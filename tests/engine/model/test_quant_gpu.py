"""On the GPU, in bf16: each tiny quantized checkpoint decodes (graphed) token-exact against transformers on
its dequantized twin, under the default flags and with each dequant arm on; a spy on the CUDA binding proves
the arm under test ran."""
from __future__ import annotations

import pytest
import torch

from engine.gates.oracle import Oracle
from engine.gates.tokens import default_prompts, token_gate
from engine.runner import Runner

pytestmark = pytest.mark.gpu

LENS = (1, 5, 17, 23)
NEW = 12
# arm -> (flag settings, the engine.cuda.quant entry point that arm must call, with "{m}" the method family)
ARMS = {
    "defaults": ({}, None),
    "dequant-kernel": ({"VT_DEQUANT_KERNEL": "1", "VT_DEQUANT_GEMV": "0"}, "dequant_{m}"),  # prefill: M > 1
    "dequant-gemv": ({"VT_DEQUANT_KERNEL": "1", "VT_DEQUANT_GEMV": "1"}, "{m}_linear"),  # decode: M = 1
}
# the 4-bit methods the CUDA arms take (8-bit GPTQ runs the torch reference on the GPU too)
METHODS = ("awq", "gptq", "gptq-act-order", "gptq-v2", "nvfp4", "nvfp4-ct")


def family(method: str) -> str:
    return method.split("-")[0]


@pytest.mark.parametrize("arm", list(ARMS))
@pytest.mark.parametrize("method", METHODS)
def test_bf16_greedy_ids_equal_transformers_on_the_gpu(quant_pair, monkeypatch, method: str, arm: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU token gate needs one")
    from engine.cuda import quant as cuda_quant

    settings, entry = ARMS[arm]
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    calls: list[str] = []
    if entry is not None:
        fn_name = entry.format(m=family(method))
        real = getattr(cuda_quant, fn_name)
        monkeypatch.setattr(cuda_quant, fn_name, lambda *a, **k: calls.append(fn_name) or real(*a, **k))
    quant, dense = quant_pair(method)
    prompts = default_prompts(211, 3, LENS)
    ours = Runner(quant, torch.bfloat16, "cuda", max_batch=len(prompts), max_model_len=64).generate(prompts, NEW)
    oracle = Oracle(dense, torch.bfloat16, "cuda")
    result = token_gate(prompts, ours.tokens, [oracle.greedy(p, NEW) for p in prompts])
    assert result.passed, result.render()
    if entry is not None:
        assert calls, f"{arm}: engine.cuda.quant.{entry.format(m=family(method))} never ran"
