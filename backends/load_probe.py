"""Scrape each replica's own Prometheus ``/metrics`` for its load; off the request path.

A background task of ``backends/replica_set.py``: every ``probe_interval_s`` it GETs every
replica's metrics (one small keep-alive :class:`UpstreamPool` per replica, never the
request pools), parses the figures that say how busy the engine is, and reports them per replica
through a callback. Requests never wait on it; they read the last figures it left.

Figures read (a metric the engine does not export stays None)::

    waiting   vllm:num_requests_waiting · Triton nv_inference_pending_request_count
              · Turnout turnout_queue_depth (so another Turnout can be a replica)
    running   vllm:num_requests_running
    kv_usage  vllm:kv_cache_usage_perc (older vLLM: vllm:gpu_cache_usage_perc), a fraction

Series of one metric are summed (several models or engines on one server), except the KV
usage, where the fullest wins. A probe that cannot connect, times out or gets a 5xx says
the replica is down (None); any other answer says it is up, with figures from a 200 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from backends.upstream_pool import UpstreamError, UpstreamPool

log = logging.getLogger("turnout")

_WAITING = ("vllm:num_requests_waiting", "nv_inference_pending_request_count", "turnout_queue_depth")
_RUNNING = ("vllm:num_requests_running",)
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_NAMES = (*_WAITING, *_RUNNING, *_KV)
_NAME_SET = frozenset(_NAMES)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """What one scrape said about an engine's load (None: not exported)."""

    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None


NO_FIGURES = EngineLoad()


def metrics_url(base_url: str, path: str = "/metrics") -> str:
    """The server root of an OpenAI base URL (its trailing ``/v1`` dropped) joined with ``path``."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + path


def parse_load(text: str) -> EngineLoad:
    """Prometheus text exposition → :class:`EngineLoad`; malformed text gives no figures."""
    # Only the few lines that matter go to the (pure-Python) parser: a vLLM page is mostly
    # histogram buckets, and this keeps a scrape to a line scan on the event loop.
    wanted = "\n".join(line for line in text.split("\n") if line.startswith(_NAMES))
    if not wanted:
        return NO_FIGURES
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(wanted + "\n"):
            for sample in family.samples:
                value = float(sample.value)
                if sample.name not in _NAME_SET or math.isnan(value):
                    continue
                prior = found.get(sample.name)
                if prior is None:
                    found[sample.name] = value
                else:
                    found[sample.name] = max(prior, value) if sample.name in _KV else prior + value
    except ValueError:
        return NO_FIGURES

    def first(names: tuple[str, ...]) -> float | None:
        return next((found[name] for name in names if name in found), None)

    return EngineLoad(waiting=first(_WAITING), running=first(_RUNNING), kv_usage=first(_KV))


_PROBE_HEADERS = {"accept": "text/plain", "user-agent": "turnout-load-probe"}


def _pool_for(url: str, timeout: float) -> tuple[UpstreamPool, str]:
    """A two-connection pool on ``url``'s origin, and the request target (path and query)."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    origin = f"{parts.scheme}://{parts.netloc}"
    pool = UpstreamPool(
        origin,
        limit=2,
        connect_timeout=timeout,
        read_timeout=timeout,
        pool_timeout=timeout,
        headers=_PROBE_HEADERS,
    )
    return pool, target


# (replica index, its load or None when the probe failed, monotonic time the round started)
ProbeReport = Callable[[int, EngineLoad | None, float], None]


class LoadProbe:
    """Scrape ``urls`` every ``interval`` seconds; report each result to ``on_result``."""

    def __init__(
        self,
        urls: Sequence[str],
        interval: float,
        timeout: float,
        on_result: ProbeReport,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.urls = list(urls)
        self.interval, self.timeout = interval, timeout
        self.on_result = on_result
        self.clock = clock
        self.rounds = 0
        self._pools: list[tuple[UpstreamPool, str]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._pools is None:
            self._pools = [_pool_for(url, self.timeout) for url in self.urls]
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="turnout-load-probe")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pools, self._pools = self._pools, None
        for pool, _ in pools or ():
            await pool.close()

    async def probe_once(self) -> None:
        """One round: every replica at once; each reports as soon as the round is done."""
        started = self.clock()
        results = await asyncio.gather(*(self._scrape(index) for index in range(len(self.urls))))
        for index, load in enumerate(results):
            self.on_result(index, load, started)
        self.rounds += 1

    async def _scrape(self, index: int) -> EngineLoad | None:
        if self._pools is None:
            return None
        pool, target = self._pools[index]
        try:
            async with asyncio.timeout(self.timeout):  # the whole scrape, as well as each wait
                resp = await pool.send("GET", target)
                try:
                    body = await resp.read()  # read whole, so the connection serves the next round
                finally:
                    resp.release()
        except (UpstreamError, TimeoutError, OSError):
            return None
        if resp.status >= 500:
            return None
        if resp.status != 200:
            return NO_FIGURES  # up, but nothing to read there
        return parse_load(body.decode("utf-8", errors="replace"))

    async def _run(self) -> None:
        while True:
            try:
                await self.probe_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop balancing: log it and go on
                log.exception("load probe round failed")
            await asyncio.sleep(self.interval)
