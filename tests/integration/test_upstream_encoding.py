"""Upstream answers arrive uncompressed: the HTTP adapters ask for ``identity`` encoding.

Both adapters read the upstream's bytes as they are (a stream is parsed chunk by chunk and
nothing is inflated on the hot path), so they must not offer ``gzip``/``br``: a client library's
default ``Accept-Encoding: gzip, deflate, br`` (aiohttp's, which the adapters used before) would
reach an upstream that honours it (nginx with ``gzip on`` in front of vLLM, Triton's own
``/infer``) would answer with bytes the adapter cannot parse. A real aiohttp server on
127.0.0.1 compresses whenever the request allows it, as such an upstream does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiohttp import web

from backends.base import GenerateRequest, SamplingParams
from backends.openai_http import OpenAIHttpBackend
from backends.settings import OpenAIHttpSettings, TritonSettings
from backends.triton_http import TritonHttp
from backends.triton_tensors import ModelFacts
from tests.integration.aiohttp_upstream import serving

LIMIT = 10.0


@asynccontextmanager
async def compressing_server(
    answers: dict[str, dict[str, Any]], events: dict[str, list[dict[str, Any]]]
) -> AsyncIterator[tuple[str, list[str | None]]]:
    """An upstream that gzips JSON (``answers``) and SSE (``events``) when the client accepts it;
    yields its base URL and the ``Accept-Encoding`` header of each request."""
    seen: list[str | None] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("accept-encoding"))
        if request.path in answers:
            response = web.json_response(answers[request.path])
            response.enable_compression()  # gzip/deflate/br when the request allows it
            return response
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        stream.enable_compression()
        await stream.prepare(request)
        for event in events[request.path]:
            await stream.write(b"data: " + orjson.dumps(event) + b"\n\n")
        if request.path.endswith("/completions"):
            await stream.write(b"data: [DONE]\n\n")
        await stream.write_eof()
        return stream

    app = web.Application()
    for path in [*answers, *events]:
        app.router.add_post(path, handle)
    async with serving(app) as port:
        yield f"http://127.0.0.1:{port}", seen


CHAT = GenerateRequest(kind="chat", params=SamplingParams(), messages=[{"role": "user", "content": "hi"}])
ANSWER = {
    "choices": [{"message": {"content": "an answer"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}
DELTAS = [
    {"choices": [{"index": 0, "delta": {"content": "an "}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "answer"}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
]


async def test_openai_http_reads_a_compressing_upstream() -> None:
    path = "/v1/chat/completions"
    async with compressing_server({path: ANSWER}, {"/stream" + path: DELTAS}) as (url, seen):
        backend = OpenAIHttpBackend(
            "up", OpenAIHttpSettings.model_validate({"base_url": url + "/v1", "model": "m", "engine": "vllm"})
        )
        streaming = OpenAIHttpBackend(
            "up-s",
            OpenAIHttpSettings.model_validate(
                {"base_url": url + "/stream/v1", "model": "m", "engine": "vllm"}
            ),
        )
        await backend.start()
        await streaming.start()
        try:
            completion = await asyncio.wait_for(backend.complete(CHAT), LIMIT)

            async def collect() -> list[Any]:
                return [chunk async for chunk in streaming.stream(CHAT)]

            chunks = await asyncio.wait_for(collect(), LIMIT)
        finally:
            await backend.close()
            await streaming.close()
    assert (completion.text, completion.finish_reason, completion.usage.total_tokens) == (
        "an answer",
        "stop",
        5,
    )
    assert "".join(chunk.text for chunk in chunks) == "an answer"
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 5
    assert seen == ["identity", "identity"]


async def test_triton_http_reads_a_compressing_upstream() -> None:
    facts = ModelFacts("m")
    outputs = [{"text_output": "an "}, {"text_output": "answer", "finish_reason": "stop"}]
    async with compressing_server(
        {"/v2/models/m/generate": {"text_output": "an answer"}}, {"/v2/models/m/generate_stream": outputs}
    ) as (url, seen):
        transport = TritonHttp("up", TritonSettings.model_validate({"url": url, "model": "m"}))
        await transport.start()
        try:
            answer = await asyncio.wait_for(transport.infer(facts, {"text_input": "hi"}, "rid"), LIMIT)

            async def collect() -> list[dict[str, Any]]:
                return [data async for data in transport.stream(facts, {"text_input": "hi"}, "rid")]

            streamed = await asyncio.wait_for(collect(), LIMIT)
        finally:
            await transport.close()
    assert answer == {"text_output": "an answer"}
    assert streamed == outputs
    assert seen == ["identity", "identity"]
