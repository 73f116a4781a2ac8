"""The stream pace metric (``turnout_time_per_output_token_seconds``) counts tokens, not chunks.

An upstream may put several tokens in one chunk (vLLM merges deltas while its client lags; the
embedded engine holds back a character's first bytes or a possible stop sequence), so the
usage's count is the divisor when the stream has one. The adapter is in-process on purpose:
what is tested is the gateway's arithmetic over a stream of a known shape and clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from backends.base import Chunk, Completion, GenerateRequest, Usage
from serving.config import GatewayConfig
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics
from tests.unit.inprocess_backend import REQUEST, InProcessBackend


class Merging(InProcessBackend):
    """Ten tokens in three chunks, one second apart, with or without the usage at the end."""

    def __init__(self, now: list[float], usage: bool) -> None:
        self.now, self.usage = now, usage

    async def complete(self, request: GenerateRequest) -> Completion:
        raise NotImplementedError

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        yield Chunk("one ")
        self.now[0] += 1.0
        yield Chunk("two three four five ")
        self.now[0] += 1.0
        yield Chunk("six seven eight nine ten", "length", Usage(3, 10) if self.usage else None)


async def pace(kind: type[Merging], usage: bool = True) -> tuple[list[Chunk], float, float]:
    """The chunks a stream from ``kind`` handed on, and the pace metric's sum and count after it."""
    now = [100.0]
    upstream = {"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    config = GatewayConfig.model_validate(
        {"variants": {"v": upstream}, "routes": {"r": {"targets": [{"variant": "v"}]}}}
    )
    gw = Gateway(config, {"v": kind(now, usage)}, GatewayMetrics(), clock=lambda: now[0])
    stream = await gw.stream(gw.choose("r", None, None), REQUEST, "chat")
    chunks = [chunk async for chunk in stream]
    series = gw.metrics.per_token.labels("r", "v", "chat")
    await asyncio.sleep(0)  # the observation is made after the last chunk is handed on
    return chunks, series._sum.get(), sum(b.get() for b in series._buckets)


async def test_a_stream_with_usage_is_paced_per_token_after_the_first() -> None:
    chunks, total, count = await pace(Merging)
    assert "".join(c.text for c in chunks) == "one two three four five six seven eight nine ten"
    assert count == 1 and total == 2.0 / 9  # two seconds over the nine tokens after the first


async def test_a_stream_in_one_text_chunk_has_no_pace() -> None:
    """A Triton model that is not decoupled answers all its text at once: no 0 s/token sample."""
    chunks, _, count = await pace(AllAtOnce)
    assert [c.text for c in chunks] == ["ten tokens of text", ""] and count == 0


async def test_a_stream_of_tool_call_deltas_is_paced_too() -> None:
    """No text at all, ten deltas: it has a pace (counting text chunks alone left it out)."""
    chunks, total, count = await pace(ToolCalls)
    assert len(chunks) == 10 and count == 1 and total == 9.0 / 9


class ToolCalls(Merging):
    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        for index in range(9):
            yield Chunk(extra={"tool_calls": [{"index": 0, "function": {"arguments": str(index)}}]})
            self.now[0] += 1.0
        yield Chunk("", "tool_calls", Usage(3, 10), extra={"tool_calls": [{"index": 0}]})


class AllAtOnce(Merging):
    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        yield Chunk("ten tokens of text")
        yield Chunk("", "length", Usage(3, 10))


async def test_a_stream_without_usage_is_paced_per_text_chunk() -> None:
    chunks, total, count = await pace(Merging, usage=False)
    assert len(chunks) == 3 and count == 1 and total == 2.0 / 2
