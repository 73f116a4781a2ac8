"""``/v1/responses`` read as a chat request and answered in the Responses API's shapes (pure parts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from backends.base import Chunk, Completion, Usage
from serving.errors import BackendError, ClientError
from serving.responses_output import response_body, response_object
from serving.responses_protocol import ResponsesRequest, in_responses_terms
from serving.responses_stream import response_events


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
        ({"conversation": "conv_1", "previous_response_id": "resp_1"}, "conversation",
         "cannot be used together"),
        ({"conversation": {"name": "c"}}, "conversation", "an object with only its id"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type", "only function tools"),
        ({"tools": [{"type": "function"}]}, "tools.0.name", "must be a string"),
        ({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "mcp"}}, "tool_choice.type",
         "only function"),
        ({"tool_choice": "required"}, "tool_choice", "no tools"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id", "string"),
        ({"background": True, "store": False}, "background", "needs store: true"),
        ({"include": ["message.output_text.logprobs", "file_search_call.results"]}, "include.1",
         "only 'message.output_text.logprobs'"),
        ({"top_logprobs": 21}, "top_logprobs", "from 0 to 20"),
        ({"logprobs": True}, "logprobs", "asks with include"),
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
        ({"input": [{"type": "computer_call_output", "call_id": "c", "output": {}}]},
         "input.0.type", "only messages, function_call and function_call_output"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]},
         "input.0.content.0.file_id", "send image_url"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "u"}]}]},
         "input.0.content.0.type", "only input_text and input_image"),
        ({"input": [{"type": "function_call_output", "call_id": "c",
                     "output": [{"type": "input_image", "image_url": "u"}]}]},
         "input.0.output.0.type", "only input_text"),
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


ADD = {
    "type": "function",
    "name": "add",
    "description": "Add",
    "parameters": {"type": "object"},
    "strict": True,
}


def test_function_tools_and_calls_take_chats_shapes() -> None:
    items = [
        {"role": "user", "content": "12+34="},
        {"type": "reasoning", "id": "rs_1", "summary": []},  # replayed from an earlier answer: left out
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Adding."}]},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 12}'},
        {"type": "function_call", "call_id": "c2", "name": "add", "arguments": '{"b": 34}'},
        {"type": "function_call_output", "call_id": "c1", "output": "12"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "34"}]},
        {"type": "function_call", "call_id": "c3", "name": "add", "arguments": "{}"},
    ]
    wire = _request(
        input=items, tools=[ADD], tool_choice={"type": "function", "name": "add"}, parallel_tool_calls=False
    )
    [request] = wire.to_generates("r")

    def call(call_id: str, arguments: str) -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": "add", "arguments": arguments}}

    assert request.messages == [
        {"role": "user", "content": "12+34="},
        {"role": "assistant", "content": [{"type": "text", "text": "Adding."}],
         "tool_calls": [call("c1", '{"a": 12}'), call("c2", '{"b": 34}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "12"},
        {"role": "tool", "tool_call_id": "c2", "content": "34"},
        {"role": "assistant", "content": None, "tool_calls": [call("c3", "{}")]},
    ]  # fmt: skip
    chat_function = {"name": "add", "description": "Add", "parameters": {"type": "object"}, "strict": True}
    assert request.extra == {
        "tools": [{"type": "function", "function": chat_function}],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "parallel_tool_calls": False,
    }
    [auto] = _request(tools=[ADD], tool_choice="required").to_generates("r")
    assert auto.extra["tool_choice"] == "required"


def test_an_answer_with_reasoning_and_tool_calls_has_an_item_for_each() -> None:
    calls = [{"id": "call_9", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]
    result = Completion(
        "", "tool_calls", Usage(5, 4), message_extra={"reasoning_content": "Sum it.", "tool_calls": calls}
    )
    body = response_body("abc", "m", 100, _request(tools=[ADD]), result)
    assert body["status"] == "completed"
    assert body["output"] == [
        {
            "id": "rs_abc",
            "type": "reasoning",
            "status": "completed",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Sum it."}],
        },
        {
            "id": "fc_call_9",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_9",
            "name": "add",
            "arguments": '{"a": 1}',
        },
    ]  # fmt: skip  (no message: the answer is only a call)


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
    done = response_body("abc", "m", 100, wire, Completion("640", "stop", usage))
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
    cut = response_body("abc", "m", 100, wire, Completion("64", "length", Usage(5, 4)))
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


def test_a_streamed_tool_call_and_reasoning_get_their_own_items() -> None:
    chunks = [
        Chunk(extra={"reasoning_content": "Sum"}),
        Chunk(extra={"reasoning_content": " it."}),
        Chunk(
            extra={
                "tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "add"}}]
            }
        ),
        Chunk(extra={"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}),
        Chunk(extra={"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        Chunk(finish_reason="tool_calls", usage=Usage(5, 6)),
    ]
    events, charged = _events(chunks)
    assert [(e["type"], e.get("output_index")) for e in events] == [
        ("response.created", None), ("response.in_progress", None),
        ("response.output_item.added", 0), ("response.reasoning_text.delta", 0),
        ("response.reasoning_text.delta", 0),
        ("response.output_item.added", 1), ("response.function_call_arguments.delta", 1),
        ("response.function_call_arguments.delta", 1),
        ("response.reasoning_text.done", 0), ("response.output_item.done", 0),
        ("response.function_call_arguments.done", 1), ("response.output_item.done", 1),
        ("response.completed", None),
    ]  # fmt: skip
    assert events[5]["item"] == {"id": "fc_call_9", "type": "function_call", "status": "in_progress",
                                 "call_id": "call_9", "name": "add", "arguments": ""}  # fmt: skip
    assert events[10]["arguments"] == '{"a": 1}' and events[10]["name"] == "add"
    assert events[8]["text"] == "Sum it."
    [reasoning, call] = events[-1]["response"]["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Sum it."}]
    assert call["arguments"] == '{"a": 1}' and call["status"] == "completed"
    assert charged == [11]


def test_a_stream_with_no_output_ends_with_an_empty_message() -> None:
    events, _ = _events([Chunk(finish_reason="stop", usage=Usage(5, 1))])
    kinds = [e["type"] for e in events]
    assert kinds[2:] == [
        "response.output_item.added", "response.content_part.added", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed",
    ]  # fmt: skip
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == ""


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


def test_logprobs_are_asked_of_a_backend_in_chats_names() -> None:
    [asked] = _request(include=["message.output_text.logprobs"]).to_generates("r")
    assert asked.extra == {"logprobs": True, "top_logprobs": 0}
    [top] = _request(top_logprobs=3).to_generates("r")
    assert top.extra == {"logprobs": True, "top_logprobs": 3}
    [none] = _request(top_logprobs=0).to_generates("r")
    assert "logprobs" not in none.extra


def test_an_input_image_becomes_chats_image_url_part() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}
    text = {"type": "input_text", "text": "what is it?"}
    wire = _request(input=[{"role": "user", "content": [text, image]}])
    assert wire.message_dicts() == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            ],
        }
    ]
