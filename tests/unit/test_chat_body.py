"""The chat completion body the gateway writes from a backend's answer (serving/api)."""

from __future__ import annotations

from typing import Any

import orjson

from serving.api.answer_bodies import chat_body

CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}


def _message(text: str, extra: dict[str, Any] | None) -> dict[str, Any]:
    body = orjson.loads(chat_body("r1", "m", 0, text, "tool_calls", {}, None, extra))
    message: dict[str, Any] = body["choices"][0]["message"]
    return message


def test_a_bare_tool_call_has_null_content_as_openai_sends_it() -> None:
    """Clients tell a tool call from an answer by ``content is None``."""
    assert _message("", {"tool_calls": [CALL]}) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [CALL],
    }


def test_text_beside_a_tool_call_and_a_plain_answer_keep_their_content() -> None:
    assert _message("let me add", {"tool_calls": [CALL]})["content"] == "let me add"
    assert _message("", None) == {"role": "assistant", "content": ""}
    assert _message("", {"reasoning_content": "hm"})["content"] == ""
