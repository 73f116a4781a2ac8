"""The two Ray Serve deployments behind the gateway replicas: an embedded engine, and the rate counter.

Where they sit: Ray Serve's proxy → ``TurnoutGateway`` (``serving.ray_app``) → through deployment
handles → :class:`TurnoutEngine` (one ONNX Runtime GenAI engine per replica, called by
``backends.ray_engine``) and :class:`TurnoutRateCounter` (the per-key token buckets all gateway
replicas share, called by ``serving.ratelimit_shared.SharedLimiter`` through :class:`HandleCounter`).

Engine figures: every engine replica reports its queue depth, decoded tokens and the batch
sizes it formed (cumulative counts) to the counter deployment every ``REPORT_EVERY_S``; the
counter keeps the latest report of each replica, dropping those older than ``STALE_S`` (a
replica that is gone), and every gateway replica reads them from there
(``backends.ray_engine.EngineFigures``) for its ``/metrics``. They go through the counter, not
straight from the engines, because a call through a deployment handle reaches one replica of
Serve's choosing (the least busy), so polling the engines would miss the busy ones.

Gateway pages: every gateway replica publishes its own ``/metrics`` page here every
``serving.ray_app.PAGE_EVERY_S`` (:meth:`TurnoutRateCounter.publish_page`), and on each scrape
it answers publishes it again and gets every live replica's back
(:meth:`TurnoutRateCounter.metrics_pages`), so any replica can answer a scrape for all. Their
shadow records travel the same way (:meth:`TurnoutRateCounter.publish_shadows`,
:meth:`TurnoutRateCounter.shadow_states`), so any replica answers a shadow comparison for all.

Plain classes: ``serving.ray_app`` turns them into deployments with ``serve.deployment``, so
they stay typed and can be exercised without Ray.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from backends.base import Chunk, Completion, Embeddings, EmbedRequest, GenerateRequest, token_counter
from backends.settings import EmbeddedSettings
from serving.observations import Key, SampleId, Tagged
from serving.ratelimit_shared import LocalLimiter
from serving.routing.canary import Sample, WindowStats, summarize

REPORT_EVERY_S = 1.0
STALE_S = 5.0
PAGE_STALE_S = 10.0  # a gateway replica's /metrics page not refreshed this long: the replica is gone
SAMPLES_KEPT = 20_000  # per (route, variant), as serving.observations keeps in one process
SAMPLES_IDLE_S = 300.0


def _replica_id() -> str:
    try:
        from ray import serve

        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # built outside a Serve replica (unit tests)
        return "local"


class TurnoutEngine:
    """One embedded engine in this replica's process; it starts loading as the replica starts."""

    def __init__(self, variant: str, settings: dict[str, Any], board: Any = None) -> None:
        from backends.embedded import EmbeddedBackend

        self.variant = variant
        self.backend = EmbeddedBackend(variant, EmbeddedSettings.model_validate(settings))
        self.replica = _replica_id()
        self._batches: collections.Counter[int] = collections.Counter()
        self._batches_lock = threading.Lock()  # the batcher's worker thread counts, reports read
        self.backend.set_batch_observer(self._count_batch)
        self._board = board
        self._starting: asyncio.Task[None] | None = None
        self._reporting: asyncio.Task[None] | None = None
        # Under Ray Serve the constructor runs inside the replica's event loop; built outside a
        # replica (no loop) the engine starts on the first call instead.
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            self._starting = loop.create_task(self.backend.start())
            if board is not None:
                self._reporting = loop.create_task(self._report())

    def _count_batch(self, size: int) -> None:
        with self._batches_lock:
            self._batches[size] += 1

    def figures(self) -> dict[str, Any]:
        """This replica's engine figures: queue depth, decoded tokens, batches formed by size."""
        with self._batches_lock:
            batches = dict(self._batches)
        return {**self.backend.engine_stats(), "batches": batches}

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(REPORT_EVERY_S)
            try:
                await self._board.report.remote(self.variant, self.replica, self.figures())
            except Exception:  # the counter restarting: the next report gets through
                continue

    async def _started(self) -> Any:
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self.backend.start())
        await asyncio.shield(self._starting)
        return self.backend

    async def ping(self) -> bool:
        """True once the model is loaded (the gateway replicas wait for this before serving)."""
        await self._started()
        return True

    async def complete(self, request: GenerateRequest) -> Completion:
        backend = await self._started()
        result: Completion = await backend.complete(request)
        return result

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        backend = await self._started()
        async for chunk in backend.stream(request):
            yield chunk

    async def embed(self, request: EmbedRequest) -> Embeddings:
        backend = await self._started()
        result: Embeddings = await backend.embed(request)
        return result

    async def count_tokens(self, request: GenerateRequest) -> int:
        backend = await self._started()
        return await token_counter(backend, self.variant).count_tokens(request)


class SampleKeeper:
    """Every gateway replica's canary samples per (route, variant), and their summaries.

    A sample arrives once however often it is sent (its id: the replica and its number; a replica
    whose exchange timed out sends it again). Each (route, variant) keeps its latest
    ``SAMPLES_KEPT``; one nobody has judged for ``SAMPLES_IDLE_S`` (its canary ended) is dropped."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._samples: dict[Key, collections.OrderedDict[SampleId, Sample]] = {}
        self._asked: dict[Key, float] = {}

    def exchange(self, tagged: list[Tagged], judged: dict[Key, float]) -> dict[Key, WindowStats]:
        now = self._clock()
        for route, variant, sample_id, sample in tagged:
            key = (route, variant)
            window = self._samples.setdefault(key, collections.OrderedDict())
            if sample_id not in window:
                window[sample_id] = sample
                if len(window) > SAMPLES_KEPT:
                    window.popitem(last=False)
            self._asked.setdefault(key, now)
        self._asked.update(dict.fromkeys(judged, now))
        for key in [k for k, at in self._asked.items() if now - at > SAMPLES_IDLE_S]:
            del self._asked[key]
            self._samples.pop(key, None)
        return {
            key: summarize(s for s in self._samples.get(key, {}).values() if s.at >= since)
            for key, since in judged.items()
        }


class TurnoutRateCounter:
    """The token buckets of every key, shared by all gateway replicas (one replica, in memory)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.limiter = LocalLimiter()
        self._clock = clock
        self._engines: dict[str, dict[str, tuple[float, dict[str, Any]]]] = {}
        self.samples = SampleKeeper(clock)  # the canary judges' (serving.observations)
        self._pages: dict[str, tuple[float, str]] = {}  # gateway replica → (when, its /metrics page)
        self._shadows: dict[str, tuple[float, dict[str, Any]]] = {}  # gateway replica → (when, shadow record)
        self._drain_began: float | None = None  # when `turnout serve --ray` asked to drain
        self._draining: dict[str, int] = {}  # gateway replica → requests in flight, since the drain

    async def ping(self) -> bool:
        return True

    async def drain(self) -> None:
        """The application is going away: gateway replicas refuse new requests from now on
        (``serving.ray_drain``)."""
        if self._drain_began is None:
            self._drain_began = self._clock()

    async def drain_state(self, replica: str, in_flight: int, draining: bool) -> float | None:
        """A gateway replica's requests in flight in (counted once it refuses new ones: then
        the count can only fall); seconds since the drain began out (None: no drain)."""
        if self._drain_began is None:
            return None
        if draining:
            self._draining[replica] = in_flight
        return float(self._clock() - self._drain_began)

    async def drained(self) -> tuple[int, int]:
        """Gateway replicas heard from since the drain began, and their requests in flight."""
        return len(self._draining), sum(self._draining.values())

    async def report(self, variant: str, replica: str, figures: dict[str, Any]) -> None:
        """An engine replica's latest figures (``TurnoutEngine.figures``)."""
        self._engines.setdefault(variant, {})[replica] = (self._clock(), figures)

    async def engine_figures(self) -> dict[str, dict[str, dict[str, Any]]]:
        """variant → replica → figures, of the replicas that reported within ``STALE_S``."""
        now = self._clock()
        for replicas in self._engines.values():
            for replica in [r for r, (at, _) in replicas.items() if now - at > STALE_S]:
                del replicas[replica]
        found = self._engines.items()
        return {variant: {r: f for r, (_, f) in replicas.items()} for variant, replicas in found}

    async def publish_page(self, replica: str, page: str) -> None:
        """A gateway replica's latest ``/metrics`` page (its periodic publish: nothing comes back)."""
        now = self._clock()
        self._pages[replica] = (now, page)
        for gone in [r for r, (at, _) in self._pages.items() if now - at > PAGE_STALE_S]:
            del self._pages[gone]

    async def metrics_pages(self, replica: str, page: str) -> dict[str, str]:
        """A gateway replica's latest ``/metrics`` page in; every live replica's out (those that
        published within ``PAGE_STALE_S``), for the merged page of a scrape
        (``serving.metrics_merge``)."""
        await self.publish_page(replica, page)
        return {r: text for r, (_, text) in self._pages.items()}

    async def publish_shadows(self, replica: str, state: dict[str, Any] | None, in_flight: int) -> bool:
        """A gateway replica's shadow record (``ShadowRecorder.state``), or None for "unchanged
        since my last", with its copies in flight. False: no earlier record is here to keep (the
        counter restarted, or it went stale), so the replica sends its record in full next time."""
        now = self._clock()
        for gone in [r for r, (at, _) in self._shadows.items() if now - at > PAGE_STALE_S]:
            del self._shadows[gone]
        if state is None:
            kept = self._shadows.get(replica)
            if kept is None:
                return False
            state = kept[1]
        self._shadows[replica] = (now, {**state, "in_flight": in_flight})
        return True

    async def shadow_states(self, replica: str, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """A gateway replica's shadow record in (with ``in_flight``); every live replica's out
        (those heard from within ``PAGE_STALE_S``), for one comparison over all
        (``serving.shadow_merge``)."""
        await self.publish_shadows(replica, state, int(state.get("in_flight", 0)))
        return {r: found for r, (_, found) in self._shadows.items()}

    async def observations(self, tagged: list[Tagged], judged: dict[Key, float]) -> dict[Key, WindowStats]:
        """A gateway replica's new canary samples in, the judge's summaries over every replica's
        out (``serving.observations.SharedObservationLog``)."""
        return self.samples.exchange(tagged, judged)

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        return self.limiter.admit_now(key, rpm, tpm)

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        self.limiter.charge(key, tokens, tpm)


class HandleCounter:
    """``serving.ratelimit_shared.Counter`` over the counter deployment's handle."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        answer: float | None = await self.handle.admit.remote(key, rpm, tpm)
        return answer

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        await self.handle.charge.remote(key, tokens, tpm)
