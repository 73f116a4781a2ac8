"""Recent per-request outcomes per (route, variant), kept for the canary controller.

``serving.gateway`` records one :class:`~serving.routing.canary.Sample` per attempt on a
route that has a canary running; ``serving.canary_controller`` asks for the summary of the
samples since the current step began and hands it to the pure judge. Bounded: old samples fall
off. Under Ray Serve, :class:`SharedObservationLog` makes every gateway replica judge on all
replicas' samples: each sends its new ones, tagged so a resend is not counted twice, to a shared
keeper (``serving.ray_deployments.SampleKeeper``) once a tick, and gets back the summaries the
judge needs, computed there over everyone's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable

from serving.routing.canary import Sample, WindowStats, summarize

log = logging.getLogger("turnout.canary")

Key = tuple[str, str]  # (route, variant)
SampleId = tuple[str, int]  # (gateway replica, its sequence number)
Tagged = tuple[str, str, SampleId, Sample]  # (route, variant, id, sample)
# What a shared keeper takes (this replica's new samples, and since when each (route, variant)
# is judged) and gives back (each one's summary over every replica's samples since then).
Exchange = Callable[[list[Tagged], dict[Key, float]], Awaitable[dict[Key, WindowStats]]]
EXCHANGE_TIMEOUT_S = 2.0


def counts_as_error(status: int) -> bool:
    """For SLOs: server-side failures and overload count; client mistakes do not."""
    return status >= 500 or status == 429


class ObservationLog:
    def __init__(self, max_per_variant: int = 20_000) -> None:
        self._max = max_per_variant
        self._samples: dict[tuple[str, str], deque[Sample]] = {}

    def record(self, route: str, variant: str, sample: Sample) -> None:
        window = self._samples.get((route, variant))
        if window is None:
            window = self._samples[(route, variant)] = deque(maxlen=self._max)
        window.append(sample)

    def since(self, route: str, variant: str, start: float) -> list[Sample]:
        window = self._samples.get((route, variant))
        if not window:
            return []
        return [s for s in window if s.at >= start]

    def stats(self, route: str, variant: str, start: float) -> WindowStats:
        """The judge's summary of the samples since ``start``."""
        return summarize(self.since(route, variant, start))

    def forget(self, route: str) -> None:
        for key in [k for k in self._samples if k[0] == route]:
            del self._samples[key]

    async def sync(self, judged: dict[Key, float]) -> None:
        """Before the controller reads (``judged``: since when each (route, variant) is judged):
        nothing to do for one process's own samples."""


class SharedObservationLog(ObservationLog):
    """Every gateway replica's samples, summarised by a shared keeper; this replica's own are
    kept too, and judged on alone while the keeper cannot be reached."""

    def __init__(self, exchange: Exchange, max_per_variant: int = 20_000) -> None:
        super().__init__(max_per_variant)
        self._exchange = exchange
        self._replica = uuid.uuid4().hex
        self._numbers = itertools.count()
        self._outbox: deque[Tagged] = deque(maxlen=max_per_variant)
        self._shared: dict[Key, tuple[float, WindowStats]] = {}  # key → (since, summary)

    def record(self, route: str, variant: str, sample: Sample) -> None:
        super().record(route, variant, sample)
        self._outbox.append((route, variant, (self._replica, next(self._numbers)), sample))

    async def sync(self, judged: dict[Key, float]) -> None:
        sending = list(self._outbox)
        self._outbox.clear()
        try:
            summaries = await asyncio.wait_for(self._exchange(sending, dict(judged)), EXCHANGE_TIMEOUT_S)
        except Exception as exc:  # the keeper slow or restarting: judge on this replica's own meanwhile
            log.debug("shared canary samples not exchanged: %s", exc)
            self._outbox.extendleft(reversed(sending))  # sent again: the keeper drops what it has
            self._shared = {}
            return
        self._shared = {key: (judged[key], found) for key, found in summaries.items() if key in judged}

    def stats(self, route: str, variant: str, start: float) -> WindowStats:
        shared = self._shared.get((route, variant))
        if shared is None or shared[0] != start:
            return super().stats(route, variant, start)
        return shared[1]
