"""Chat messages → one prompt string, with the model's own Jinja chat template.

On the request path of every adapter that sends text rather than messages to its engine
(the messages arrive as the client sent them; content parts are joined here):
``backends/embedded.py`` (then tokenized in-process) and ``backends/triton.py`` (then sent as
``text_input``). Rendered in Jinja's immutable sandbox, as Hugging Face's
``apply_chat_template`` does, with ``bos_token`` / ``eos_token`` and ``add_generation_prompt``.
OpenAI's ``developer`` role (its newer name for ``system``) reaches a template that never names
it as ``system``, rather than as a role the model was never trained on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from serving.errors import ClientError


class ChatTemplate:
    """One compiled chat template and the special-token strings it may use."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._template = ImmutableSandboxedEnvironment().from_string(source)
        self._knows_developer = "developer" in source

    @classmethod
    def from_folder(cls, folder: Path) -> ChatTemplate | None:
        """The template of a tokenizer folder (``tokenizer_config.json``), or None if it has none."""
        config = json.loads((folder / "tokenizer_config.json").read_bytes())
        source = config.get("chat_template")
        if not isinstance(source, str) or not source:
            return None
        return cls(source, _token_text(config.get("bos_token")), _token_text(config.get("eos_token")))

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The prompt for ``messages`` as the client sent them; content parts other than text
        (an image) are a 400, since this template's model reads text only."""
        try:
            flat = text_messages(messages)
            if not self._knows_developer:
                flat = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in flat]
            return self._template.render(
                messages=flat,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as exc:
            message = f"the messages do not fit the model's chat template: {exc}"
            raise ClientError(message, param="messages") from None


def text_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each content as one string: text parts joined by newlines (as vLLM
    joins them for a template that takes a string, so a vLLM variant and this engine read the
    same prompt), no content as ""."""
    flat = []
    for number, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, str):
            flat.append(message)
            continue
        texts = []
        for index, part in enumerate(content or ()):
            if part.get("type") != "text":
                raise ClientError(
                    f"content part type '{part.get('type')}' is not supported by this model",
                    param=f"messages.{number}.content.{index}.type",
                    code="unsupported_content",
                )
            if not isinstance(part.get("text"), str):
                raise ClientError(
                    "a text content part needs its text as a string",
                    param=f"messages.{number}.content.{index}.text",
                    code="invalid_value",
                )
            texts.append(part["text"])
        flat.append({**message, "content": "\n".join(texts)})
    return flat


def _token_text(value: Any) -> str:
    """A special token as tokenizer_config.json writes it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""
