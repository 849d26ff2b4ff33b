"""`gate neartie --served URL` / `--outputs FILE`: the razor from a server's outputs passes on the engine's own
server, fails on servers whose logits are seeded with a bug, and says what it cannot judge without top-k."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from engine.llm import LLM
from lab.cli import main
from lab.gates.served import ServedRun, parse_choice, served_gate

pytest.importorskip("fastapi", reason="the served razor's tests start the engine's server")
pytest.importorskip("transformers", reason="the oracle is transformers")

from tests.engine.serve.conftest import serve  # noqa: E402

ARGS = ["gate", "neartie", "--prompt-lens", "1,6,13,31", "--max-new-tokens", "8", "--device", "cpu"]


def bugged(scale: float = 1.0, bias_token: int | None = None) -> LLM:
    """An engine whose logits are wrong: scaled (every argmax kept) or one token's logit raised."""
    llm = LLM(max_model_len=128)
    model = llm.runner.model
    real = model.compute_logits

    def wrong(hidden: torch.Tensor, flags: object) -> torch.Tensor:
        logits = real(hidden, flags) * scale
        if bias_token is not None:
            logits[:, bias_token] += 4.0
        return logits

    model.compute_logits = wrong  # type: ignore[method-assign]  # the seeded bug is the server's, not the gate's
    return llm


@pytest.fixture(scope="module")
def own() -> Iterator[str]:
    yield from (s.url for s in serve(LLM(max_model_len=128)))


def test_the_engines_own_server_passes(own: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "served.jsonl"
    assert main([*ARGS, "--served", own, "--save-outputs", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "neartie: PASS: 32 positions over 4 prompts: 32 exact" in out and "0 beyond" in out, out
    # the saved outputs judge the same offline
    assert main([*ARGS, "--outputs", str(saved)]) == 0
    # and without their top-k, only the tokens are judged, and the result says so
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    saved.write_text("".join(json.dumps({**r, "top_logprobs": None}) + "\n" for r in rows))
    assert main([*ARGS, "--outputs", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "the server returned no top_logprobs: only its tokens were judged. Not judged: its own distribution" in out


@pytest.mark.parametrize(("scale", "bias", "says"), [(1.5, None, "beyond"), (1.0, 7, "outside top-")])
def test_a_server_with_a_logits_bug_fails(scale: float, bias: int | None, says: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    for s in serve(bugged(scale, bias)):
        assert main([*ARGS, "--served", s.url]) == 1
    out = capsys.readouterr().out
    assert "neartie: FAIL" in out and says in out, out
    if bias is None:  # every argmax kept: the tokens alone pass; only the served logprobs show the bug
        assert "32 exact" in out


def test_tokens_as_text_cannot_be_judged() -> None:
    with pytest.raises(ValueError, match="text does not map back to token ids one to one"):
        parse_choice([1], {"text": "hi", "logprobs": {"tokens": ["hi"], "top_logprobs": [{"hi": -0.1}]}})


def test_no_tokens_is_not_a_pass() -> None:
    result = served_gate([ServedRun([1], [], None)], [torch.zeros(0, 8)], 0.5, 5, 0.01)
    assert (result.verdict, result.summary) == ("FAIL", "the server returned no tokens: nothing was judged")
