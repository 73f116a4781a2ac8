"""Scrape each replica's own Prometheus ``/metrics`` for its load; off the request path.

A background task of ``backends/replica_set.py``: every ``probe_interval_s`` it GETs every
replica's metrics (one small keep-alive ``aiohttp`` session of its own, never the request
pools), parses the figures that say how busy the engine is, and reports them per replica
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

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

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
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(_NAMES))
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
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=max(4, len(self.urls)), limit_per_host=2),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"accept": "text/plain", "user-agent": "turnout-load-probe"},
                trust_env=False,
            )
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="turnout-load-probe")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def probe_once(self) -> None:
        """One round: every replica at once; each reports as soon as the round is done."""
        started = self.clock()
        results = await asyncio.gather(*(self._scrape(url) for url in self.urls))
        for index, load in enumerate(results):
            self.on_result(index, load, started)
        self.rounds += 1

    async def _scrape(self, url: str) -> EngineLoad | None:
        session = self._session
        if session is None:
            return None
        try:
            async with session.get(url) as resp:
                if resp.status >= 500:
                    return None
                if resp.status != 200:
                    return NO_FIGURES  # up, but nothing to read there
                text = await resp.text(errors="replace")
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None
        return parse_load(text)

    async def _run(self) -> None:
        while True:
            try:
                await self.probe_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop balancing: log it and go on
                log.exception("load probe round failed")
            await asyncio.sleep(self.interval)
