"""Where a finished attempt or request goes: metrics, circuit breakers, canary samples.

The bookkeeping end of ``serving.gateway``'s request path. A variant's breaker hears of every
attempt (and its state is logged and exported when it flips); a request's metrics and the
canary sample of the variant that served it are written once the answer is out
(:func:`after_this_turn`), off the latency path. A sample is kept only for a route's running
canary, only of its stable and canary variants, and not for a request its client left or an
operator pinned to one variant.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from backends.base import Usage
from serving.metrics import GatewayMetrics
from serving.observations import ObservationLog, counts_as_error
from serving.routing.breaker import CircuitBreaker
from serving.routing.canary import Sample
from serving.routing.routed import Routed

log = logging.getLogger("turnout")


class Outcomes:
    """Records outcomes for one gateway: its metrics, its variants' breakers, its samples."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        breakers: Mapping[str, CircuitBreaker],
        observations: ObservationLog,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.metrics = metrics
        self.breakers = breakers
        self.observations = observations
        self._flagged: set[str] = set()  # variants whose breaker was last seen not closed
        self._clock = clock
        self._wall = wall_clock

    def breaker_record(self, variant: str, ok: bool, attempt_started: float) -> None:
        breaker = self.breakers[variant]
        now = self._clock()
        breaker.record(ok, now, attempt_started)
        if ok and variant not in self._flagged:
            return
        is_open = breaker.state(now) != "closed"
        if is_open != (variant in self._flagged):
            if is_open:
                self._flagged.add(variant)
                log.warning("circuit for variant %s opened", variant)
            else:
                self._flagged.discard(variant)
                log.info("circuit for variant %s closed", variant)
            self.metrics.breaker_open.labels(variant).set(1.0 if is_open else 0.0)

    def sample(self, routed: Routed, variant: str, status: int, started: float, ttft: float | None) -> None:
        self._record_sample(routed, variant, status, self._wall(), self._clock() - started, ttft)

    def _record_sample(
        self, routed: Routed, variant: str, status: int, at: float, elapsed: float, ttft: float | None
    ) -> None:
        plan = routed.route.spec.canary
        if plan is None or status == 499 or routed.pinned or variant not in (plan.stable, plan.canary):
            return
        sample = Sample(at, not counts_as_error(status), elapsed, ttft)
        self.observations.record(routed.route.name, variant, sample)

    def observe(
        self,
        routed: Routed,
        variant: str,
        endpoint: str,
        status: int,
        started: tuple[float, float],
        ttft: float | None,
        usage: Usage | None = None,
        *,
        judged: bool = True,
    ) -> None:
        """Time a finished request now; write its metrics and canary sample once the answer is out.

        ``started``: when the request began and when the attempt that answered did. The metrics
        time the request as its client saw it (retries and fallbacks included); the canary's
        sample, like ``ttft``, times the attempt: it judges the variant that served."""
        now, at = self._clock(), self._wall()
        request_s, attempt_s = now - started[0], now - started[1]
        after_this_turn(
            self._record, routed, variant, endpoint, status, at, (request_s, attempt_s), ttft, usage, judged
        )

    def _record(
        self,
        routed: Routed,
        variant: str,
        endpoint: str,
        status: int,
        at: float,
        elapsed: tuple[float, float],
        ttft: float | None,
        usage: Usage | None,
        judged: bool,
    ) -> None:
        series = self.metrics.series(routed.route.name, variant, endpoint)
        series.requests(status).inc()
        series.latency.observe(elapsed[0])
        if usage is not None:
            series.prompt_tokens.inc(usage.prompt_tokens)
            series.completion_tokens.inc(usage.completion_tokens)
        if judged:  # not a request its client left or the server cut: that says nothing of the variant
            self._record_sample(routed, variant, status, at, elapsed[1], ttft)


def after_this_turn(record: Callable[..., None], *args: object) -> None:
    """Run ``record`` when the current task next yields, i.e. after the answer it is writing has
    been handed to the socket (uvicorn's send does not yield): bookkeeping stays off the latency
    path. Outside a running loop (a generator finalized at shutdown) it runs at once."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        record(*args)
        return
    loop.call_soon(record, *args)
