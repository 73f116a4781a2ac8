"""The gateway's breaker wiring: an attempt sent before a variant's breaker opened, answering
only once it is half-open, is not taken for the probe's answer.

The backend is an in-process object on purpose: the test needs one request held in flight
across the breaker's opening and cooldown on an injected clock, which no real server's timing
can pin down without sleeping through a real cooldown.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from backends.base import Chunk, Completion, GenerateRequest, Usage
from serving.config import GatewayConfig
from serving.errors import BackendError, BackendUnavailable
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics
from tests.unit.inprocess_backend import REQUEST, InProcessBackend


class Scripted(InProcessBackend):
    """Each call takes the next step: an exception to raise, or a gate to wait on before answering."""

    def __init__(self, steps: list[BaseException | asyncio.Event]) -> None:
        self.steps = steps

    async def complete(self, request: GenerateRequest) -> Completion:
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        await step.wait()
        return Completion("ok", "stop", Usage(1, 1))

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        yield Chunk("unused")


async def test_a_slow_answer_from_before_the_opening_does_not_close_a_half_open_breaker() -> None:
    now = [99.0]
    slow, probe = asyncio.Event(), asyncio.Event()
    backend = Scripted([slow, BackendError("upstream 500"), probe])
    config = GatewayConfig.model_validate({
        "variants": {"v": {"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "routes": {"r": {"targets": [{"variant": "v"}]}},
        "breaker": {"consecutive_failures": 1, "cooldown_s": 1.0},
    })  # fmt: skip
    gw = Gateway(config, {"v": backend}, GatewayMetrics(), clock=lambda: now[0])

    def call() -> asyncio.Task[Completion]:
        return asyncio.ensure_future(gw.complete(gw.choose("r", None, None), REQUEST, "chat"))

    sent_early = call()  # at 99, before anything went wrong
    await asyncio.sleep(0)
    now[0] = 100.0
    with pytest.raises(BackendError):  # opens the breaker at 100
        await call()
    now[0] = 101.5  # past the cooldown: the next request is the probe
    probing = call()
    await asyncio.sleep(0)
    now[0] = 101.6
    slow.set()  # the request from 99 answers well now: the backend's state at 99, not now
    assert (await sent_early).text == "ok"
    with pytest.raises(BackendUnavailable) as refused:  # the probe's slot is still taken
        await call()
    assert refused.value.code == "circuit_open"
    probe.set()
    assert (await probing).text == "ok"  # the probe's own answer closes it
    assert gw.breakers["v"].state(now[0]) == "closed"
