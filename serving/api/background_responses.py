"""Background Responses API runs (``background: true``): answered at once, run, read back later.

Where it sits: ``serving.api.openai_routes`` hands a background ``/v1/responses`` request to
:func:`begin`, which keeps its ``queued`` response object in the store and starts its run in this
process's :class:`BackgroundRuns`; the request is answered with that object, or, with
``stream``, with the run's events as they come (``serving.response_event_log``: a client that
leaves does not stop the run, and may pick up again, on any gateway, with ``GET
/v1/responses/{id}?stream=true&starting_after=N``). The run takes the same path as a foreground
stream (the route decision made before the answer, rate limits, metrics, fallbacks, the
backend), at most ``responses.background_max_running`` at once per gateway (the rest wait,
``queued``); it is stored ``in_progress`` while it runs and its end (``completed``,
``incomplete``, or ``failed`` with the error) replaces that, so ``GET /v1/responses/{id}`` (the
SDK's polling) finds it from any gateway on the store. ``POST /v1/responses/{id}/cancel`` marks
it ``cancelled`` in the store (a cancel is final: a later write of the run is dropped) and stops
the run here at once, or, on another gateway, within ``CHECK_EVERY_S`` (each reads its runs'
states). A gateway that shuts down ends its runs as ``failed`` (``shutting_down``); one killed
leaves them to be failed (``gateway_gone``) when read after ``responses.background_orphan_s``
without its heartbeat (``serving.store.background_runs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from backends.base import GenerateRequest
from serving.api.state import AppState
from serving.api.stored_responses import ResponseMemory
from serving.errors import InternalError, TurnoutError
from serving.gateway import Gateway
from serving.response_event_log import EventLog
from serving.responses_output import response_object
from serving.responses_protocol import ResponsesRequest, in_responses_terms
from serving.responses_stream import ResponseEvents, response_events
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
        self.store = store
        self.slots = asyncio.Semaphore(max_running)
        self.queued, self.running = gauge.labels("queued"), gauge.labels("in_progress")
        self.queued.set(0)
        self.running.set(0)
        self._check_every = check_every_s
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._trails: dict[str, EventLog] = {}
        self._watch: asyncio.Task[None] | None = None

    def start(self, response_id: str, work: Coroutine[Any, Any, None], trail: EventLog) -> None:
        task = asyncio.create_task(work)
        self._runs[response_id], self._trails[response_id] = task, trail
        task.add_done_callback(lambda _: self._ended(response_id))
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._watching())

    def _ended(self, response_id: str) -> None:
        self._runs.pop(response_id, None)
        self._trails.pop(response_id, None)  # from now on its events are read from the store

    def log_of(self, response_id: str) -> EventLog | None:
        """The events of a run on this gateway (None: not here, or ended)."""
        return self._trails.get(response_id)

    def stop(self, response_id: str) -> None:
        """Stop the run here, if it runs here (its stored state says why it ended)."""
        task = self._runs.get(response_id)
        if task is not None:
            task.cancel()

    async def _watching(self) -> None:
        """While runs are in flight, beat for them (``serving.store.background_runs``) and stop
        those ended elsewhere (cancelled, or failed while this gateway could not beat) or deleted."""
        while self._runs:
            await asyncio.sleep(self._check_every)
            try:
                gone = await asyncio.to_thread(self.store.runs_beat, list(self._runs))
            except Exception:
                log.exception("could not beat for background responses, or read whether they were stopped")
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


@dataclass(slots=True)
class _Run:
    """What one background run needs: the request as the gateway runs it, its stored memory,
    its events' numbering and their trail."""

    memory: ResponseMemory
    routed: Routed
    generate: GenerateRequest
    wire: ResponsesRequest
    created: int
    charge: Callable[[int], None] | None
    events: ResponseEvents
    trail: EventLog

    def failed(self, error: dict[str, Any]) -> dict[str, Any]:
        rid, route = self.memory.rid, self.wire.model
        return response_object(rid, route, self.created, self.wire, status="failed", error=error, stored=True)


async def begin(
    state: AppState,
    memory: ResponseMemory,
    routed: Routed,
    generate: GenerateRequest,
    wire: ResponsesRequest,
    created: int,
    charge: Callable[[int], None] | None,
) -> tuple[dict[str, Any], AsyncIterator[bytes] | None]:
    """Keep the request's ``queued`` response and start its run: that response, and with
    ``stream`` its events (from ``response.created``) as they come."""
    queued = response_object(memory.rid, wire.model, created, wire, status="queued", stored=True)
    await memory.remember(queued)
    if not queued["store"]:  # not kept: it could never be read back
        raise InternalError("the background response could not be stored; send it again")
    response_id = str(queued["id"])
    expires = time.time() + state.gateway.config.responses.retention_s
    store = state.store.response_events

    async def write(batch: list[tuple[int, bytes]]) -> None:
        await asyncio.to_thread(store.add, response_id, batch, expires)

    await asyncio.to_thread(state.store.run_started, response_id)
    events = ResponseEvents(queued)
    trail = EventLog(write)
    await trail.add(events.emit("response.created", response=queued))
    work = _Run(memory, routed, generate, wire, created, charge, events, trail)
    state.background.start(response_id, _run(state.background, state.gateway, work), trail)
    return queued, trail.follow() if wire.stream else None


async def _run(runs: BackgroundRuns, gateway: Gateway, work: _Run) -> None:
    """One background response, from ``queued`` to its end, each state kept in the store and
    each event in its trail."""
    memory, trail, events = work.memory, work.trail, work.events
    try:
        async with _counted(runs.queued):
            await runs.slots.acquire()
        try:
            async with _counted(runs.running):
                running = response_object(
                    memory.rid, work.wire.model, work.created, work.wire, status="in_progress", stored=True
                )
                await memory.remember(running)
                await trail.add(events.emit("response.in_progress", response=running))
                chunks = await gateway.stream(work.routed, work.generate, "responses")
                streamed = response_events(
                    chunks, running, work.charge, numbered=events, keep=memory.remember, announced=True
                )
                try:
                    async for event in streamed:
                        await trail.add(event)
                finally:  # stopped: the upstream request goes now, not when collected
                    for opened in (streamed, chunks):
                        closing = getattr(opened, "aclose", None)
                        if closing is not None:
                            await closing()
        finally:
            runs.slots.release()
        if events.failure is not None:  # the stream failed after its first event
            await memory.remember(events.failure)
    except asyncio.CancelledError:  # cancelled (then the store keeps that), or shutting down
        failure = work.failed(_SHUTTING_DOWN)
        await memory.remember(failure)
        kept = await asyncio.to_thread(runs.store.response, f"resp_{memory.rid}", memory.owner)
        await trail.add(events.emit("response.failed", response=kept.response if kept else failure))
    except TurnoutError as exc:  # refused before the first chunk
        await trail.add(events.failed(in_responses_terms(exc)))
        assert events.failure is not None
        await memory.remember(events.failure)
    except Exception:
        log.exception("background response resp_%s failed", memory.rid)
        await trail.add(events.failed(InternalError("internal error")))
        assert events.failure is not None
        await memory.remember(events.failure)
    finally:
        await trail.close()
        try:
            await asyncio.to_thread(runs.store.run_ended, f"resp_{memory.rid}")
        except Exception:
            log.exception("background response resp_%s: its run's row not deleted", memory.rid)


@contextlib.asynccontextmanager
async def _counted(gauge: Any) -> AsyncIterator[None]:
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()
