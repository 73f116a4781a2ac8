"""Table-driven bad input: each case gets the OpenAI error body and the right 4xx,
and the server keeps serving afterwards."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from tests.integration.control_plane import metric_value

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
OK_MESSAGES = [{"role": "user", "content": "12+34="}]

CASES: list[tuple[str, str, Any, int, str | None]] = [
    # (name, path, body (bytes = raw), status, param)
    ("malformed json", CHAT, b'{"model": "turnout-tiny", "messages": [', 400, None),
    ("not an object", CHAT, b"[1, 2]", 400, None),
    ("missing model", CHAT, {"messages": OK_MESSAGES}, 400, "model"),
    ("missing messages", CHAT, {"model": "turnout-tiny"}, 400, "messages"),
    ("empty messages", CHAT, {"model": "turnout-tiny", "messages": []}, 400, "messages"),
    (
        "bad role",
        CHAT,
        {"model": "turnout-tiny", "messages": [{"role": "robot", "content": "x"}]},
        400,
        "messages.0.role",
    ),
    ("message not an object", CHAT, {"model": "turnout-tiny", "messages": ["hi"]}, 400, "messages.0"),
    (
        "content wrong type",
        CHAT,
        {"model": "turnout-tiny", "messages": [{"role": "user", "content": 5}]},
        400,
        "messages.0.content",
    ),
    (
        "max_tokens as string",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "max_tokens": "5"},
        400,
        "max_tokens",
    ),
    (
        "max_tokens zero",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "max_tokens": 0},
        400,
        "max_tokens",
    ),
    (
        "max_tokens negative",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": "1", "max_tokens": -3},
        400,
        "max_tokens",
    ),
    (
        "max_completion_tokens zero",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "max_completion_tokens": 0},
        400,
        "max_completion_tokens",
    ),
    (
        "max_tokens above context",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": "1", "max_tokens": 100000},
        400,
        "max_tokens",
    ),
    (
        "prompt too long",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": "1 " * 600, "max_tokens": 4},
        400,
        "prompt",  # the prompt alone fills the context: no max_tokens would do
    ),
    (
        "text part without its text",
        CHAT,
        {"model": "turnout-tiny", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
        400,
        "messages.0.content.0.text",
    ),
    (
        "temperature out of range",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "temperature": 3},
        400,
        "temperature",
    ),
    (
        "temperature NaN",
        CHAT,
        b'{"model": "turnout-tiny", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
        400,
        "temperature",
    ),
    ("top_p zero", CHAT, {"model": "turnout-tiny", "messages": OK_MESSAGES, "top_p": 0}, 400, "top_p"),
    ("n above one", CHAT, {"model": "turnout-tiny", "messages": OK_MESSAGES, "n": 2}, 400, "n"),
    (
        "stream wrong type",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "stream": "yes"},
        400,
        "stream",
    ),
    (
        "stream_options without stream",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "stream_options": {"include_usage": True}},
        400,
        "stream_options",
    ),
    (
        "unknown field the engine cannot honour",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "temprature": 0.5},
        400,
        "temprature",
    ),
    (
        "unsupported feature",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "presence_penalty": 0.5},
        400,
        "presence_penalty",
    ),
    (
        "json mode the engine cannot honour",
        CHAT,
        {"model": "turnout-tiny", "messages": OK_MESSAGES, "response_format": {"type": "json_object"}},
        400,
        "response_format",
    ),
    (
        "insertion suffix",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": "12+34=", "suffix": " done"},
        400,
        "suffix",
    ),
    (
        "image content",
        CHAT,
        {
            "model": "turnout-tiny",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
        },
        400,
        "messages.0.content.0.type",
    ),
    (
        "streamed batch",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": ["a", "b"], "stream": True},
        400,
        "prompt",
    ),
    (
        "seed past int64",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": "the", "temperature": 1.0, "seed": 2**63},
        400,
        "seed",
    ),
    ("unknown token id", COMPLETIONS, {"model": "turnout-tiny", "prompt": [1, 2, 99999]}, 400, "prompt"),
    # Past int32: a Triton or TensorRT-LLM variant's tensors would overflow (a 502, the breaker
    # counting it) or wrap around; refused for every variant alike.
    (
        "max_tokens past int32",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": "1", "max_tokens": 2**31},
        400,
        "max_tokens",
    ),
    (
        "top_k past int32",
        COMPLETIONS,
        {"model": "turnout-tiny", "prompt": "1", "top_k": 3_000_000_000},
        400,
        "top_k",
    ),
    ("unknown model", CHAT, {"model": "gpt-nine", "messages": OK_MESSAGES}, 404, "model"),
    (
        "continuous usage stats",
        CHAT,
        {
            "model": "turnout-tiny",
            "messages": OK_MESSAGES,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
        400,
        "stream_options.continuous_usage_stats",
    ),
    ("oversized body", COMPLETIONS, {"model": "turnout-tiny", "prompt": "x" * 2_000_000}, 413, None),
]


@pytest.mark.parametrize(("name", "path", "body", "status", "param"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_openai_error(
    gateway_url: str, name: str, path: str, body: Any, status: int, param: str | None
) -> None:
    if isinstance(body, bytes):
        reply = httpx.post(gateway_url + path, content=body, headers={"content-type": "application/json"})
    else:
        reply = httpx.post(gateway_url + path, json=body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["type"] in {"invalid_request_error"}
    if param is not None:
        assert error["param"] == param
    assert reply.headers["content-type"].startswith("application/json")
    assert len(reply.headers["x-request-id"]) == 32
    if name in ("max_tokens above context", "prompt too long"):  # refused by the engine itself
        assert reply.headers["x-turnout-variant"] == "turnout-tiny"
    # ...and the server keeps serving.
    ok = httpx.post(gateway_url + COMPLETIONS, json={"model": "turnout-tiny", "prompt": "1", "max_tokens": 1})
    assert ok.status_code == 200


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_a_float_that_is_not_finite_is_refused_as_such(gateway_url: str, value: bytes) -> None:
    """Python's JSON takes NaN and Infinity, and 1e999 overflows to inf: each is a 400 naming the
    field as not finite, not as out of range."""
    body = b'{"model": "turnout-tiny", "messages": [{"role": "user", "content": "1+1="}], "temperature": '
    reply = httpx.post(
        gateway_url + CHAT, content=body + value + b"}", headers={"content-type": "application/json"}
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["message"], error["param"]) == (
        "temperature: Input should be a finite number",
        "temperature",
    )


def test_too_many_stop_sequences_carry_a_code(gateway_url: str) -> None:
    body = {"model": "turnout-tiny", "messages": OK_MESSAGES, "stop": ["a", "b", "c", "d", "e"]}
    error = httpx.post(gateway_url + CHAT, json=body).json()["error"]
    assert (error["param"], error["code"]) == ("stop", "invalid_value"), error


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/nope", 404), ("GET", CHAT, 405)])
def test_unknown_paths_and_methods(gateway_url: str, method: str, path: str, status: int) -> None:
    reply = httpx.request(method, gateway_url + path)
    assert reply.status_code == status
    assert set(reply.json()["error"]) == {"message", "type", "param", "code"}


def test_a_stray_trailing_slash_is_a_404_saying_so_not_a_redirect(gateway_url: str) -> None:
    body = {"model": "turnout-tiny", "prompt": "1", "max_tokens": 1}
    for method, path in (("POST", COMPLETIONS + "/"), ("GET", "/health/")):
        reply = httpx.request(method, gateway_url + path, json=body if method == "POST" else None)
        assert reply.status_code == 404, (path, reply.status_code)
        assert reply.json()["error"]["message"] == f"Unknown path {path} (did you mean {path.rstrip('/')}?)"
    for nowhere in ("/nope/", "//"):  # no such path without the slash either: no hint
        assert httpx.get(gateway_url + nowhere).json()["error"]["message"] == f"Unknown path {nowhere}"


def test_chunked_body_over_the_limit_is_refused(gateway_url: str) -> None:
    """No content-length to refuse on: the body is counted as it arrives (1 MiB default limit)."""

    def body() -> Any:
        yield b'{"model": "turnout-tiny", "prompt": "'
        for _ in range(9):
            yield b"x" * 131_072
        yield b'"}'

    reply = httpx.post(
        gateway_url + COMPLETIONS, content=body(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in reply.request.headers  # sent chunked
    assert reply.status_code == 413, reply.text
    assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
    ok = httpx.post(gateway_url + COMPLETIONS, json={"model": "turnout-tiny", "prompt": "1", "max_tokens": 1})
    assert ok.status_code == 200


def test_requests_refused_before_routing_are_counted(gateway_url: str) -> None:
    """A bad body or an unknown model never reaches a route's series; error-rate dashboards
    still see it, by endpoint and status (no client-chosen label)."""
    labels = {"endpoint": "chat", "status": "404"}
    before = metric_value(gateway_url, "turnout_rejected_requests_total", **labels)
    httpx.post(gateway_url + CHAT, json={"model": "gpt-nine", "messages": OK_MESSAGES})
    assert metric_value(gateway_url, "turnout_rejected_requests_total", **labels) == before + 1
    bad = {"endpoint": "completions", "status": "400"}
    before = metric_value(gateway_url, "turnout_rejected_requests_total", **bad)
    httpx.post(gateway_url + COMPLETIONS, json={"model": "turnout-tiny", "prompt": "1", "max_tokens": "5"})
    assert metric_value(gateway_url, "turnout_rejected_requests_total", **bad) == before + 1


def test_a_batch_whose_one_prompt_fails_is_counted_once_not_as_hang_ups(gateway_url: str) -> None:
    """The other prompts of the request are cancelled by the gateway, not by a client leaving."""
    labels = {"route": "turnout-tiny", "endpoint": "completions"}
    hang_ups = metric_value(gateway_url, "turnout_requests_total", **labels, status="499")
    too_long = "1 " * 600  # past the 512-token context
    body = {"model": "turnout-tiny", "prompt": ["1+2=", "3+4=", too_long, "5+6="], "max_tokens": 64}
    reply = httpx.post(gateway_url + COMPLETIONS, json={**body, "ignore_eos": True})
    assert reply.status_code == 400
    assert metric_value(gateway_url, "turnout_requests_total", **labels, status="499") == hang_ups


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"authorization": "Bearer anything"}, 200),  # the openai SDK needs some api_key: anonymous
        ({"authorization": "Bearer sk-turnout-mistyped"}, 401),  # a key of ours, unknown or revoked
        ({"api-key": "tadm-not-a-token"}, 401),
        # Ours under another scheme, bare, or beside a Bearer the SDK filled in: not anonymous.
        ({"authorization": "Basic sk-turnout-abc"}, 401),
        ({"authorization": "Token sk-turnout-abc"}, 401),
        ({"authorization": "sk-turnout-abc"}, 401),
        ({"authorization": "Bearer anything", "api-key": "sk-turnout-revoked"}, 401),
        # HTTP Basic as clients send it: base64 of "user:password" (curl -u :KEY)
        ({"authorization": "Basic " + base64.b64encode(b":sk-turnout-abc").decode()}, 401),
        ({"authorization": "Basic " + base64.b64encode(b"sk-turnout-abc:x").decode()}, 401),
        ({"authorization": "Basic " + base64.b64encode(b"user:password").decode()}, 200),
    ],
)
def test_with_anonymous_clients_an_unknown_key_of_ours_is_still_refused(
    gateway_url: str, headers: dict[str, str], status: int
) -> None:
    body = {"model": "turnout-tiny", "prompt": "1", "max_tokens": 1}
    reply = httpx.post(gateway_url + COMPLETIONS, json=body, headers=headers)
    assert reply.status_code == status
    if status == 401:
        assert reply.json()["error"]["code"] == "invalid_api_key"


def test_a_mistyped_model_gets_a_suggestion_and_max_tokens_0_points_at_echo(gateway_url: str) -> None:
    typo = httpx.post(gateway_url + CHAT, json={"model": "turnout-tinyy", "messages": OK_MESSAGES})
    assert typo.status_code == 404
    hint = "did you mean 'turnout-tiny'? (GET /v1/models lists them)"
    assert typo.json()["error"]["message"].endswith(hint)
    far = httpx.post(gateway_url + CHAT, json={"model": "gpt-nine", "messages": OK_MESSAGES})
    assert far.json()["error"]["message"] == "The model 'gpt-nine' does not exist"
    zero_tokens = {"model": "turnout-tiny", "prompt": "1", "max_tokens": 0}
    zero = httpx.post(gateway_url + COMPLETIONS, json=zero_tokens)
    assert zero.status_code == 400 and "with echo: true" in zero.json()["error"]["message"]
    # chat has no echo, so its refusal does not point at one
    chat_zero = httpx.post(
        gateway_url + CHAT, json={"model": "turnout-tiny", "messages": OK_MESSAGES, "max_tokens": 0}
    )
    assert chat_zero.json()["error"]["message"] == "max_tokens must be at least 1, got 0"
