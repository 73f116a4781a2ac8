"""OpenAIHttpBackend against a real fault server on 127.0.0.1: answers, streams, every error mapping.

The fault server runs in a background thread with its own event loop; each test picks its
behaviour with the ``x_fault`` body field (passed through ``GenerateRequest.extra``), and
each is bounded with ``asyncio.wait_for`` so a broken adapter fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from backends.base import Chunk, GenerateRequest, SamplingParams
from backends.fault import DEFAULT_REPLY, FaultServer, split_reply
from backends.openai_http import OpenAIHttpBackend
from backends.settings import OpenAIHttpSettings, TimeoutSettings
from backends.upstream_http import UpstreamClientError, UpstreamOverloaded, status_error
from serving.errors import BackendError, BackendTimeout, BackendUnavailable, ClientError, Overloaded

LIMIT = 10.0  # seconds any single test step may take
MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def fault_server() -> Iterator[FaultServer]:
    with FaultServer(chunks=8) as server:
        yield server


@asynccontextmanager
async def backend_for(base_url: str, **overrides: Any) -> AsyncIterator[OpenAIHttpBackend]:
    settings = OpenAIHttpSettings.model_validate(
        {"base_url": base_url, "model": "fake-model", "engine": "vllm", **overrides}
    )
    backend = OpenAIHttpBackend("fake", settings)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def chat(fault: str | None = None, **params: Any) -> GenerateRequest:
    extra = {"x_fault": fault} if fault else {}
    return GenerateRequest(kind="chat", params=SamplingParams(**params), messages=MESSAGES, extra=extra)


def completion(fault: str | None = None, **params: Any) -> GenerateRequest:
    extra = {"x_fault": fault} if fault else {}
    return GenerateRequest(kind="completion", params=SamplingParams(**params), prompt="Once", extra=extra)


async def collect(backend: OpenAIHttpBackend, request: GenerateRequest, into: list[Chunk]) -> list[Chunk]:
    async for chunk in backend.stream(request):
        into.append(chunk)
    return into


async def drain(backend: OpenAIHttpBackend, request: GenerateRequest) -> list[Chunk]:
    return await asyncio.wait_for(collect(backend, request, []), LIMIT)


async def answer(backend: OpenAIHttpBackend, request: GenerateRequest, streaming: bool) -> None:
    """Ask ``backend`` for ``request`` streamed or whole (a test expects it to raise)."""
    if streaming:
        await drain(backend, request)
    else:
        await asyncio.wait_for(backend.complete(request), LIMIT)


async def test_lifecycle_and_info(fault_server: FaultServer) -> None:
    settings = OpenAIHttpSettings.model_validate(
        {
            "base_url": fault_server.base_url,
            "model": "m",
            "engine": "sglang",
            "vendor": "amd",
            "accelerator": "mi300x",
        }
    )
    backend = OpenAIHttpBackend("v", settings)
    assert not backend.ready()
    await backend.start()
    assert backend.ready()
    await backend.close()
    assert not backend.ready()
    assert (backend.info.kind, backend.info.engine, backend.info.vendor, backend.info.accelerator) == (
        "openai_http",
        "sglang",
        "amd",
        "mi300x",
    )


@pytest.mark.parametrize("make", [chat, completion])
async def test_complete(fault_server: FaultServer, make: Any) -> None:
    async with backend_for(fault_server.base_url) as backend:
        result = await asyncio.wait_for(backend.complete(make()), LIMIT)
        assert result.text == DEFAULT_REPLY
        assert result.finish_reason == "stop"
        assert result.usage.completion_tokens == 8
        assert result.usage.prompt_tokens > 0

        short = await asyncio.wait_for(backend.complete(make(max_tokens=3)), LIMIT)
        assert short.text == "".join(split_reply(DEFAULT_REPLY, 8)[:3])
        assert (short.finish_reason, short.usage.completion_tokens) == ("length", 3)


@pytest.mark.parametrize("make", [chat, completion])
async def test_stream(fault_server: FaultServer, make: Any) -> None:
    async with backend_for(fault_server.base_url) as backend:
        chunks = await drain(backend, make())
        assert [c.text for c in chunks] == split_reply(DEFAULT_REPLY, 8)  # one Chunk per upstream event
        assert [c.finish_reason for c in chunks] == [None] * 7 + ["stop"]
        assert all(c.usage is None for c in chunks[:-1])
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens == 8 and usage.prompt_tokens > 0

        short = await drain(backend, make(max_tokens=2))
        assert len(short) == 2 and short[-1].finish_reason == "length"


async def test_stream_is_not_buffered(fault_server: FaultServer) -> None:
    async with backend_for(fault_server.base_url) as backend:
        arrivals: list[float] = []

        async def timed() -> None:
            async for _ in backend.stream(chat("slow_chunks=60")):
                arrivals.append(time.perf_counter())

        await asyncio.wait_for(timed(), LIMIT)
        assert len(arrivals) == 8
        assert arrivals[-1] - arrivals[0] > 0.3  # chunks reached us as they were sent


@pytest.mark.parametrize("make", [chat, completion])
async def test_usage_on_every_chunk_does_not_hold_the_stream_back(
    fault_server: FaultServer, make: Any
) -> None:
    """vLLM's continuous_usage_stats put usage on each chunk; each was taken for the finish, and
    everything after it was held back with it: the whole answer came at the end, as one chunk."""
    async with backend_for(fault_server.base_url) as backend:
        arrivals: list[tuple[float, Chunk]] = []

        async def timed() -> None:
            async for chunk in backend.stream(make("usage_every,slow_chunks=60")):
                arrivals.append((time.perf_counter(), chunk))

        await asyncio.wait_for(timed(), LIMIT)
        chunks = [chunk for _, chunk in arrivals]
        assert [c.text for c in chunks] == split_reply(DEFAULT_REPLY, 8)
        assert arrivals[-1][0] - arrivals[0][0] > 0.3  # as they were sent
        assert all(c.usage is None for c in chunks[:-1])
        usage = chunks[-1].usage  # the finish chunk's own running usage: the whole answer's
        assert chunks[-1].finish_reason == "stop" and usage is not None and usage.completion_tokens == 8


async def test_passthrough_of_fields_and_headers(fault_server: FaultServer) -> None:
    async with backend_for(fault_server.base_url, api_key="sk-test") as backend:
        request = chat(
            "echo", max_tokens=50, temperature=0.5, top_p=0.9, top_k=4, seed=7, stop=("\n",), ignore_eos=True
        )
        request.extra.update({"logprobs": True, "guided_json": {"type": "object"}})
        request.request_id = "req-123"
        result = await asyncio.wait_for(backend.complete(request), LIMIT)
        echoed = orjson.loads(result.text)
        body, headers = echoed["body"], echoed["headers"]
        assert body["model"] == "fake-model" and body["messages"] == MESSAGES
        assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (
            50,
            0.5,
            0.9,
            4,
            7,
        )
        assert body["stop"] == ["\n"] and body["logprobs"] is True and body["ignore_eos"] is True
        assert body["guided_json"] == {"type": "object"}
        assert body["stream"] is False
        assert headers["authorization"] == "Bearer sk-test"
        assert headers["x-request-id"] == "req-123"

        plain = await asyncio.wait_for(backend.complete(completion("echo")), LIMIT)
        sent = orjson.loads(plain.text)["body"]
        assert sent["prompt"] == "Once" and "max_tokens" not in sent and "temperature" not in sent
        assert "ignore_eos" not in sent
        assert "authorization" in orjson.loads(plain.text)["headers"]

        streamed = await drain(backend, chat("echo"))
        sent = orjson.loads("".join(c.text for c in streamed))["body"]
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("status", [400, 409, 422])
@pytest.mark.parametrize("streaming", [False, True])
async def test_upstream_4xx_is_client_error(fault_server: FaultServer, status: int, streaming: bool) -> None:
    async with backend_for(fault_server.base_url) as backend:
        with pytest.raises(ClientError) as info:
            await answer(backend, chat(f"error={status}"), streaming)
        err = info.value
        assert isinstance(err, UpstreamClientError)
        assert err.status == status
        body = err.body()["error"]
        assert body["message"] == f"fault injected: status {status}"
        assert body["code"] == str(status)
        assert body["type"] == "invalid_request_error"
        assert err.headers == {}


@pytest.mark.parametrize(
    ("status", "setting"), [(401, "api_key"), (403, "api_key"), (404, "model"), (405, "base_url")]
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_upstream_refusing_the_variants_own_settings_is_a_502(
    fault_server: FaultServer, status: int, setting: str, streaming: bool
) -> None:
    """The gateway's api_key, model name or URL for the variant is wrong, not the client's
    request: a 502 naming the upstream, its answer and the setting to check."""
    async with backend_for(fault_server.base_url) as backend:
        with pytest.raises(BackendError) as info:
            await answer(backend, chat(f"error={status}"), streaming)
        err = info.value
        assert err.status == 502 and not isinstance(err, ClientError)
        assert f"answered {status}: fault injected: status {status}" in err.message
        assert f"check the variant's {setting}" in err.message


@pytest.mark.parametrize("streaming", [False, True])
async def test_upstream_429_is_an_overload_with_its_retry_after(
    fault_server: FaultServer, streaming: bool
) -> None:
    """Not the request's fault: an :class:`Overloaded`, so the gateway tries the fallbacks."""
    async with backend_for(fault_server.base_url) as backend:
        with pytest.raises(Overloaded) as info:
            await answer(backend, chat("error=429,retry_after=3"), streaming)
        err = info.value
        assert isinstance(err, UpstreamOverloaded) and err.status == 429
        assert err.headers == {"retry-after": "3"}
        assert err.body()["error"] == {
            "message": "fault injected: status 429",
            "type": "rate_limit_error",
            "param": None,
            "code": "429",
        }


def test_an_upstream_429_without_retry_after_gets_the_gateways_one_second() -> None:
    err = status_error("v", 429, b'{"error": {"message": "slow down"}}', None)
    assert isinstance(err, UpstreamOverloaded) and err.headers == {"retry-after": "1"}
    assert status_error("v", 429, b"", "Wed, 21 Oct 2026 07:28:00 GMT").headers == {
        "retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"  # an HTTP date is passed on as given
    }


@pytest.mark.parametrize(
    ("status", "kind", "headers"),
    [
        (500, BackendError, {}),
        (502, BackendError, {}),
        (503, BackendUnavailable, {"retry-after": "4"}),
        (504, BackendTimeout, {}),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_upstream_5xx_is_a_backend_error_503_and_504_kept(
    fault_server: FaultServer, status: int, kind: type[BackendError], headers: dict[str, str], streaming: bool
) -> None:
    async with backend_for(fault_server.base_url) as backend:
        with pytest.raises(BackendError) as info:
            await answer(backend, chat(f"error={status},retry_after=4"), streaming)
        assert type(info.value) is kind and info.value.status == (status if status != 500 else 502)
        assert str(status) in info.value.message
        assert info.value.headers == headers


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("streaming", [False, True])
async def test_refused_port_is_unavailable(streaming: bool) -> None:
    async with backend_for(f"http://127.0.0.1:{_closed_port()}/v1") as backend:
        with pytest.raises(BackendUnavailable) as info:
            await answer(backend, chat(), streaming)
        assert info.value.status == 503


async def test_not_started_is_unavailable(fault_server: FaultServer) -> None:
    backend = OpenAIHttpBackend(
        "x", OpenAIHttpSettings.model_validate({"base_url": fault_server.base_url, "model": "m"})
    )
    with pytest.raises(BackendUnavailable):
        await asyncio.wait_for(backend.complete(chat()), LIMIT)


async def test_read_timeout_is_backend_timeout(fault_server: FaultServer) -> None:
    timeouts = TimeoutSettings(read=0.5)  # far below the 3 s faults, above a busy machine's hiccups
    async with backend_for(fault_server.base_url, timeouts=timeouts.model_dump()) as backend:
        with pytest.raises(BackendTimeout) as info:
            await asyncio.wait_for(backend.complete(chat("latency=3000")), LIMIT)
        assert info.value.status == 504

        received: list[Chunk] = []
        with pytest.raises(BackendTimeout):  # raised by the iterator, after the first chunk
            await asyncio.wait_for(collect(backend, chat("stall=3000"), received), LIMIT)
        assert len(received) == 1

        fine = await asyncio.wait_for(backend.complete(chat("latency=20")), LIMIT)
        assert fine.text == DEFAULT_REPLY


@pytest.mark.parametrize(
    ("fault", "before"),
    [("cut=3", 3), ("corrupt", 1), ("error_event=2", 2), ("cut=0", 0), ("bad_content", 1)],
)
async def test_mid_stream_failure_raises_from_iterator(
    fault_server: FaultServer, fault: str, before: int
) -> None:
    async with backend_for(fault_server.base_url) as backend:
        received: list[Chunk] = []
        with pytest.raises(BackendError) as info:
            await asyncio.wait_for(collect(backend, chat(fault), received), LIMIT)
        assert type(info.value) is BackendError and info.value.status == 502
        assert [c.text for c in received] == split_reply(DEFAULT_REPLY, 8)[:before]


@pytest.mark.parametrize("fault", ["corrupt", "drop", "bad_content"])
async def test_malformed_or_dropped_answer_is_backend_error(fault_server: FaultServer, fault: str) -> None:
    async with backend_for(fault_server.base_url) as backend:
        with pytest.raises(BackendError) as info:
            await asyncio.wait_for(backend.complete(chat(fault)), LIMIT)
        assert type(info.value) is BackendError and info.value.status == 502


async def test_connections_are_reused() -> None:
    with FaultServer() as server:
        async with backend_for(server.base_url) as backend:
            server.reset_stats()
            for _ in range(30):
                await asyncio.wait_for(backend.complete(chat()), LIMIT)
            for _ in range(5):
                await asyncio.wait_for(drain(backend, chat()), LIMIT)
            # Each stats() call opens one connection of its own, counted in the answer.
            assert server.stats()["connections"] - 1 == 1

            server.reset_stats()
            for _ in range(10):
                await asyncio.wait_for(asyncio.gather(*(backend.complete(chat()) for _ in range(4))), LIMIT)
            stats = server.stats()
            assert stats["requests"] == 40
            assert stats["connections"] - 1 <= 4


async def test_upstream_closing_kept_alive_connections_is_survived() -> None:
    with FaultServer() as server:
        async with backend_for(server.base_url) as backend:
            server.reset_stats()
            for _ in range(5):  # each answer is followed by the upstream hanging up, unannounced
                result = await asyncio.wait_for(backend.complete(chat("close")), LIMIT)
                assert result.text == DEFAULT_REPLY
            stats = server.stats()
            # One connection per answer (one more if a request met a connection just closed).
            assert stats["connections"] - 1 >= 5
            assert stats["requests"] == 5  # no request was answered twice


async def test_pool_exhaustion_is_an_overload_and_a_broken_stream_frees_its_slot(
    fault_server: FaultServer,
) -> None:
    limits = {"max_connections": 1, "timeouts": {"pool": 0.1, "connect": 0.1, "read": 5.0}}
    async with backend_for(fault_server.base_url, **limits) as backend:
        slow = backend.stream(chat("slow_chunks=200"))
        first = await asyncio.wait_for(anext(slow), LIMIT)  # holds the only connection
        assert first.text
        with pytest.raises(Overloaded, match=r"all 1 connections busy for 0\.1 s") as full:
            await asyncio.wait_for(backend.complete(chat()), LIMIT)
        assert full.value.status == 429 and full.value.code == "upstream_pool_full"
        assert full.value.headers == {"retry-after": "1"}
        await slow.aclose()  # the consumer went away mid-stream: the slot must come back
        result = await asyncio.wait_for(backend.complete(chat()), LIMIT)
        assert result.text == DEFAULT_REPLY


async def test_request_id_cannot_inject_headers(fault_server: FaultServer) -> None:
    async with backend_for(fault_server.base_url) as backend:
        request = chat("echo")
        request.request_id = "abc\r\nx-evil: 1"
        result = await asyncio.wait_for(backend.complete(request), LIMIT)
        headers = orjson.loads(result.text)["headers"]
        assert "x-evil" not in headers and "x-request-id" not in headers


async def _pieces(raw: bytes, piece: int) -> AsyncIterator[bytes]:
    """The body as the socket might hand it over: cut at awkward places."""
    for i in range(0, len(raw), piece):
        yield raw[i : i + piece]


@pytest.mark.parametrize("piece", [1, 7, 10_000])
async def test_sse_parser_handles_crlf_comments_multiline_data_and_split_reads(piece: int) -> None:
    events = [
        b": keep-alive comment",
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
        b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}',
        b'event: message\r\ndata: {"choices":[{"index":0,\r\ndata: "delta":{"content":"lo"}}]}',
        b'data: {"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}]}',
        b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}',
        b"data: [DONE]",
    ]
    raw = b"".join(e + b"\r\n\r\n" for e in events)
    backend = OpenAIHttpBackend(
        "stub", OpenAIHttpSettings.model_validate({"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    )
    chunks = [c async for c in backend._events(_pieces(raw, piece), chat=True)]
    assert [c.text for c in chunks] == ["Hel", "lo", "!"]
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 7


@pytest.mark.parametrize("piece", [5, 10_000])
async def test_usage_on_choice_chunks_before_or_after_the_finish_is_kept_and_holds_nothing_back(
    piece: int,
) -> None:
    """Continuous usage on the role-only first chunk (vLLM), text parts as a list, and the final
    usage sent on an empty-delta choice after the finish (not as choices: [])."""

    def usage(completion: int) -> dict[str, int]:
        return {"prompt_tokens": 4, "completion_tokens": completion, "total_tokens": 4 + completion}

    parts = [{"type": "text", "text": "He"}, {"type": "reasoning", "text": "(thinks)"}, {"text": "l"}]
    payloads = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "usage": usage(0)},
        {"choices": [{"index": 0, "delta": {"content": parts}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
        {"choices": [{"index": 0, "delta": {}}], "usage": usage(2)},
    ]
    events = [b"data: " + orjson.dumps(p) for p in payloads] + [b"data: [DONE]"]
    raw = b"".join(e + b"\n\n" for e in events)
    backend = OpenAIHttpBackend(
        "stub", OpenAIHttpSettings.model_validate({"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    )
    chunks = [c async for c in backend._events(_pieces(raw, piece), chat=True)]
    assert [(c.text, c.finish_reason) for c in chunks] == [("Hel", None), ("lo", "stop")]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2


async def test_an_sse_event_that_never_ends_is_a_bad_gateway_not_unbounded_memory() -> None:
    from backends.openai_http import MAX_SSE_EVENT_BYTES

    raw = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * (MAX_SSE_EVENT_BYTES + 1)
    backend = OpenAIHttpBackend(
        "stub", OpenAIHttpSettings.model_validate({"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    )
    with pytest.raises(BackendError, match="without ending an event"):
        [c async for c in backend._events(_pieces(raw, 65_536), chat=True)]


async def test_fault_server_as_a_process_with_a_default_script_and_the_header() -> None:
    with FaultServer(process=True, default="error=503") as server:
        async with backend_for(server.base_url) as backend:
            with pytest.raises(BackendUnavailable) as info:
                await asyncio.wait_for(backend.complete(chat()), LIMIT)
            assert "503" in info.value.message
            assert (await asyncio.wait_for(backend.complete(chat("ok")), LIMIT)).text == DEFAULT_REPLY
        async with httpx.AsyncClient(base_url=server.url, timeout=LIMIT) as client:
            reply = await client.post(
                "/v1/chat/completions",
                json={"model": "x", "messages": MESSAGES},
                headers={"x-fault": "error=404"},
            )
            assert reply.status_code == 404 and reply.json()["error"]["type"] == "not_found_error"
            models = (await client.get("/v1/models")).json()
            assert models["data"][0]["id"] == "fake-model"
            assert (await client.get("/health")).status_code == 200
            bad = await client.post("/v1/completions", content=b"{", headers={"x-fault": "ok"})
            assert bad.status_code == 400
        assert server.stats()["requests"] == 4
