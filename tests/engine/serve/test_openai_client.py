"""The server through the real `openai` client: completions and chat, streamed and not, logprobs, n, stop, seed."""

from __future__ import annotations

import pytest

from engine import LLM, SamplingParams

from .conftest import Served

openai = pytest.importorskip("openai", reason="the tests drive the server with the openai client")


@pytest.fixture(scope="module")
def client(served: Served) -> object:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0, timeout=60)


def test_models_lists_the_served_model(client: object) -> None:
    models = client.models.list()  # type: ignore[attr-defined]
    assert [m.id for m in models.data] == ["tiny-qwen3"]


def test_a_completion_equals_the_offline_engine(client: object) -> None:
    out = client.completions.create(  # type: ignore[attr-defined]
        model="tiny-qwen3", prompt="Once upon a time", max_tokens=12, temperature=0, logprobs=3,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )  # fmt: skip
    offline = LLM(max_model_len=256).generate(  # its own engine: the served one belongs to the server's thread
        "Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=3)
    )[0]
    choice = out.choices[0]
    assert choice.text == offline.text and choice.finish_reason == "length"
    lp = choice.logprobs
    assert lp.tokens == [f"token_id:{t}" for t in offline.token_ids]
    assert lp.token_logprobs == [p[t].logprob for t, p in zip(offline.token_ids, offline.logprobs or [])]
    assert all(len(top) in (3, 4) for top in lp.top_logprobs)
    assert out.usage.completion_tokens == 12 and out.usage.prompt_tokens == len(offline.prompt_token_ids)


def test_streamed_completion_concatenates_to_the_whole(client: object) -> None:
    kw = {"model": "tiny-qwen3", "prompt": "The cat", "max_tokens": 16, "temperature": 0.9, "seed": 5}
    whole = client.completions.create(**kw)  # type: ignore[attr-defined]
    parts = list(client.completions.create(stream=True, **kw))  # type: ignore[attr-defined]
    assert len(parts) > 2
    assert "".join(p.choices[0].text for p in parts) == whole.choices[0].text
    assert parts[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_n_stop_and_seed(client: object) -> None:
    kw = {"model": "tiny-qwen3", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 1.0, "seed": 3}
    a = client.completions.create(n=3, **kw)  # type: ignore[attr-defined]
    b = client.completions.create(n=3, **kw)  # type: ignore[attr-defined]
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]  # the seed reproduces
    assert len({c.text for c in a.choices}) > 1
    text = a.choices[0].text
    stop = text[4:7]
    cut = client.completions.create(stop=[stop], n=1, **kw)  # type: ignore[attr-defined]
    assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"


def test_chat_renders_the_template_and_streams(client: object) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    whole = client.chat.completions.create(  # type: ignore[attr-defined]
        model="tiny-qwen3", messages=messages, max_tokens=10, temperature=0, logprobs=True, top_logprobs=2
    )
    choice = whole.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert all(len(t.top_logprobs) == 2 for t in choice.logprobs.content)
    assert choice.logprobs.content[0].top_logprobs[0].logprob >= choice.logprobs.content[0].logprob
    stream = client.chat.completions.create(  # type: ignore[attr-defined]
        model="tiny-qwen3", messages=messages, max_tokens=10, temperature=0, stream=True
    )
    parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(parts) == choice.message.content


def test_an_openai_client_sees_a_bad_request_as_400(client: object) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny-qwen3", prompt="x", temperature=-1)  # type: ignore[attr-defined]
    assert info.value.status_code == 400 and info.value.body["param"] == "temperature"
