"""Conversations API state: conversations and their items, each only for the key that made it.

Where it sits: :attr:`serving.store.RouteStore.conversations`, called from a worker thread by
``/v1/conversations`` (``serving.api.conversations_route``) and by a ``/v1/responses`` request
naming a ``conversation``, which reads its items before it runs and adds its own once answered.
A conversation lasts ``expires_at``: each change moves it on by the retention the caller passes.
Every write first deletes the expired conversations with their items; a read never sees one.
Nothing here touches the audit log, so route pollers do not wake for these writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import orjson
from sqlalchemy import Connection, delete, insert, select, update

from serving.conversations import Conversation
from serving.store.tables import conversation_items, conversations

_Session = Callable[[], AbstractContextManager[Connection]]


class ConversationStore:
    """Conversations beside the route store's tables, through its connections and clock."""

    def __init__(self, reading: _Session, writing: _Session, clock: Callable[[], float]) -> None:
        self._reading = reading
        self._writing = writing
        self._clock = clock

    def create(self, conversation: Conversation, items: list[dict[str, Any]], expires_at: float) -> None:
        with self._writing() as conn:
            _drop_expired(conn, self._clock())
            conn.execute(
                insert(conversations).values(
                    id=conversation.conversation_id,
                    owner=conversation.owner,
                    created_at=conversation.created_at,
                    expires_at=expires_at,
                    metadata=orjson.dumps(conversation.metadata).decode(),
                )
            )
            _add(conn, conversation.conversation_id, items)

    def get(self, conversation_id: str, owner: str) -> Conversation | None:
        with self._reading() as conn:
            return _found(conn, conversation_id, owner, self._clock())

    def items(self, conversation_id: str, owner: str) -> list[dict[str, Any]] | None:
        """Its items in the order they were added; None when that key has no such conversation."""
        with self._reading() as conn:
            if _found(conn, conversation_id, owner, self._clock()) is None:
                return None
            return list(_items(conn, conversation_id))

    def add(
        self, conversation_id: str, owner: str, items: list[dict[str, Any]], expires_at: float
    ) -> Conversation | None:
        """Add ``items`` after the others; None (nothing added) when there is no such conversation."""
        with self._writing() as conn:
            found = _touched(conn, conversation_id, owner, self._clock(), expires_at)
            if found is not None:
                _add(conn, conversation_id, items)
            return found

    def update(
        self, conversation_id: str, owner: str, metadata: dict[str, str], expires_at: float
    ) -> Conversation | None:
        with self._writing() as conn:
            found = _touched(conn, conversation_id, owner, self._clock(), expires_at)
            if found is None:
                return None
            values = {"metadata": orjson.dumps(metadata).decode()}
            conn.execute(update(conversations).where(conversations.c.id == conversation_id).values(**values))
            return Conversation(found.conversation_id, found.owner, found.created_at, metadata)

    def drop(self, conversation_id: str, owner: str) -> bool:
        with self._writing() as conn:
            if _found(conn, conversation_id, owner, self._clock()) is None:
                return False
            _drop(conn, [conversation_id])
            return True

    def drop_item(
        self, conversation_id: str, owner: str, item_id: str, expires_at: float
    ) -> tuple[Conversation | None, bool]:
        """The conversation (None: no such one) and whether it had that item, now deleted."""
        with self._writing() as conn:
            found = _touched(conn, conversation_id, owner, self._clock(), expires_at)
            if found is None:
                return None, False
            done = conn.execute(
                delete(conversation_items).where(
                    conversation_items.c.conversation_id == conversation_id,
                    conversation_items.c.item_id == item_id,
                )
            )
            return found, bool(done.rowcount)


def _found(conn: Connection, conversation_id: str, owner: str, now: float) -> Conversation | None:
    row = conn.execute(
        select(conversations).where(
            conversations.c.id == conversation_id,
            conversations.c.owner == owner,
            conversations.c.expires_at > now,
        )
    ).first()
    if row is None:
        return None
    return Conversation(row.id, row.owner, row.created_at, orjson.loads(row.metadata))


def _touched(
    conn: Connection, conversation_id: str, owner: str, now: float, expires_at: float
) -> Conversation | None:
    """The conversation about to change, its expiry moved on (after the expired are dropped)."""
    _drop_expired(conn, now)
    found = _found(conn, conversation_id, owner, now)
    if found is not None:
        conn.execute(
            update(conversations).where(conversations.c.id == conversation_id).values(expires_at=expires_at)
        )
    return found


def _items(conn: Connection, conversation_id: str) -> Iterator[dict[str, Any]]:
    rows = conn.execute(
        select(conversation_items.c.item)
        .where(conversation_items.c.conversation_id == conversation_id)
        .order_by(conversation_items.c.seq)
    )
    for row in rows:
        yield orjson.loads(row.item)


def _add(conn: Connection, conversation_id: str, items: list[dict[str, Any]]) -> None:
    if items:
        conn.execute(
            insert(conversation_items),
            [
                {"conversation_id": conversation_id, "item_id": item["id"], "item": _text(item)}
                for item in items
            ],
        )


def _text(item: dict[str, Any]) -> str:
    return orjson.dumps(item).decode()


def _drop_expired(conn: Connection, now: float) -> None:
    expired = conn.execute(select(conversations.c.id).where(conversations.c.expires_at <= now))
    gone = [row.id for row in expired]
    if gone:
        _drop(conn, gone)


def _drop(conn: Connection, ids: list[str]) -> None:
    conn.execute(delete(conversation_items).where(conversation_items.c.conversation_id.in_(ids)))
    conn.execute(delete(conversations).where(conversations.c.id.in_(ids)))
