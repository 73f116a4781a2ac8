"""Runs the canary judge on every route with a canary plan, and acts on its verdicts.

A background task of the app: every ``tick_s`` it reads the summaries of the samples for the
stable and canary variants since the current step began (this process's; under Ray Serve every
gateway replica's, ``serving.observations.SharedObservationLog``) (the step begins when its route
version was written, or when this process started judging if that is later: samples live in
memory, so after a restart a step's time and requests count from the restart, never the
downtime), asks the pure judge (``serving.routing.canary``) for a verdict, and
on promote / roll back writes the next route version with the judge's reason through the
store (``If-Match`` on the version judged, so two gateway processes never both act).
The last verdict per route is kept for the admin API. A plan with an ``eval_gate`` also gets
its eval run once in the background, by one of the gateways on the store
(``serving.canary_eval``); the judge holds the promotion until the scores are in and rolls back
as soon as they break the gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from serving.canary_eval import STALE_S, CanaryEvals
from serving.errors import Conflict
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics
from serving.route_sync import RouteSync
from serving.routing.canary import EvalScores, Verdict, apply, canary_started_at, judge

log = logging.getLogger("turnout.canary")


class CanaryController:
    def __init__(
        self,
        gateway: Gateway,
        sync: RouteSync,
        metrics: GatewayMetrics,
        tick_s: float,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._gateway = gateway
        self._sync = sync
        self._metrics = metrics
        self._tick = tick_s
        self._wall = wall_clock
        self._task: asyncio.Task[None] | None = None
        self._observing_since = wall_clock()  # reset by start(): no samples exist before it
        stale = max(STALE_S, 5 * tick_s)  # a claimant beats once a tick
        self.evals = CanaryEvals(gateway.backends, metrics, sync.store.eval_claims, stale)
        self._starts: dict[str, tuple[int, int]] = {}  # route → (version judged, its canary's start)
        self.last: dict[str, dict[str, Any]] = {}

    def start(self) -> None:
        self._observing_since = self._wall()
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.evals.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._tick)
            try:
                await self.tick()
            except Exception:
                log.exception("canary tick failed")

    async def tick(self) -> None:
        judged: dict[tuple[str, str], float] = {}  # since when each canary's variants are judged
        for name, active in self._gateway.routes.items():
            if active.spec.canary is not None:
                began = max(active.created_at, self._observing_since)
                judged |= {(name, active.spec.canary.canary): began, (name, active.spec.canary.stable): began}
        if judged:
            await self._gateway.observations.sync(judged)  # under Ray: every gateway replica's samples
        for name, active in list(self._gateway.routes.items()):
            plan = active.spec.canary
            if plan is None:
                self.last.pop(name, None)
                self.evals.forget(name)
                continue
            now = self._wall()
            log_ = self._gateway.observations
            step_began = max(active.created_at, self._observing_since)
            canary = log_.stats(name, plan.canary, step_began)
            stable = log_.stats(name, plan.stable, step_began)
            started = await self._started_at(name, active.version) if plan.eval_gate else active.version
            evaluated = await self.evals.result(name, plan, started)  # scores, why not, or None yet
            verdict = judge(plan, now - step_began, canary, stable, evaluated)
            self.last[name] = {
                "version": active.version,
                "step": plan.step,
                "percent": plan.percent,
                "action": verdict.action,
                "reason": verdict.reason,
                "at": now,
            }
            if plan.eval_gate is not None:
                self.last[name]["eval"] = _eval_status(evaluated)
            if verdict.action != "hold":
                await self._act(name, active.version, verdict)

    async def _started_at(self, name: str, version: int) -> int:
        """The version the canary in force at ``version`` started at (read once per version)."""
        known = self._starts.get(name)
        if known is not None and known[0] == version:
            return known[1]
        history = await asyncio.to_thread(self._sync.store.history, name)
        started = canary_started_at({v.version: v.action for v in history}, version)
        self._starts[name] = (version, started)
        return started

    async def _act(self, name: str, version: int, verdict: Verdict) -> None:
        active = self._gateway.routes[name]
        changed = apply(active.spec, verdict)
        if changed is None:
            return
        spec, action = changed
        try:
            written = await asyncio.to_thread(
                self._sync.store.put,
                name,
                spec,
                expected_version=version,
                author="canary-judge",
                reason=verdict.reason,
                action=action,
            )
        except Conflict:
            log.info("canary on %s: v%d changed meanwhile; judging again next tick", name, version)
            return
        self._metrics.canary_actions.labels(name, action).inc()
        log.warning("canary on %s: %s → v%d: %s", name, action, written.version, verdict.reason)
        self._gateway.observations.forget(name)
        if action != "canary-promote":
            self.evals.forget(name)
        await self._sync.refresh()


def _eval_status(evaluated: EvalScores | str | None) -> dict[str, Any]:
    """The eval gate's state for the admin API: running, failed (why), or done with its scores."""
    if evaluated is None:
        return {"state": "running"}
    if isinstance(evaluated, str):
        return {"state": "failed", "error": evaluated}
    return {
        "state": "done",
        "dataset": evaluated.dataset,
        "examples": evaluated.examples,
        "canary_accuracy": evaluated.canary,
        "stable_accuracy": evaluated.stable,
        "canary_failed": evaluated.canary_failed,
    }
