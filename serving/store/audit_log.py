"""The audit log's queries: append an entry, list entries, read the change marker.

Off the request path: every write of :class:`serving.store.RouteStore` (admin API, canary controller,
``turnout keys`` CLI) appends here inside its own transaction; the gateway's poller reads
:func:`change_marker` to learn cheaply that something changed.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, insert, select

from serving.store.records import AuditEntry, audit_entry_from_row
from serving.store.tables import audit


def append(
    conn: Connection,
    *,
    at: float,
    actor: str,
    action: str,
    route: str | None = None,
    version: int | None = None,
    detail: str = "",
) -> None:
    conn.execute(
        insert(audit).values(at=at, actor=actor, action=action, route=route, version=version, detail=detail)
    )


def entries(conn: Connection, *, limit: int, route: str | None) -> list[AuditEntry]:
    """Newest first, optionally only those about ``route``."""
    query = select(audit).order_by(audit.c.id.desc()).limit(max(0, limit))
    if route is not None:
        query = query.where(audit.c.route == route)
    return [audit_entry_from_row(row) for row in conn.execute(query)]


def change_marker(conn: Connection) -> int:
    """The newest audit id (0 when empty): it grows with every write of any kind."""
    return int(conn.execute(select(func.coalesce(func.max(audit.c.id), 0))).scalar_one())
