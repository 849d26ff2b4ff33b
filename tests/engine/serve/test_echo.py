"""Completions' `echo`, as OpenAI's: the prompt's text before each choice's, and with logprobs the prompt's tokens
(null for the first) before the generated ones; streamed, the first chunk of each choice carries it."""

from __future__ import annotations

import json
import math
import urllib.request
from typing import Any

from engine import LLM, SamplingParams

from .conftest import Served

PROMPT = [11, 200, 37, 5, 90, 140]
BODY = {"prompt": PROMPT, "max_tokens": 5, "temperature": 0, "ignore_eos": True}


def post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def stream(url: str, body: dict[str, Any]) -> list[Any]:
    req = urllib.request.Request(
        url, json.dumps({**body, "stream": True}).encode(), {"Content-Type": "application/json"}
    )
    chunks = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            data = line.decode().strip().removeprefix("data: ")
            if data and data != "[DONE]":
                chunks.append(json.loads(data))
    return chunks


def test_echo_puts_the_prompt_text_before_the_completion(served: Served) -> None:
    url = served.url + "/v1/completions"
    plain = post(url, BODY)["choices"][0]
    echoed = post(url, {**BODY, "echo": True, "n": 2})["choices"]
    head = served.llm.tokenizer.decode(PROMPT, skip_special_tokens=False)
    assert head and all(c["text"] == head + plain["text"] for c in echoed)
    assert all(c["token_ids"] == plain["token_ids"] for c in echoed)  # generated ids only, as before
    words = post(url, {**BODY, "prompt": "Once upon", "echo": True})["choices"][0]["text"]
    assert words.startswith("Once upon") and len(words) > len("Once upon")
    parts = stream(url, {**BODY, "echo": True})
    assert parts[0]["choices"][0]["text"].startswith(head)
    assert "".join(c["text"] for p in parts for c in p["choices"]) == head + plain["text"]


def test_echo_with_logprobs_puts_the_prompts_logprobs_first(served: Served) -> None:
    url = served.url + "/v1/completions"
    plain = post(url, {**BODY, "logprobs": 2})["choices"][0]["logprobs"]
    got = post(url, {**BODY, "logprobs": 2, "echo": True})["choices"][0]
    lp, p = got["logprobs"], len(PROMPT)
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == p + 5
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # nothing predicts the first
    # the engine's own prompt logprobs, from an LLM of this test's (the served one belongs to the server's thread)
    want = LLM(max_model_len=64).generate([PROMPT], SamplingParams(max_tokens=1, prompt_logprobs=2))[0].prompt_logprobs
    assert want is not None
    for j in range(1, p):
        assert math.isclose(lp["token_logprobs"][j], want[j][PROMPT[j]].logprob, abs_tol=1e-6)  # type: ignore[index]
        assert 2 <= len(lp["top_logprobs"][j]) <= 3  # the top 2, and the prompt's own token
    assert lp["token_logprobs"][p:] == plain["token_logprobs"] and lp["tokens"][p:] == plain["tokens"]
    head = served.llm.tokenizer.decode(PROMPT, skip_special_tokens=False)
    assert lp["text_offset"][0] == 0 and lp["text_offset"][p] == len(head)
    assert lp["text_offset"][p:] == [o + len(head) for o in plain["text_offset"]]
    parts = stream(url, {**BODY, "logprobs": 2, "echo": True})
    streamed = [t for part in parts for c in part["choices"] if c["logprobs"] for t in c["logprobs"]["token_logprobs"]]
    assert streamed == lp["token_logprobs"]
