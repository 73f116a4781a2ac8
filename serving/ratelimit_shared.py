"""Per-key rate limits across gateway replicas: one shared counter instead of one per replica.

Sits at the client API edge (``serving.access``). A single gateway counts in-process
(:class:`LocalLimiter` around ``serving.ratelimit.RateLimiter``). N replicas counting that way
would admit N·L per window, so under Ray Serve (``serving.ray_app``) every replica asks one
counter, :class:`SharedLimiter`, before each limited request. The counter is a one-replica Ray
Serve deployment (``serving.ray_deployments.TurnoutRateCounter``) holding the same token buckets:
a named actor that Serve itself health-checks, restarts and deploys with the application (it
appears in the rendered Serve config), needs no extra service, and answers in about a
millisecond, which only keys with limits pay. The route store's database was the other
candidate: it would survive restarts, but costs a write transaction per limited request, and
SQLite would serialise every replica on one file lock.

When the counter does not answer within ``timeout_s`` the replica says so
(``turnout_ratelimit_shared_unreachable_total``, one per decision made without it, and a warning
in the log, at most one per ``LOG_EVERY_S``) and counts locally with each limit divided by the
number of replicas, so the replicas together still admit at most L per window (fewer if traffic
is uneven). For ``retry_s`` after a miss it does not ask the counter at all (a dead counter costs
one timeout per ``retry_s``, not one per request), then tries again. Two edges, both bounded:
an answer that came too late may still have been counted there (the key is charged twice, never
admitted twice), and a counter that restarts starts with full buckets, as a restarted
single gateway does, so in the window of a switch a key can get up to 2L.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from serving.ratelimit import RateLimiter

log = logging.getLogger("turnout")

LOG_EVERY_S = 10.0


class Limiter(Protocol):
    """What ``serving.access`` asks: may this key's request start, and what did it spend."""

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None: ...

    def charge(self, key: str, tokens: int, tpm: int | None) -> None: ...


class Counter(Protocol):
    """The shared counter's interface (a Ray Serve handle in production, anything async in tests)."""

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None: ...

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None: ...


class LocalLimiter:
    """This process's token buckets; ``divide`` splits every limit (the shared limiter's fallback)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, divide: int = 1) -> None:
        self.buckets = RateLimiter()
        self._clock = clock
        self._divide = max(1, divide)

    def _share(self, limit: int | None) -> int | None:
        return None if limit is None else limit // self._divide

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        return self.admit_now(key, rpm, tpm)

    def admit_now(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        return self.buckets.admit(key, self._share(rpm), self._share(tpm), self._clock())

    def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        self.buckets.charge_tokens(key, tokens, self._share(tpm), self._clock())


class SharedLimiter:
    """Ask the shared counter; when it cannot be reached, count locally at L / replicas."""

    def __init__(
        self,
        counter: Counter,
        replicas: int,
        on_unreachable: Callable[[], None],
        *,
        timeout_s: float = 0.5,
        retry_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counter = counter
        self.fallback = LocalLimiter(clock, divide=replicas)
        self._on_unreachable = on_unreachable
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._clock = clock
        self._last_log = float("-inf")
        self._down_until = float("-inf")
        self._pending: set[asyncio.Task[None]] = set()

    def counter_down(self) -> bool:
        """True while a recent miss makes this replica count locally without asking."""
        return self._clock() < self._down_until

    def _unreachable(self, exc: BaseException) -> None:
        self._on_unreachable()
        now = self._clock()
        self._down_until = now + self._retry_s
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            why = str(exc) or f"no answer within {self._timeout_s} s"
            log.warning(
                "shared rate-limit counter unreachable (%s: %s); counting per replica at limit / replicas",
                type(exc).__name__,
                why,
            )

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        if self.counter_down():
            self._on_unreachable()
            return self.fallback.admit_now(key, rpm, tpm)
        try:
            return await asyncio.wait_for(self.counter.admit(key, rpm, tpm), self._timeout_s)
        except Exception as exc:  # any failure to get an answer: the counter is unreachable
            self._unreachable(exc)
            return self.fallback.admit_now(key, rpm, tpm)

    def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        if self.counter_down():
            self.fallback.charge(key, tokens, tpm)
            return
        task = asyncio.get_running_loop().create_task(self._charge(key, tokens, tpm))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _charge(self, key: str, tokens: int, tpm: int | None) -> None:
        try:
            await asyncio.wait_for(self.counter.charge(key, tokens, tpm), self._timeout_s)
        except Exception as exc:
            self._unreachable(exc)
            self.fallback.charge(key, tokens, tpm)
