"""``/v1/responses`` read as a chat request and answered in the Responses API's shapes (pure parts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from backends.base import Chunk, Usage
from serving.errors import BackendError, ClientError
from serving.responses_output import response_body, response_events, response_object
from serving.responses_protocol import ResponsesRequest, in_responses_terms


def _request(**fields: Any) -> ResponsesRequest:
    wire = ResponsesRequest.model_validate_json(orjson.dumps({"model": "m", "input": "hi", **fields}))
    wire.check()
    return wire


def test_input_and_instructions_become_chat_messages() -> None:
    [plain] = _request(input="What is 2+2?").to_generates("r")
    assert plain.kind == "chat" and plain.messages == [{"role": "user", "content": "What is 2+2?"}]
    items = [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "c"}]},
        {"role": "developer", "content": "d"},
    ]
    [turns] = _request(input=items, instructions="Be brief.").to_generates("r")
    assert turns.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "c"}]},
        {"role": "developer", "content": "d"},
    ]


def test_settings_map_to_chats_names() -> None:
    schema = {"type": "json_schema", "name": "sum", "schema": {"type": "object"}, "strict": True}
    wire = _request(
        max_output_tokens=7, temperature=0, top_p=0.5, user="u1", text={"format": schema},
        reasoning={"effort": "low"}, metadata={"team": "a"}, store=True, stream=True,
        stream_options={"include_obfuscation": False},
    )  # fmt: skip
    [request] = wire.to_generates("r")
    assert (request.params.max_tokens, request.params.temperature, request.params.top_p) == (7, 0, 0.5)
    chat_schema = {"name": "sum", "schema": {"type": "object"}, "strict": True}
    assert request.extra == {
        "user": "u1",
        "response_format": {"type": "json_schema", "json_schema": chat_schema},
        "reasoning_effort": "low",
    }  # fmt: skip
    assert wire.include_usage() is False  # usage always comes in response.completed
    [json_mode] = _request(text={"format": {"type": "json_object"}}).to_generates("r")
    assert json_mode.extra == {"response_format": {"type": "json_object"}}
    [plain] = _request(text={"format": {"type": "text"}}, store=False, metadata={}).to_generates("r")
    assert plain.extra == {}  # the Responses API's own fields never reach a chat upstream


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "stores no responses"),
        ({"conversation": "conv_1"}, "conversation", "stores no responses"),
        ({"tools": [{"type": "function", "name": "f"}]}, "tools", "/v1/chat/completions"),
        ({"tool_choice": "required"}, "tool_choice", "no tools"),
        ({"background": True}, "background", "not supported"),
        ({"include": ["message.output_text.logprobs"]}, "include", "not supported"),
        ({"top_logprobs": 2}, "top_logprobs", "/v1/chat/completions"),
        ({"logprobs": True}, "logprobs", "chat completions field"),
        ({"max_tokens": 5}, "max_tokens", "calls it max_output_tokens"),
        ({"messages": [{"role": "user", "content": "x"}]}, "messages", "calls it input"),
        ({"n": 2}, "n", "one output per request"),
        ({"truncation": "auto"}, "truncation", "not supported"),
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary", "not supported"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type", "text, json_object or json_schema"),
        ({"text": {"verbosity": "low"}}, "text.verbosity", "medium"),
        ({"input": []}, "input", "must not be an empty list"),
        ({"input": ["hi"]}, "input.0", "an input item"),
        ({"input": [{"role": "bot", "content": "x"}]}, "input.0.role", "got 'bot'"),
        ({"input": [{"role": "user"}]}, "input.0.content", "required"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "o"}]},
         "input.0.type", "only messages"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
         "input.0.content.0.type", "only input_text"),
        ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
         "input.0.content.0.text", "string"),
        ({"input": [{"role": "user", "content": []}]}, "input.0.content", "non-empty list"),
        ({"max_output_tokens": 0}, "max_output_tokens", "at least 1"),
    ],
)  # fmt: skip
def test_what_a_chat_request_cannot_carry_is_refused_by_name(
    fields: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(ClientError) as refused:
        _request(**fields).to_generates("r")
    assert refused.value.status == 400 and refused.value.param == param and says in refused.value.message


def test_a_backends_refusal_names_the_field_as_the_client_sent_it() -> None:
    refused = in_responses_terms(
        ClientError("'response_format' is not supported by X", param="response_format")
    )
    assert (refused.param, refused.message) == ("text.format", "'text.format' is not supported by X")
    assert in_responses_terms(ClientError("too long", param="max_tokens")).param == "max_output_tokens"
    assert in_responses_terms(ClientError("bad", param="temperature")).param == "temperature"


def test_the_answer_says_completed_or_incomplete_and_counts_usage_in_its_names() -> None:
    wire = _request(max_output_tokens=4, metadata={"team": "a"}, temperature=0)
    usage = Usage(5, 4, {"prompt_tokens_details": {"cached_tokens": 2}})
    done = response_body("abc", "m", 100, wire, "640", "stop", usage)
    assert (done["id"], done["object"], done["status"], done["incomplete_details"]) == (
        "resp_abc",
        "response",
        "completed",
        None,
    )
    [item] = done["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["status"] == "completed"
    assert item["content"] == [{"type": "output_text", "text": "640", "annotations": [], "logprobs": []}]
    assert done["usage"] == {
        "input_tokens": 5, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 9,
    }  # fmt: skip
    assert (done["store"], done["metadata"], done["max_output_tokens"], done["temperature"]) == (
        False,
        {"team": "a"},
        4,
        0,
    )
    cut = response_body("abc", "m", 100, wire, "64", "length", Usage(5, 4))
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["output"][0]["status"] == "incomplete"


def _events(chunks: list[Chunk], fail: Exception | None = None) -> tuple[list[dict[str, Any]], list[int]]:
    charged: list[int] = []

    async def source() -> AsyncIterator[Chunk]:
        for chunk in chunks:
            yield chunk
        if fail is not None:
            raise fail

    async def collect() -> list[bytes]:
        started = response_object("abc", "m", 100, _request())
        return [event async for event in response_events(source(), started, charged.append)]

    found = []
    for raw in asyncio.run(collect()):
        name, data = raw.decode().removesuffix("\n\n").split("\n")
        payload = orjson.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}"
        found.append(payload)
    return found, charged


def test_a_stream_is_the_responses_event_sequence() -> None:
    events, charged = _events([Chunk("6"), Chunk("4"), Chunk("0", "stop", Usage(5, 4))])
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["6", "4", "0"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert {e["item_id"] for e in events if "item_id" in e} == {"msg_abc"}
    completed = events[-1]["response"]
    assert completed["status"] == "completed" and completed["output"][0]["content"][0]["text"] == "640"
    assert completed["usage"]["output_tokens"] == 4 and charged == [9]


def test_a_stream_cut_by_max_output_tokens_ends_incomplete() -> None:
    events, _ = _events([Chunk("6"), Chunk("4", "length", Usage(5, 2))])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_stream_that_fails_ends_with_response_failed_and_what_it_had() -> None:
    events, charged = _events([Chunk("6")], fail=BackendError("upstream closed the stream"))
    assert [e["type"] for e in events][-2:] == ["response.output_text.delta", "response.failed"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and "upstream closed" in failed["error"]["message"]
    assert failed["output"][0]["content"][0]["text"] == "6" and failed["output"][0]["status"] == "incomplete"
    assert charged == [1]  # no usage came: one token per delta delivered
