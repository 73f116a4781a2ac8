"""A body that fits no member of a union field gets a 400 a person can act on: the error of the
member that matched the value's shape, at its own place, or else what the field takes."""

from __future__ import annotations

import pytest

from serving.api.wire_errors import parse_wire
from serving.errors import ClientError
from serving.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields

_CHAT = '{"model": "m", "messages": [{"role": "user", "content": %s}]%s}'
_PROMPTS = "a string, a list of strings, a list of integers or a list of lists of integers"

CASES: list[tuple[type[SamplingFields], str, str, str]] = [
    # (wire model, body, param, message)
    (
        CompletionRequest,
        '{"model": "m", "prompt": {"a": 1}}',
        "prompt",
        f"prompt: must be {_PROMPTS}; got an object",
    ),
    (CompletionRequest, '{"model": "m", "prompt": 5}', "prompt", f"prompt: must be {_PROMPTS}; got a number"),
    (CompletionRequest, '{"model": "m", "prompt": null}', "prompt", f"prompt: must be {_PROMPTS}; got null"),
    # every list member goes one level in: no single one to blame
    (
        CompletionRequest,
        '{"model": "m", "prompt": [1, true]}',
        "prompt",
        f"prompt: must be {_PROMPTS}; got a list",
    ),
    # only the list of token-id lists reaches the bad id
    (
        CompletionRequest,
        '{"model": "m", "prompt": [[1, "a"]]}',
        "prompt.0.1",
        "prompt.0.1: Input should be a valid integer",
    ),
    (CompletionRequest, '{"model": "m"}', "prompt", "prompt: Field required"),
    (
        ChatCompletionRequest,
        _CHAT % ('[{"text": "a"}]', ""),
        "messages.0.content.0.type",
        "messages.0.content.0.type: Field required",
    ),
    (
        ChatCompletionRequest,
        _CHAT % ('[{"type": "text", "text": 5}]', ""),
        "messages.0.content.0.text",
        "messages.0.content.0.text: Input should be a valid string",
    ),
    (
        ChatCompletionRequest,
        _CHAT % ("5", ""),
        "messages.0.content",
        "messages.0.content: must be a string or a list of content parts; got a number",
    ),
    (
        ChatCompletionRequest,
        _CHAT % ('"a"', ', "stop": [5]'),
        "stop.0",
        "stop.0: Input should be a valid string",
    ),
    (
        ChatCompletionRequest,
        _CHAT % ('"a"', ', "stop": 5'),
        "stop",
        "stop: must be a string or a list of strings; got a number",
    ),
    # pydantic says "a valid dictionary or instance of StreamOptions"; this was once "the request
    # body must be a JSON object", which pointed at the wrong thing
    (
        ChatCompletionRequest,
        _CHAT % ('"a"', ', "stream": true, "stream_options": "x"'),
        "stream_options",
        "stream_options: must be an object",
    ),
    (
        ChatCompletionRequest,
        '{"model": "m", "messages": ["hi"]}',
        "messages.0",
        "messages.0: must be an object",
    ),
    # pydantic: "List should have at least 1 item after validation, not 0"
    (ChatCompletionRequest, '{"model": "m", "messages": []}', "messages", "messages: must not be empty"),
    (
        ChatCompletionRequest,
        _CHAT % ("[5]", ""),
        "messages.0.content.0",
        "messages.0.content.0: must be an object",
    ),
]


@pytest.mark.parametrize(("wire", "body", "param", "message"), CASES, ids=[c[1] for c in CASES])
def test_union_fields_are_refused_with_a_message_that_fits_what_was_sent(
    wire: type[SamplingFields], body: str, param: str, message: str
) -> None:
    with pytest.raises(ClientError) as refused:
        parse_wire(wire, body.encode())
    assert (refused.value.param, str(refused.value), refused.value.code) == (param, message, "invalid_value")
    assert refused.value.status == 400


def test_a_body_that_is_no_object_says_so() -> None:
    with pytest.raises(ClientError) as refused:
        parse_wire(ChatCompletionRequest, b"[1, 2]")
    assert (str(refused.value), refused.value.param) == ("the request body must be a JSON object", None)
