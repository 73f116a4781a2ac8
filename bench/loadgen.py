"""The benchmarks' load generator: raw asyncio + uvloop + httptools HTTP/1.1 keep-alive clients.

Beside every path a benchmark measures (load generator → [gateway] → upstream): ``Conn`` sends
prepared request bytes and times the answer (to its first body byte and to its end),
``run_phase``/``closed_loop`` run a closed loop at a concurrency for a count or a time, and ``interleaved``
runs concurrency 1 on several servers in turn, round after round, so that the machine's drift
between minutes falls on all of them alike. Measured here at well over 10,000 req/s on one
core, so the server under test is the bottleneck. No httpx: its per-request cost would be in
every figure.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httptools

T = TypeVar("T")
_TAIL = 4096


class Conn(asyncio.Protocol):
    """One keep-alive client connection; ``request()`` sends bytes and times the answer."""

    def __init__(self, keep_tail: bool = False) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.first = 0
        self.closed = False
        self.keep_alive = True
        self.keep_tail = keep_tail  # keep the answer's last body bytes (``tail``), e.g. a stream's usage
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # not reliable once the body is parsed

    def on_body(self, body: bytes) -> None:
        if not self.first:  # the first body byte: for a stream, its first SSE event
            self.first = time.perf_counter_ns()
        if self.keep_tail:
            self.tail = (self.tail + body)[-_TAIL:]

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def request(self, data: bytes) -> tuple[int, int, int]:
        """(status, ns to first byte of the answer, ns to its end)."""
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.first = 0
        self.tail = b""
        start = time.perf_counter_ns()
        self.transport.write(data)
        await self.done
        end = time.perf_counter_ns()
        return self.parser.get_status_code(), self.first - start, end - start


@dataclass
class PhaseResult:
    latencies_ns: list[int] = field(default_factory=list)
    ttfb_ns: list[int] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0

    def pct(self, which: str, q: float) -> float:
        values = sorted(self.ttfb_ns if which == "ttfb" else self.latencies_ns)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q * len(values)))] / 1e6

    @property
    def rps(self) -> float:
        return len(self.latencies_ns) / self.seconds if self.seconds else 0.0


async def _worker(
    port: int,
    data: bytes,
    budget: list[int],
    deadline: float,
    out: PhaseResult,
    jitter_s: float,
    slots: list[Conn | None],
    slot: int,
) -> None:
    loop = asyncio.get_running_loop()
    conn = slots[slot]
    while budget[0] > 0 and time.perf_counter() < deadline:
        budget[0] -= 1
        if jitter_s:
            await asyncio.sleep(random.uniform(0, jitter_s))
        if conn is None or conn.closed:
            _, conn = await loop.create_connection(Conn, "127.0.0.1", port)
        try:
            status, first, total = await asyncio.wait_for(conn.request(data), 30)
        except (ConnectionError, TimeoutError):
            out.errors += 1
            conn = None
            continue
        if status != 200:
            out.errors += 1
        else:
            out.latencies_ns.append(total)
            out.ttfb_ns.append(first)
        if not conn.keep_alive and conn.transport is not None:
            conn.transport.close()
            conn = None
    slots[slot] = conn


async def run_phase(
    port: int, data: bytes, concurrency: int, count: int, seconds: float, warmup: int
) -> PhaseResult:
    """Closed loop: ``concurrency`` connections send until ``count`` answers or ``seconds`` pass."""
    await closed_loop(port, data, concurrency, warmup, 30.0)
    return await closed_loop(port, data, concurrency, count, seconds)


async def closed_loop(
    port: int,
    data: bytes,
    concurrency: int,
    count: int,
    seconds: float,
    jitter_s: float = 0.0,
    conns: list[Conn | None] | None = None,
) -> PhaseResult:
    """``concurrency`` keep-alive connections send until ``count`` answers or ``seconds`` pass,
    each waiting a random 0..``jitter_s`` before each request. With ``conns`` (one slot per
    worker) the connections are taken from and left in it; without, they are closed."""
    result, budget = PhaseResult(), [count]
    slots: list[Conn | None] = conns if conns is not None else [None] * concurrency
    start = time.perf_counter()
    await asyncio.gather(
        *(
            _worker(port, data, budget, start + seconds, result, jitter_s, slots, slot)
            for slot in range(concurrency)
        )
    )
    result.seconds = time.perf_counter() - start
    if conns is None:
        for conn in slots:
            if conn is not None and conn.transport is not None:
                conn.transport.close()
    return result


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` run to the end on a fresh uvloop loop (asyncio's where uvloop is missing)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def interleaved(
    targets: dict[str, tuple[int, bytes]],
    rounds: int,
    count: int,
    seconds: float,
    warmup: int,
    first_warmup: int,
    rotate: int = 0,
) -> dict[str, list[PhaseResult]]:
    """Concurrency 1 on each (port, request) of ``targets`` in turn, ``rounds`` times, the first
    one rotating (starting ``rotate`` places on): ``count`` answers (at most ``seconds``) each
    time, after ``warmup`` unmeasured ones (``first_warmup`` before the first round). Every
    target's result, round by round."""
    for port, data in targets.values():
        await closed_loop(port, data, 1, first_warmup, 60.0)
    names = list(targets)
    results: dict[str, list[PhaseResult]] = {name: [] for name in targets}
    for index in range(rounds):
        shift = (index + rotate) % len(names)
        for name in names[shift:] + names[:shift]:
            port, data = targets[name]
            results[name].append(await run_phase(port, data, 1, count, seconds, warmup))
    return results
