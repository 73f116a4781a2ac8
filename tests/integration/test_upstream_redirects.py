"""An upstream's redirect is a 502 naming where it points, never followed.

aiohttp follows redirects by default, turning the POST into a GET on a 301/302: a variant whose
address had moved answered the client with the new address's 405 "Method Not Allowed", and its
body was lost. A real aiohttp server on 127.0.0.1 redirects the generation paths to a place
that would answer 200, so a followed redirect would show as a second request and a success.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from backends.base import GenerateRequest, SamplingParams
from backends.openai_http import OpenAIHttpBackend
from backends.settings import OpenAIHttpSettings, TritonSettings
from backends.triton_http import TritonHttp
from backends.triton_tensors import ModelFacts
from serving.errors import BackendError
from tests.integration.aiohttp_upstream import serving

LIMIT = 10.0
CHAT = GenerateRequest(kind="chat", params=SamplingParams(), messages=[{"role": "user", "content": "hi"}])
ANSWER = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {}}


def redirecting_app(status: int, path: str, answer: object, seen: list[tuple[str, str]]) -> web.Application:
    """``path`` redirects (``status``) to ``/moved<path>``, which answers ``answer`` to any method."""

    async def redirect(request: web.Request) -> web.Response:
        seen.append((request.method, request.path))
        return web.Response(status=status, headers={"location": "/moved" + path})

    async def moved(request: web.Request) -> web.Response:
        seen.append((request.method, request.path))
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post(path, redirect)
    app.router.add_route("*", "/moved" + path, moved)
    return app


@pytest.mark.parametrize("status", [302, 307])
async def test_openai_http_does_not_follow_a_redirect(status: int) -> None:
    seen: list[tuple[str, str]] = []
    path = "/v1/chat/completions"
    async with serving(redirecting_app(status, path, ANSWER, seen)) as port:
        settings = OpenAIHttpSettings.model_validate(
            {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m", "engine": "vllm"}
        )
        backend = OpenAIHttpBackend("up", settings)
        await backend.start()
        try:
            with pytest.raises(BackendError) as complete_error:
                await asyncio.wait_for(backend.complete(CHAT), LIMIT)

            async def drain() -> None:
                async for _ in backend.stream(CHAT):
                    pass

            with pytest.raises(BackendError) as stream_error:
                await asyncio.wait_for(drain(), LIMIT)
        finally:
            await backend.close()
    assert seen == [("POST", path), ("POST", path)]  # nothing went to /moved
    for error in (complete_error.value, stream_error.value):
        assert error.status == 502
        assert f"answered {status} redirecting to /moved{path}" in error.message


async def test_triton_http_does_not_follow_a_redirect() -> None:
    seen: list[tuple[str, str]] = []
    path = "/v2/models/m/generate"
    async with serving(redirecting_app(302, path, {"text_output": "ok"}, seen)) as port:
        transport = TritonHttp(
            "up", TritonSettings.model_validate({"url": f"http://127.0.0.1:{port}", "model": "m"})
        )
        await transport.start()
        try:
            with pytest.raises(BackendError) as error:
                await asyncio.wait_for(transport.infer(ModelFacts("m"), {"text_input": "hi"}, "rid"), LIMIT)
        finally:
            await transport.close()
    assert seen == [("POST", path)]
    assert error.value.status == 502 and f"redirecting to /moved{path}" in error.value.message
