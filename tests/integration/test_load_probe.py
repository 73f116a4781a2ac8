"""``backends/load_probe.py`` scraping real sockets on 127.0.0.1 that answer scripted metrics.

The balancing tests (``test_replica_balancing.py``, ``test_triton_replicas.py``) show the
figures steering traffic; these pin the scrape itself: what it asks for, that one kept-alive
connection serves round after round, and what each failure reports (None: the replica is
down; no figures: up, with nothing to read).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from backends.load_probe import NO_FIGURES, EngineLoad, LoadProbe
from tests.integration.test_upstream_pool import Upstream, upstream

VLLM_PAGE = (
    b"# HELP vllm:num_requests_waiting waiting\n# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{model_name="m"} 3.0\n'
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 5.0\n'
    b"# TYPE vllm:kv_cache_usage_perc gauge\n"
    b'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
)

Reply = Callable[[Upstream, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def answer(status: int, body: bytes) -> Reply:
    """Every request on a connection answered ``status`` with ``body``, kept alive."""

    async def reply(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await up.read_request(reader)
            head = f"HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            await writer.drain()

    return reply


@asynccontextmanager
async def probing(urls: list[str], timeout: float = 1.0) -> AsyncIterator[tuple[LoadProbe, list]]:
    """A started probe, its first (automatic) round done and forgotten; the interval is long,
    so the rounds after it are the test's own."""
    reports: list[tuple[int, EngineLoad | None]] = []
    probe = LoadProbe(
        urls, interval=3600, timeout=timeout, on_result=lambda i, load, _: reports.append((i, load))
    )
    await probe.start()
    try:
        async with asyncio.timeout(10):
            while probe.rounds < 1:
                await asyncio.sleep(0.01)
        reports.clear()
        yield probe, reports
    finally:
        await probe.close()


async def test_figures_are_read_over_one_kept_alive_connection() -> None:
    async with (
        upstream(answer(200, VLLM_PAGE)) as up,
        probing([f"http://127.0.0.1:{up.port}/metrics?x=1"]) as (
            probe,
            reports,
        ),
    ):
        for _ in range(3):
            await probe.probe_once()
        assert [load for _, load in reports] == [EngineLoad(waiting=3.0, running=5.0, kv_usage=0.25)] * 3
        assert up.connections == 1  # all four rounds (the automatic one too) on one connection
        first = up.heads[0].decode()
        assert first.startswith("GET /metrics?x=1 HTTP/1.1\r\n")
        assert "accept: text/plain" in first and "user-agent: turnout-load-probe" in first


async def test_a_5xx_says_down_and_another_status_says_up_without_figures() -> None:
    async with (
        upstream(answer(503, b"busy")) as down,
        upstream(answer(404, b"no metrics here")) as bare,
        probing([f"http://127.0.0.1:{down.port}/metrics", f"http://127.0.0.1:{bare.port}/metrics"]) as (
            probe,
            reports,
        ),
    ):
        await probe.probe_once()
    assert sorted(reports, key=lambda r: r[0]) == [(0, None), (1, NO_FIGURES)]
    assert down.connections == bare.connections == 1  # the error bodies are read: no reconnects


async def test_a_stalled_or_refused_replica_says_down_within_the_timeout() -> None:
    async def stall(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nvllm:num_requests_waiting 1\n")
        await asyncio.sleep(30)  # the body never ends

    async with upstream(stall) as stalled:
        closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        refused_port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()
        urls = [f"http://127.0.0.1:{stalled.port}/metrics", f"http://127.0.0.1:{refused_port}/metrics"]
        async with probing(urls, timeout=0.5) as (probe, reports):
            started = time.monotonic()
            await probe.probe_once()
            took = time.monotonic() - started
    assert sorted(reports, key=lambda r: r[0]) == [(0, None), (1, None)]
    assert took < 5.0  # bounded by the 0.5 s timeout (generous for a busy machine)


async def test_a_replica_that_comes_back_is_read_again() -> None:
    serving = {"up": False}

    async def flaky(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not serving["up"]:
            writer.close()  # hang up before answering
            return
        await answer(200, VLLM_PAGE)(up, reader, writer)

    async with upstream(flaky) as up, probing([f"http://127.0.0.1:{up.port}/metrics"]) as (probe, reports):
        await probe.probe_once()
        serving["up"] = True
        await probe.probe_once()
    assert [load for _, load in reports] == [None, EngineLoad(waiting=3.0, running=5.0, kv_usage=0.25)]
