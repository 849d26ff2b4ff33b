"""The checkpoint's chat template (tokenizer_config.json's `chat_template`) rendered with jinja2, as
transformers renders it: a sandboxed environment, trim_blocks and lstrip_blocks, `raise_exception`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    pass


def load_chat_template(model_dir: Path) -> tuple[str | None, dict[str, str]]:
    """The template and the special tokens a template may name (bos_token, eos_token, ...)."""
    path = model_dir / "tokenizer_config.json"
    if not path.is_file():
        return None, {}
    config = json.loads(path.read_text())
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    special = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}
    return (template if isinstance(template, str) else None), special


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


def render_chat(
    template: str, messages: list[dict[str, Any]], special: dict[str, str], add_generation_prompt: bool = True
) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    try:
        return env.from_string(template).render(
            messages=[text_content(m) for m in messages], add_generation_prompt=add_generation_prompt, **special
        )
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ChatTemplateError(f"the chat template failed: {exc}") from exc


def text_content(message: dict[str, Any]) -> dict[str, Any]:
    """A message whose content is OpenAI's list of parts, as one string (text parts only: this engine reads
    no images or audio)."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
        raise ChatTemplateError("messages: only text content parts are supported")
    return {**message, "content": "".join(str(p.get("text", "")) for p in content)}
