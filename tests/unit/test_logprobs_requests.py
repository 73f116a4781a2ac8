"""Which logprob requests are valid, and how they travel: wire model → adapters → SSE.

Pure parts only: the field validation (``backends/openai_fields.py``), the completions
prompt shapes (``serving/protocol.py``), the OpenAI adapter's SSE parsing of upstream
logprobs (``backends/openai_http.py``) and the gateway's SSE writer (``serving/api``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from backends.base import Chunk, GenerateRequest, SamplingParams
from backends.openai_fields import LogprobOptions, check_extra, logprob_options
from backends.openai_http import OpenAIHttpBackend
from backends.settings import OpenAIHttpSettings, TritonSettings
from backends.triton import TritonBackend
from backends.triton_tensors import plan_request
from serving.api.openai_routes import _sse_events
from serving.errors import ClientError
from serving.protocol import ChatCompletionRequest, CompletionRequest


@pytest.mark.parametrize(
    ("kind", "extra", "expected"),
    [
        ("completion", {}, LogprobOptions()),
        ("completion", {"logprobs": 0}, LogprobOptions(top=0)),
        ("completion", {"logprobs": 5, "echo": True}, LogprobOptions(top=5, echo=True)),
        ("completion", {"echo": True, "logprobs": None}, LogprobOptions(echo=True)),
        ("chat", {"logprobs": True}, LogprobOptions(top=0)),
        ("chat", {"logprobs": True, "top_logprobs": 20}, LogprobOptions(top=20)),
        ("chat", {"logprobs": False}, LogprobOptions()),
    ],
)
def test_valid_logprob_requests(kind: str, extra: dict[str, Any], expected: LogprobOptions) -> None:
    options, rest = logprob_options(kind, {**extra, "seed_text": 1})
    assert options == expected and rest == {"seed_text": 1}


@pytest.mark.parametrize(
    ("kind", "extra", "param"),
    [
        ("completion", {"logprobs": 6}, "logprobs"),
        ("completion", {"logprobs": -1}, "logprobs"),
        ("completion", {"logprobs": True}, "logprobs"),
        ("completion", {"logprobs": 1.0}, "logprobs"),
        ("completion", {"echo": 1}, "echo"),
        ("chat", {"logprobs": 1}, "logprobs"),
        ("chat", {"top_logprobs": 2}, "top_logprobs"),
        ("chat", {"logprobs": False, "top_logprobs": 0}, "top_logprobs"),
        ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_bad_logprob_requests_name_the_field(kind: str, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(ClientError) as caught:
        logprob_options(kind, extra)
    assert caught.value.param == param and caught.value.status == 400


def test_logprobs_zero_is_a_request_not_the_neutral_false() -> None:
    assert check_extra({"logprobs": False, "echo": False, "top_logprobs": 0}, "X") == {}
    with pytest.raises(ClientError, match="'logprobs' is not supported by X") as caught:
        check_extra({"logprobs": 0}, "X")
    assert caught.value.param == "logprobs"


def test_triton_variants_refuse_logprobs_with_a_400_naming_the_field() -> None:
    params = SamplingParams(max_tokens=4)
    request = GenerateRequest("completion", params, prompt="1+1=", extra={"logprobs": 1})
    with pytest.raises(ClientError, match="'logprobs' is not supported by Triton") as caught:
        plan_request("turnout", request, "1+1=", default_max_tokens=16)
    assert caught.value.param == "logprobs"


def test_triton_variants_refuse_token_id_prompts() -> None:
    backend = TritonBackend("t", TritonSettings(url="http://127.0.0.1:9", model="turnout_tiny"))
    request = GenerateRequest("completion", SamplingParams(max_tokens=4), prompt_ids=[1, 22])
    with pytest.raises(ClientError, match="token-id prompts") as caught:
        backend.prompt(request)
    assert caught.value.param == "prompt"


def completion(body: dict[str, Any]) -> CompletionRequest:
    wire = CompletionRequest.model_validate_json(orjson.dumps({"model": "m", **body}))
    wire.check()
    return wire


def test_completion_prompts_text_ids_and_batches() -> None:
    (text,) = completion({"prompt": "hi"}).to_generates("r")
    assert text.prompt == "hi" and text.prompt_ids is None and text.request_id == "r"
    (ids,) = completion({"prompt": [1, 22, 23]}).to_generates("r")
    assert ids.prompt is None and ids.prompt_ids == [1, 22, 23]
    batch = completion({"prompt": [[1, 2], [3]], "echo": True, "logprobs": 1}).to_generates("r")
    assert [g.prompt_ids for g in batch] == [[1, 2], [3]] and [g.request_id for g in batch] == ["r-0", "r-1"]
    assert batch[0].extra == {"echo": True, "logprobs": 1}
    assert [g.prompt for g in completion({"prompt": ["a", "b"]}).to_generates("r")] == ["a", "b"]


def test_completion_scoring_and_prompt_errors() -> None:
    assert completion({"prompt": "x", "max_tokens": 0, "echo": True}).sampling().max_tokens == 0
    for body, param in [
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "logprobs": 7}, "logprobs"),
        ({"prompt": "x", "echo": "yes"}, "echo"),
    ]:
        with pytest.raises(ClientError) as caught:
            completion(body)
        assert caught.value.param == param
    with pytest.raises(ClientError) as caught:
        completion({"prompt": []}).to_generates("r")
    assert caught.value.param == "prompt"


def test_chat_checks_top_logprobs_needs_logprobs() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}
    wire = ChatCompletionRequest.model_validate_json(orjson.dumps(body))
    with pytest.raises(ClientError) as caught:
        wire.check()
    assert caught.value.param == "top_logprobs"


# ---- the OpenAI adapter keeps an upstream's streamed logprobs ---------------------------------


async def _bytes(*events: dict[str, Any] | str) -> AsyncIterator[bytes]:
    for event in events:
        data = event if isinstance(event, str) else orjson.dumps(event).decode()
        yield f"data: {data}\n\n".encode()


def _backend() -> OpenAIHttpBackend:
    return OpenAIHttpBackend("up", OpenAIHttpSettings(base_url="http://127.0.0.1:9/v1", model="m"))


def _content(token: str) -> dict[str, Any]:
    return {"content": [{"token": token, "logprob": -0.5, "bytes": list(token.encode()), "top_logprobs": []}]}


async def test_streamed_chat_logprobs_pass_through_including_the_finish_chunk() -> None:
    events = _bytes(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}]},
        {"choices": [{"index": 0, "delta": {"content": "6"}, "logprobs": _content("6")}]},
        {"choices": [{"index": 0, "delta": {}, "logprobs": _content("</s>"), "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        "[DONE]",
    )
    chunks = [chunk async for chunk in _backend()._events(events, chat=True)]
    assert [(c.text, c.finish_reason, c.logprobs) for c in chunks] == [
        ("6", None, _content("6")),
        ("", "stop", _content("</s>")),
    ]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2


async def test_a_logprobs_only_chunk_is_kept_and_a_late_one_merged_into_the_finish() -> None:
    piece = {"tokens": ["\ufffd"], "token_logprobs": [-1.0], "top_logprobs": [{}], "text_offset": [0]}
    tail = {"tokens": ["x"], "token_logprobs": [-2.0], "top_logprobs": [{}], "text_offset": [1]}
    events = _bytes(
        {"choices": [{"index": 0, "text": "", "logprobs": piece}]},
        {"choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}]},
        {"choices": [{"index": 0, "text": "x", "logprobs": tail}]},
        "[DONE]",
    )
    chunks = [chunk async for chunk in _backend()._events(events, chat=False)]
    assert chunks[0].logprobs == piece and chunks[0].text == ""
    assert chunks[1].text == "x" and chunks[1].logprobs == tail and chunks[1].finish_reason == "length"


# ---- the gateway's SSE writer puts each chunk's logprobs on the event with its text ------------


async def _chunks(*chunks: Chunk) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk


async def test_sse_events_carry_each_chunks_logprobs_once() -> None:
    stream = _chunks(
        Chunk("6", logprobs=_content("6")),
        Chunk("", logprobs=_content("\ufffd")),  # a token whose text is held back
        Chunk("4", finish_reason="length", logprobs=_content("4")),
        Chunk("", finish_reason="stop", logprobs=_content("</s>")),
    )
    events = [e async for e in _sse_events(stream, {"id": "x"}, chat=True, include_usage=False)]
    payloads = [orjson.loads(e[len(b"data: ") :]) for e in events[:-1]]
    choices = [p["choices"][0] for p in payloads]
    assert choices[0]["logprobs"] is None and choices[0]["delta"] == {"role": "assistant", "content": ""}
    got = [(c["delta"].get("content"), c["finish_reason"], c["logprobs"]) for c in choices[1:]]
    assert got == [
        ("6", None, _content("6")),
        ("", None, _content("\ufffd")),
        ("4", None, _content("4")),
        (None, "length", None),
        (None, "stop", _content("</s>")),
    ]
    assert events[-1] == b"data: [DONE]\n\n"
