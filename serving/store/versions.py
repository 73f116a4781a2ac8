"""Route version queries: latest, one version, all versions, latest of every route, and the insert.

Off the request path: :class:`serving.store.RouteStore` runs these for the gateway's poller (reads) and
for the admin API and canary controller (writes); each insert writes its audit row on the same
connection, so both land in one transaction.
"""

from __future__ import annotations

from sqlalchemy import Connection, and_, func, insert, select

from serving.errors import NotFound
from serving.store import audit_log
from serving.store.records import RouteVersion, route_version_from_row
from serving.store.tables import route_versions


def no_route(route: str) -> NotFound:
    return NotFound(f"route '{route}' does not exist", code="route_not_found")


def latest(conn: Connection, route: str) -> RouteVersion | None:
    row = conn.execute(
        select(route_versions)
        .where(route_versions.c.route == route)
        .order_by(route_versions.c.version.desc())
        .limit(1)
    ).first()
    return None if row is None else route_version_from_row(row)


def one(conn: Connection, route: str, version: int) -> RouteVersion:
    """Version ``version`` of ``route``; NotFound naming the route or the version that is missing."""
    row = conn.execute(
        select(route_versions).where(route_versions.c.route == route, route_versions.c.version == version)
    ).first()
    if row is not None:
        return route_version_from_row(row)
    if latest(conn, route) is None:
        raise no_route(route)
    raise NotFound(f"route '{route}' has no version {version}", code="version_not_found")


def all_of(conn: Connection, route: str) -> list[RouteVersion]:
    """Oldest first; empty when the route does not exist."""
    query = select(route_versions).where(route_versions.c.route == route).order_by(route_versions.c.version)
    return [route_version_from_row(row) for row in conn.execute(query)]


def latest_of_every_route(conn: Connection) -> dict[str, RouteVersion]:
    """One query: each route's row joined to its max(version)."""
    newest = (
        select(route_versions.c.route, func.max(route_versions.c.version).label("version"))
        .group_by(route_versions.c.route)
        .subquery()
    )
    query = (
        select(route_versions)
        .join(
            newest,
            and_(route_versions.c.route == newest.c.route, route_versions.c.version == newest.c.version),
        )
        .order_by(route_versions.c.route)
    )
    return {row.route: route_version_from_row(row) for row in conn.execute(query)}


def insert_with_audit(conn: Connection, written: RouteVersion) -> None:
    """Insert the version row and its audit row (IntegrityError if that version number is taken)."""
    conn.execute(
        insert(route_versions).values(
            route=written.route,
            version=written.version,
            spec=written.spec.model_dump_json(),
            author=written.author,
            created_at=written.created_at,
            reason=written.reason,
            action=written.action,
        )
    )
    audit_log.append(
        conn,
        at=written.created_at,
        actor=written.author,
        action=written.action,
        route=written.route,
        version=written.version,
        detail=written.reason,
    )
