"""Work cancelled because its client left counts as a 499; work cut by the server going down
(uvicorn's graceful shutdown, a Ray replica's drain) counts as the 503 its client is told.
Neither is a canary sample: it says nothing of the variant.

The backend is an in-process object on purpose: the test cancels one request at a chosen
point, with and without the API layer's client-left message, which a real shutdown can only
do once per process (tests/integration/test_graceful_shutdown.py checks what clients get).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from backends.base import Chunk, Completion, GenerateRequest
from serving.config import GatewayConfig
from serving.errors import CLIENT_LEFT
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics
from tests.unit.inprocess_backend import REQUEST, InProcessBackend

OPENAI = {"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
PLAN = {"stable": "a", "canary": "b", "steps": [100], "gates": [{"metric": "error_rate", "max": 0.1}]}
CONFIG = {  # a canary at 100%: every request goes to b, and a judged one would be b's sample
    "variants": {"a": OPENAI, "b": OPENAI},
    "routes": {"r": {"targets": [{"variant": "a"}], "canary": PLAN}},
}  # fmt: skip


class Hanging(InProcessBackend):
    """Answers nothing until cancelled; a stream sends one chunk first."""

    async def complete(self, request: GenerateRequest) -> Completion:
        await asyncio.Event().wait()
        raise AssertionError("never answers")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        yield Chunk("first")
        await asyncio.Event().wait()


def _counted(metrics: GatewayMetrics, variant: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "turnout_requests_total" and sample.labels["variant"] == variant:
                counts[sample.labels["status"]] = sample.value
    return counts


@pytest.mark.parametrize(("message", "status"), [(CLIENT_LEFT, "499"), (None, "503")])
@pytest.mark.parametrize("stream", [False, True])
async def test_cancelled_work_counts_as_the_client_left_or_the_server_cut_it(
    message: str | None, status: str, stream: bool
) -> None:
    metrics = GatewayMetrics()
    gw = Gateway(GatewayConfig.model_validate(CONFIG), {"a": Hanging(), "b": Hanging()}, metrics)
    routed = gw.choose("r", "user-1", None)
    variant = routed.decision.primary
    assert variant == "b"

    async def ask() -> None:
        if stream:
            async for _ in await gw.stream(routed, REQUEST, "chat"):
                pass
        else:
            await gw.complete(routed, REQUEST, "chat")

    task = asyncio.ensure_future(ask())
    await asyncio.sleep(0.01)  # in flight (a stream past its first chunk)
    task.cancel(message)
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)  # the bookkeeping runs after the answer is out
    assert _counted(metrics, variant) == {status: 1.0}
    assert gw.observations.since("r", variant, 0.0) == []  # not judged either way
