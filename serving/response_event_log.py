"""One background response's stream events as they are made: followed here, kept for elsewhere.

Where it sits: ``serving.api.background_responses`` adds each event of a run here (its
``response.created`` when the request is answered, then ``response.in_progress``, the deltas and
the last event). A client streaming the run on this gateway (its ``POST`` with ``stream``, or
``GET /v1/responses/{id}?stream=true``) follows the events in memory as they come; they are also
written to the store every ``flush_every_s`` and at the end, so that a client that reconnects
to any gateway on the store picks up after the last event it had (``starting_after``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger("turnout")

# The events that end a response's stream: after one, nothing more comes.
_LAST = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")
LAST_EVENT_OF = {"completed": "response.completed", "incomplete": "response.incomplete"}  # else failed


def is_last(event: bytes) -> bool:
    return event.startswith(_LAST)


class EventLog:
    """A run's events, numbered from 0 (their ``sequence_number``), in memory until it ends."""

    def __init__(
        self, write: Callable[[list[tuple[int, bytes]]], Awaitable[None]], flush_every_s: float = 0.1
    ) -> None:
        self.events: list[bytes] = []
        self.ended = False
        self._write, self._every = write, flush_every_s
        self._pending: list[tuple[int, bytes]] = []
        self._flusher: asyncio.Task[None] | None = None  # writes what is pending, shortly
        self._changed = asyncio.Event()

    async def add(self, event: bytes) -> None:
        """Keep ``event`` (the next number); followers get it now, the store within ``flush_every_s``."""
        self._pending.append((len(self.events), event))
        self.events.append(event)
        self._wake()
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self._every)
        self._flusher = None
        await self._flush()

    async def _flush(self) -> None:
        """Write what the store has not got yet (a failed write is logged: followers here still
        get every event; one reconnecting elsewhere gets the stored end)."""
        batch, self._pending = self._pending, []
        if batch:
            try:
                await self._write(batch)
            except Exception:
                log.exception("background response events not stored")

    async def close(self) -> None:
        """The run has ended: the rest is written now, and followers end after the last event."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        await self._flush()
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self, after: int = -1) -> AsyncIterator[bytes]:
        """The events after number ``after``, then each one as it comes, to the end."""
        at = after + 1
        while True:
            while at < len(self.events):
                yield self.events[at]
                at += 1
            if self.ended:
                return
            await self._changed.wait()
