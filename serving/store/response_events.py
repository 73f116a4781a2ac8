"""Background responses' stream events in the store: written in batches by the gateway running
one, read after a sequence number by any gateway a client reconnects to.

Where it sits: :attr:`serving.store.RouteStore.response_events`, called from a worker thread by
``serving.response_event_log.EventLog`` (writes) and ``serving.api.response_replay`` (reads).
The events go with their response: deleted with it, and gone when it expires (each write first
deletes the expired). Nothing here touches the audit log.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from sqlalchemy import Connection, delete, insert, select

from serving.store.tables import response_events

_Session = Callable[[], AbstractContextManager[Connection]]


class ResponseEventStore:
    def __init__(self, reading: _Session, writing: _Session, clock: Callable[[], float]) -> None:
        self._reading, self._writing, self._clock = reading, writing, clock

    def add(self, response_id: str, events: list[tuple[int, bytes]], expires_at: float) -> None:
        with self._writing() as conn:
            conn.execute(delete(response_events).where(response_events.c.expires_at <= self._clock()))
            conn.execute(
                insert(response_events),
                [
                    {
                        "response_id": response_id,
                        "seq": seq,
                        "event": event.decode(),
                        "expires_at": expires_at,
                    }
                    for seq, event in events
                ],
            )

    def after(self, response_id: str, after: int) -> list[tuple[int, bytes]]:
        """The response's events numbered above ``after``, in order."""
        with self._reading() as conn:
            rows = conn.execute(
                select(response_events.c.seq, response_events.c.event)
                .where(
                    response_events.c.response_id == response_id,
                    response_events.c.seq > after,
                    response_events.c.expires_at > self._clock(),
                )
                .order_by(response_events.c.seq)
            )
            return [(row.seq, row.event.encode()) for row in rows]


def drop(conn: Connection, response_id: str) -> None:
    conn.execute(delete(response_events).where(response_events.c.response_id == response_id))
