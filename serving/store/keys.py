"""API key records: add, list and revoke, each write audited in the same transaction.

Off the request path: the ``turnout keys`` CLI and the admin API write keys through
:class:`serving.store.RouteStore`; the gateway's auth reads them (by sha256) when it loads its key set.
The plaintext key is never stored: callers pass its sha256 hex and a short display prefix.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Connection, insert, select, update

from serving.errors import ClientError, Conflict, NotFound
from serving.store import audit_log
from serving.store.records import ApiKeyRecord, api_key_from_row
from serving.store.tables import api_keys

ROLES = ("client", "viewer", "operator", "admin")


def key_name_taken(name: str) -> Conflict:
    return Conflict(
        f"an active API key named '{name}' already exists; revoke it or pick another name",
        code="key_exists",
    )


def add(
    conn: Connection,
    *,
    at: float,
    name: str,
    role: str,
    key_hash: str,
    prefix: str,
    rpm: int | None,
    tpm: int | None,
    actor: str,
) -> ApiKeyRecord:
    if role not in ROLES:
        raise ClientError(f"unknown role '{role}' (known: {', '.join(ROLES)})", code="invalid_role")
    if _active(conn, name) is not None:
        raise key_name_taken(name)
    new_id = conn.execute(
        insert(api_keys)
        .values(name=name, role=role, key_hash=key_hash, prefix=prefix, created_at=at, rpm=rpm, tpm=tpm)
        .returning(api_keys.c.id)
    ).scalar_one()
    audit_log.append(conn, at=at, actor=actor, action="key-create", detail=f"name={name} role={role}")
    return ApiKeyRecord(
        id=int(new_id),
        name=name,
        role=role,
        key_hash=key_hash,
        prefix=prefix,
        created_at=at,
        revoked_at=None,
        rpm=rpm,
        tpm=tpm,
    )


def listed(conn: Connection, *, include_revoked: bool) -> list[ApiKeyRecord]:
    query = select(api_keys).order_by(api_keys.c.id)
    if not include_revoked:
        query = query.where(api_keys.c.revoked_at.is_(None))
    return [api_key_from_row(row) for row in conn.execute(query)]


def revoke(conn: Connection, name: str, *, at: float, actor: str) -> ApiKeyRecord:
    found = _active(conn, name)
    if found is None:
        raise NotFound(f"no active API key named '{name}'", code="key_not_found")
    changed = conn.execute(
        update(api_keys)
        .where(api_keys.c.id == found.id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=at)
    )
    if changed.rowcount != 1:  # revoked by someone else between the read and the update
        raise NotFound(f"no active API key named '{name}'", code="key_not_found")
    audit_log.append(conn, at=at, actor=actor, action="key-revoke", detail=f"name={name} role={found.role}")
    return replace(found, revoked_at=at)


def _active(conn: Connection, name: str) -> ApiKeyRecord | None:
    row = conn.execute(
        select(api_keys).where(api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
    ).first()
    return None if row is None else api_key_from_row(row)
