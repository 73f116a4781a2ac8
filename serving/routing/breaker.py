"""Per-variant circuit breaker: a pure state machine the gateway consults before each attempt.

Sits inside ``serving.gateway``'s call loop, after ``serving.routing.policy`` has chosen the
primary and fallbacks: the gateway holds one breaker per variant, asks :meth:`CircuitBreaker.allow`
before calling a variant (skipping to the next fallback when it says no) and reports every
outcome with :meth:`CircuitBreaker.record`. Time is passed in as seconds; nothing here reads the
clock, so every transition is unit-tested as values in, values out.

States:

- ``closed``: every attempt is allowed. It opens after ``consecutive_failures`` failures in a row,
  or when, on a failure, the last ``window`` outcomes hold at least ``min_requests`` outcomes and
  their failure share reaches ``error_rate``.
- ``open``: no attempt is allowed until ``cooldown_s`` has passed since it opened; then it is
  ``half_open``. Outcomes recorded while open (requests started before it opened) are ignored.
  So are those of attempts that started before it last opened and end later, once it is
  half-open or closed again: a slow request sent to the sick backend is not a probe's answer.
- ``half_open``: up to ``half_open_probes`` attempts may be in flight at once; each ``allow()``
  that returns True counts as one. A success closes the breaker with a fresh window; a failure
  opens it again with a new cooldown from that moment. The caller must record the outcome of
  every allowed probe, or :meth:`CircuitBreaker.release` it when the attempt ended without
  one (e.g. the client hung up), or the probe slot stays taken.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

__all__ = ["BreakerSettings", "BreakerState", "CircuitBreaker"]

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    consecutive_failures: int = 5  # open after this many failures in a row
    error_rate: float = 0.5  # ...or when the failure share of the last `window` outcomes reaches this
    window: int = 20
    min_requests: int = 10  # ...with at least this many outcomes in the window
    cooldown_s: float = 10.0  # open → half_open after this long
    half_open_probes: int = 1  # probes allowed at once while half-open


class CircuitBreaker:
    """One variant's breaker; see the module docstring for the rules."""

    def __init__(self, settings: BreakerSettings) -> None:
        self._settings = settings
        self._state: BreakerState = "closed"
        self._opened_at = 0.0
        self._consecutive = 0
        self._outcomes: deque[bool] = deque(maxlen=settings.window)  # True = failure
        self._probes_in_flight = 0
        self._opened_count = 0
        self._reason: str | None = None

    @property
    def opened_count(self) -> int:
        """How many times the breaker has opened (for metrics)."""
        return self._opened_count

    @property
    def reason(self) -> str | None:
        """Why it last opened, e.g. ``"5 consecutive failures"``; None if it never has."""
        return self._reason

    def state(self, now: float) -> BreakerState:
        """The state at ``now``: an open breaker reports ``half_open`` once its cooldown has passed."""
        if self._state == "open" and now - self._opened_at >= self._settings.cooldown_s:
            self._state = "half_open"
            self._probes_in_flight = 0
        return self._state

    def allow(self, now: float) -> bool:
        """Whether an attempt may go to this variant now (a True while half-open takes a probe slot)."""
        state = self.state(now)
        if state == "closed":
            return True
        if state == "open" or self._probes_in_flight >= self._settings.half_open_probes:
            return False
        self._probes_in_flight += 1
        return True

    def record(self, ok: bool, now: float, started: float | None = None) -> None:
        """Record one attempt's outcome (``ok=False`` for a failure the caller counts against the
        variant); ``started``: when that attempt was allowed (an outcome from before the breaker
        last opened is stale and ignored)."""
        if self._stale(started):
            return
        state = self.state(now)
        if state == "half_open":
            if ok:
                self._close()
            else:
                self._open(now, "probe failed while half-open")
            return
        if state == "open":
            return
        self._outcomes.append(not ok)
        if ok:
            self._consecutive = 0
            return
        self._consecutive += 1
        settings = self._settings
        failures = sum(self._outcomes)
        seen = len(self._outcomes)
        if self._consecutive >= settings.consecutive_failures:
            self._open(now, f"{self._consecutive} consecutive failures")
        elif seen >= settings.min_requests and failures / seen >= settings.error_rate:
            self._open(now, f"error rate {failures / seen:.0%} over last {seen}")

    def retry_in(self, now: float) -> float:
        """Seconds until an attempt may go again: the rest of an open breaker's cooldown; while
        half-open with its probes taken, one second (the probe's own answer decides); else 0."""
        state = self.state(now)
        if state == "open":
            return self._settings.cooldown_s - (now - self._opened_at)
        if state == "half_open" and self._probes_in_flight >= self._settings.half_open_probes:
            return 1.0
        return 0.0

    def release(self, now: float, started: float | None = None) -> None:
        """An allowed attempt ended with no outcome to count (cancelled): free its probe slot, if
        any (one that started before the breaker last opened held none)."""
        if self._stale(started):
            return
        if self.state(now) == "half_open" and self._probes_in_flight > 0:
            self._probes_in_flight -= 1

    def _stale(self, started: float | None) -> bool:
        return started is not None and self._opened_count > 0 and started < self._opened_at

    def _open(self, now: float, reason: str) -> None:
        self._state = "open"
        self._opened_at = now
        self._opened_count += 1
        self._reason = reason
        self._probes_in_flight = 0

    def _close(self) -> None:
        self._state = "closed"
        self._consecutive = 0
        self._outcomes.clear()
        self._probes_in_flight = 0
