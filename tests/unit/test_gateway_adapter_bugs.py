"""The gateway around an adapter that raises what no adapter should (a bug, an answer it did not
foresee): a 502 like any bad gateway, fallbacks tried, the breaker's probe slot freed.

The adapter here is an in-process object on purpose: the failure injected is a bug inside an
adapter, which no upstream server can make the real adapters commit on demand.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from backends.base import Chunk, Completion, GenerateRequest, Usage
from serving.config import GatewayConfig
from serving.errors import BackendError
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics
from tests.unit.inprocess_backend import REQUEST, InProcessBackend


class Buggy(InProcessBackend):
    async def complete(self, request: GenerateRequest) -> Completion:
        raise TypeError("can only concatenate str (not 'int') to str")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        yield Chunk("first")
        raise TypeError("can only concatenate str (not 'int') to str")


class Good(Buggy):
    async def complete(self, request: GenerateRequest) -> Completion:
        return Completion("ok", "stop", Usage(1, 1))


def gateway(now: list[float]) -> Gateway:
    upstream = {"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    config = GatewayConfig.model_validate({
        "variants": {"buggy": upstream, "good": upstream},
        "routes": {
            "with-fallback": {"targets": [{"variant": "buggy"}], "fallbacks": ["good"]},
            "alone": {"targets": [{"variant": "buggy"}]},
        },
        "breaker": {"consecutive_failures": 1, "cooldown_s": 1.0},
    })  # fmt: skip
    return Gateway(config, {"buggy": Buggy(), "good": Good()}, GatewayMetrics(), clock=lambda: now[0])


async def test_a_buggy_adapter_is_a_502_and_its_fallback_serves() -> None:
    now = [100.0]
    gw = gateway(now)
    answer = await gw.complete(gw.choose("with-fallback", None, None), REQUEST, "chat")
    assert answer.text == "ok"
    failed = gw.metrics.attempts_failed.labels("with-fallback", "buggy", "502")._value.get()
    assert failed == 1


async def test_a_probe_that_hits_the_bug_frees_its_slot_for_the_next_one() -> None:
    """It used to stay taken: after one such probe the variant was refused (circuit_open) for good."""
    now = [100.0]
    gw = gateway(now)
    for _ in range(3):  # a failure opens the breaker; each probe after the cooldown fails again
        with pytest.raises(BackendError) as caught:
            await gw.complete(gw.choose("alone", None, None), REQUEST, "chat")
        assert caught.value.status == 502 and "failed: TypeError" in caught.value.message
        now[0] += 1.5


async def test_a_bug_mid_stream_ends_it_as_a_bad_gateway() -> None:
    gw = gateway([100.0])
    received = []
    stream = await gw.stream(gw.choose("alone", None, None), REQUEST, "chat")
    with pytest.raises(BackendError) as caught:
        async for chunk in stream:
            received.append(chunk.text)
    assert received == ["first"] and "mid-stream: TypeError" in caught.value.message
