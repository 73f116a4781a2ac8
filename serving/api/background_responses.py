"""Background Responses API runs (``background: true``): answered at once, run, read back later.

Where it sits: ``serving.api.openai_routes`` answers a background ``/v1/responses`` request with
its ``queued`` response object, already kept in the store, and hands :func:`run` to this
process's :class:`BackgroundRuns`. The run takes the same path as a foreground request (the route
decision made before the answer, rate limits, metrics, fallbacks, the backend), at most
``responses.background_max_running`` at once per gateway (the rest wait, ``queued``); it is
stored ``in_progress`` while it runs and its end (``completed``, ``incomplete``, or ``failed`` with
the error) replaces that, so ``GET /v1/responses/{id}`` (the SDK's polling) finds it from any
gateway on the store. ``POST /v1/responses/{id}/cancel`` marks it ``cancelled`` in the store (a
cancel is final: a later write of the run is dropped) and stops the run here at once, or, on
another gateway, within ``CHECK_EVERY_S`` (each reads its runs' states). A gateway that shuts
down ends its runs as ``failed`` (``shutting_down``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from prometheus_client import Gauge

from backends.base import GenerateRequest
from serving.api.stored_responses import ResponseMemory
from serving.errors import TurnoutError
from serving.gateway import Gateway
from serving.responses_output import response_body, response_object
from serving.responses_protocol import ResponsesRequest, in_responses_terms
from serving.routing.routed import Routed
from serving.store import RouteStore

log = logging.getLogger("turnout")

CHECK_EVERY_S = 1.0  # how often a gateway reads whether its runs were cancelled elsewhere
_SHUTTING_DOWN = {
    "code": "shutting_down",
    "message": "the gateway shut down before this background response finished; send it again",
}


class BackgroundRuns:
    """This gateway's background runs, by response id."""

    def __init__(
        self, store: RouteStore, max_running: int, gauge: Gauge, check_every_s: float = CHECK_EVERY_S
    ) -> None:
        self._store = store
        self.slots = asyncio.Semaphore(max_running)
        self.queued, self.running = gauge.labels("queued"), gauge.labels("in_progress")
        self.queued.set(0)
        self.running.set(0)
        self._check_every = check_every_s
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._watch: asyncio.Task[None] | None = None

    def start(self, response_id: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._runs[response_id] = task
        task.add_done_callback(lambda _: self._runs.pop(response_id, None))
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._watching())

    def stop(self, response_id: str) -> None:
        """Stop the run here, if it runs here (its stored state says why it ended)."""
        task = self._runs.get(response_id)
        if task is not None:
            task.cancel()

    async def _watching(self) -> None:
        """While runs are in flight, stop those a cancel on another gateway marked."""
        while self._runs:
            await asyncio.sleep(self._check_every)
            try:
                gone = await asyncio.to_thread(self._store.cancelled_responses, list(self._runs))
            except Exception:
                log.exception("could not read whether background responses were cancelled")
                continue
            for response_id in gone:
                self.stop(response_id)

    async def close(self) -> None:
        """Shutting down: every run ends (stored as failed, unless cancelled), then the watch."""
        runs = list(self._runs.values())
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch


async def run(
    runs: BackgroundRuns,
    gateway: Gateway,
    memory: ResponseMemory,
    routed: Routed,
    generate: GenerateRequest,
    wire: ResponsesRequest,
    created: int,
    charge: Callable[[int], None] | None,
) -> None:
    """One background response, from ``queued`` to its end, each state kept in the store."""
    route, rid = wire.model, memory.rid
    try:
        async with _counted(runs.queued):
            await runs.slots.acquire()
        try:
            async with _counted(runs.running):
                running = response_object(rid, route, created, wire, status="in_progress", stored=True)
                await memory.remember(running)
                result = await gateway.complete(routed, generate, "responses")
        finally:
            runs.slots.release()
        if charge is not None:
            charge(result.usage.total_tokens)
        ended = response_body(rid, route, created, wire, result, stored=True)
    except asyncio.CancelledError:  # cancelled (then the store keeps that) or shutting down
        ended = _failed(rid, route, created, wire, _SHUTTING_DOWN)
    except TurnoutError as exc:
        refused = in_responses_terms(exc)
        ended = _failed(rid, route, created, wire, {"code": refused.code, "message": refused.message})
    except Exception:
        log.exception("background response resp_%s failed", rid)
        ended = _failed(rid, route, created, wire, {"code": "server_error", "message": "internal error"})
    await memory.remember(ended)


def _failed(
    rid: str, route: str, created: int, wire: ResponsesRequest, error: dict[str, Any]
) -> dict[str, Any]:
    return response_object(rid, route, created, wire, status="failed", error=error, stored=True)


@contextlib.asynccontextmanager
async def _counted(gauge: Any) -> AsyncIterator[None]:
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()
