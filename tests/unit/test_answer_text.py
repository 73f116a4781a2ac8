"""Shadow comparison reads tool calls: ``answer_text`` and ``StreamedAnswer`` (pure)."""

from __future__ import annotations

from typing import Any

from serving.routing.answer_text import StreamedAnswer, answer_text
from serving.routing.compare import Answer, compare


def _call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_content_alone_is_the_text() -> None:
    assert answer_text("640", None) == "640"
    assert answer_text("640", {"refusal": "no"}) == "640"


def test_different_calls_with_no_content_differ() -> None:
    add = answer_text("", {"tool_calls": [_call("add", '{"a": 12, "b": 34}', "call-1")]})
    other = answer_text("", {"tool_calls": [_call("add", '{"a": 12, "b": 35}', "call-1")]})
    assert add == '\nadd({"a": 12, "b": 34})'
    assert compare(Answer(200, add, 0.1), Answer(200, other, 0.1)).differs
    # the same call under another engine's id is the same answer
    same = answer_text("", {"tool_calls": [_call("add", '{"a": 12, "b": 34}', "chatcmpl-tool-9")]})
    assert not compare(Answer(200, add, 0.1), Answer(200, same, 0.1)).differs


def test_a_streamed_answer_assembles_its_calls_like_the_whole_one() -> None:
    streamed = StreamedAnswer()
    streamed.add(
        "", {"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "add"}}]}
    )
    streamed.add("", {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 12, '}}]})
    streamed.add(
        "", {"tool_calls": [{"index": 1, "id": "d", "function": {"name": "mul", "arguments": "{}"}}]}
    )
    streamed.add("", {"tool_calls": [{"index": 0, "function": {"arguments": '"b": 34}'}}]})
    streamed.add("", None)
    whole = answer_text(
        "", {"tool_calls": [_call("add", '{"a": 12, "b": 34}', "c"), _call("mul", "{}", "d")]}
    )
    assert streamed.text() == whole


def test_a_streamed_text_answer_is_its_text() -> None:
    streamed = StreamedAnswer()
    for piece in ("6", "4", "0"):
        streamed.add(piece, None)
    assert streamed.text() == "640"
