"""Draining a Ray Serve gateway replica before Serve deletes the application (``--ray`` only).

First on a gateway replica's request path (inside ``serving.ray_app``'s edge). Serve's own
deletion of an application cut what was still running (a stream with no error event, a request
with no answer) and answered requests arriving meanwhile with its text/plain 404, which the
openai client does not retry. ``turnout serve --ray`` now asks every gateway replica to drain
first (through ``TurnoutRateCounter``; each replica asks every ``POLL_S``). From then a replica
answers new requests with the 503 ``shutting_down`` that ``turnout serve`` gives, lets those in
flight run until ``CANCEL_AFTER_S`` after the drain began, then cancels them, which ends each
as ``turnout serve`` ends what its grace leaves (a 503, or an error event and ``[DONE]``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from serving.errors import ShuttingDown

POLL_S = 0.5  # how often a replica asks whether to drain, and reports what it has in flight
CANCEL_AFTER_S = 6.0  # in flight this long after the drain began: cancelled (ended as above)
_ANSWERED = ("/health", "/metrics")  # still answered while draining: probes and scrapes


class DrainGate:
    """Counts the requests in flight; once draining, refuses new ones and ends the rest."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.draining = False
        self._running: set[asyncio.Task[Any]] = set()
        self._cancelled = False

    def in_flight(self) -> int:
        return len(self._running)

    def drain(self, elapsed_s: float) -> None:
        """The application is going away; the drain began ``elapsed_s`` ago."""
        self.draining = True
        if elapsed_s >= CANCEL_AFTER_S and not self._cancelled:
            self._cancelled = True
            for task in list(self._running):
                task.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.draining and scope.get("path") not in _ANSWERED:
            await _refuse(send)
            return
        task = asyncio.current_task()
        assert task is not None  # an ASGI request always runs in a task
        self._running.add(task)
        try:
            await self.app(scope, receive, send)
        finally:
            self._running.discard(task)


async def _refuse(send: Send) -> None:
    error = ShuttingDown()
    body = orjson.dumps(error.body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.encode(), value.encode()) for name, value in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
