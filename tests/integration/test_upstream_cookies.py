"""Upstream cookies stay with the answer that set them: no adapter replays them on later calls.

Each HTTP adapter keeps one connection pool for every client of a variant, so a cookie jar
there would send one client's ``Set-Cookie`` (an upstream session, a load balancer's
sticky-session cookie) on everyone's later requests (aiohttp's default jar did, until the
adapters used a dummy one; ``backends/upstream_pool.py`` keeps none). A real aiohttp server on
``localhost`` (a host name: cookie jars ignore cookies from IP addresses) sets a new cookie on
every answer and records the ``Cookie`` header of each request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from backends.base import GenerateRequest, SamplingParams
from backends.openai_http import OpenAIHttpBackend
from backends.settings import OpenAIHttpSettings, TritonSettings
from backends.triton_http import TritonHttp
from backends.triton_tensors import ModelFacts
from tests.integration.aiohttp_upstream import serving

LIMIT = 10.0


@asynccontextmanager
async def cookie_server(path: str, answer: dict[str, Any]) -> AsyncIterator[tuple[str, list[str | None]]]:
    """``http://localhost:PORT`` answering ``answer`` on POST ``path``; the Cookie headers seen."""
    seen: list[str | None] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("cookie"))
        response = web.json_response(answer)
        response.set_cookie("session", f"client-{len(seen)}")
        return response

    app = web.Application()
    app.router.add_post(path, handle)
    async with serving(app) as port:
        yield f"http://localhost:{port}", seen


async def _three_calls(call: Callable[[], Awaitable[object]]) -> None:
    for _ in range(3):
        await asyncio.wait_for(call(), LIMIT)


async def test_openai_http_sends_no_upstream_cookie() -> None:
    answer = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {}}
    async with cookie_server("/v1/chat/completions", answer) as (url, seen):
        settings = OpenAIHttpSettings.model_validate(
            {"base_url": url + "/v1", "model": "m", "engine": "vllm"}
        )
        backend = OpenAIHttpBackend("up", settings)
        await backend.start()
        request = GenerateRequest(
            kind="chat", params=SamplingParams(), messages=[{"role": "user", "content": "hi"}]
        )
        try:
            await _three_calls(lambda: backend.complete(request))
        finally:
            await backend.close()
    assert seen == [None, None, None]


async def test_triton_http_sends_no_upstream_cookie() -> None:
    async with cookie_server("/v2/models/m/generate", {"text_output": "ok"}) as (url, seen):
        transport = TritonHttp("up", TritonSettings.model_validate({"url": url, "model": "m"}))
        await transport.start()
        try:
            await _three_calls(lambda: transport.infer(ModelFacts("m"), {"text_input": "hi"}, "rid"))
        finally:
            await transport.close()
    assert seen == [None, None, None]
