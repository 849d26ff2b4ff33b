"""The chat template rendered as transformers renders it, and LLM.chat on it."""

from __future__ import annotations

import pytest

from engine import LLM, SamplingParams
from engine.chat import ChatTemplateError, load_chat_template, render_chat
from engine.llm import TINY_MODEL

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "Tell me a story"},
]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_the_template_renders_as_transformers_renders_it(add_generation_prompt: bool) -> None:
    transformers = pytest.importorskip("transformers", reason="transformers is the oracle")
    tok = transformers.AutoTokenizer.from_pretrained(str(TINY_MODEL))
    want = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=add_generation_prompt)
    template, special = load_chat_template(TINY_MODEL)
    assert template is not None
    assert render_chat(template, MESSAGES, special, add_generation_prompt) == want


def test_a_template_that_raises_is_a_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError, match="the chat template refused the messages: no system role"):
        render_chat("{{ raise_exception('no system role') }}", MESSAGES, {})
    with pytest.raises(ChatTemplateError, match="the chat template failed"):  # the sandbox refuses internals
        render_chat("{{ messages.__class__.__mro__[1].__subclasses__() }}", MESSAGES, {})


def test_llm_chat_generates_from_the_rendered_conversation() -> None:
    llm = LLM(max_model_len=128)
    sp = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    template, special = load_chat_template(TINY_MODEL)
    assert template is not None
    (out,) = llm.chat(MESSAGES[:2], sp)
    assert out.token_ids == llm.generate(render_chat(template, MESSAGES[:2], special), sp)[0].token_ids
    assert len(llm.chat([MESSAGES[:2], MESSAGES], sp)) == 2
