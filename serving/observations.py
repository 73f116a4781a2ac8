"""Recent per-request outcomes per (route, variant), kept for the canary controller.

``serving.gateway`` records one :class:`~serving.routing.canary.Sample` per attempt on a
route that has a canary running; ``serving.canary_controller`` reads the samples since the
current step began and hands them to the pure judge. Bounded: old samples fall off.
Under Ray Serve, :class:`SharedObservationLog` makes every gateway replica judge on all of
them: each sends its own to a shared keeper once a tick and reads everyone's back.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from serving.routing.canary import Sample

log = logging.getLogger("turnout.canary")

Key = tuple[str, str]  # (route, variant)
# What a shared keeper takes (this replica's new samples, the routes to forget) and gives back
# (every replica's samples per (route, variant)).
Exchange = Callable[[list[tuple[str, str, Sample]], list[str]], Awaitable[dict[Key, list[Sample]]]]
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

    def forget(self, route: str) -> None:
        for key in [k for k in self._samples if k[0] == route]:
            del self._samples[key]

    async def sync(self) -> None:
        """Before the controller reads: nothing to do for one process's own samples."""


class SharedObservationLog(ObservationLog):
    """Samples of every gateway replica: this one's are kept (and judged on alone while the
    keeper cannot be reached) and sent to the keeper by :meth:`sync`, which reads all of them."""

    def __init__(self, exchange: Exchange, max_per_variant: int = 20_000) -> None:
        super().__init__(max_per_variant)
        self._exchange = exchange
        self._outbox: deque[tuple[str, str, Sample]] = deque(maxlen=max_per_variant)
        self._forgotten: list[str] = []
        self._everyone: dict[Key, list[Sample]] | None = None

    def record(self, route: str, variant: str, sample: Sample) -> None:
        super().record(route, variant, sample)
        self._outbox.append((route, variant, sample))

    def forget(self, route: str) -> None:
        super().forget(route)
        self._forgotten.append(route)
        self._outbox = deque((s for s in self._outbox if s[0] != route), maxlen=self._outbox.maxlen)
        if self._everyone is not None:
            self._everyone = {key: found for key, found in self._everyone.items() if key[0] != route}

    async def sync(self) -> None:
        sending, forgotten = list(self._outbox), list(self._forgotten)
        self._outbox.clear()
        self._forgotten.clear()
        try:
            self._everyone = await asyncio.wait_for(self._exchange(sending, forgotten), EXCHANGE_TIMEOUT_S)
        except Exception as exc:  # the keeper restarting: judge on this replica's own until it answers
            log.debug("shared canary samples not exchanged: %s", exc)
            self._outbox.extendleft(reversed(sending))
            self._forgotten[:0] = forgotten
            self._everyone = None

    def since(self, route: str, variant: str, start: float) -> list[Sample]:
        if self._everyone is None:
            return super().since(route, variant, start)
        return [s for s in self._everyone.get((route, variant), ()) if s.at >= start]
