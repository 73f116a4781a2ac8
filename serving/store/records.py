"""The route store's values: route versions, audit entries and API key records, and their row mapping.

Off the request path: :class:`serving.store.RouteStore` returns these to the gateway's poller (which
builds the route table it serves from), the admin API, the canary controller and the ``turnout keys``
CLI. They are frozen: a change is a new row, never an edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

from serving.routing.spec import RouteSpec


@dataclass(frozen=True, slots=True)
class RouteVersion:
    """One immutable version of a route: the spec in force from ``created_at`` until the next one."""

    route: str
    version: int
    spec: RouteSpec
    author: str
    created_at: float
    reason: str
    # "seed" | "set" | "rollback" | "canary-start" | "canary-abort" (hand edits) | "canary-promote" |
    # "canary-complete" (by hand or the judge) | "canary-rollback" (stored as given)
    action: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "version": self.version,
            "spec": self.spec.model_dump(mode="json"),
            "author": self.author,
            "created_at": self.created_at,
            "reason": self.reason,
            "action": self.action,
        }


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of the audit log: who did what, when, to which route version."""

    id: int
    at: float
    actor: str
    action: str
    route: str | None
    version: int | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "route": self.route,
            "version": self.version,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """A stored API key: its sha256, never the key itself."""

    id: int
    name: str
    role: str  # "client" | "viewer" | "operator" | "admin"
    key_hash: str
    prefix: str
    created_at: float
    revoked_at: float | None
    rpm: int | None
    tpm: int | None

    def as_dict(self) -> dict[str, Any]:
        """Everything but ``key_hash``: safe to show in the admin API and the CLI."""
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role,
            "prefix": self.prefix,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "rpm": self.rpm,
            "tpm": self.tpm,
        }


def route_version_from_row(row: Row[Any]) -> RouteVersion:
    return RouteVersion(
        route=row.route,
        version=int(row.version),
        spec=RouteSpec.model_validate_json(row.spec),
        author=row.author,
        created_at=float(row.created_at),
        reason=row.reason,
        action=row.action,
    )


def audit_entry_from_row(row: Row[Any]) -> AuditEntry:
    return AuditEntry(
        id=int(row.id),
        at=float(row.at),
        actor=row.actor,
        action=row.action,
        route=row.route,
        version=None if row.version is None else int(row.version),
        detail=row.detail,
    )


def api_key_from_row(row: Row[Any]) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=int(row.id),
        name=row.name,
        role=row.role,
        key_hash=row.key_hash,
        prefix=row.prefix,
        created_at=float(row.created_at),
        revoked_at=None if row.revoked_at is None else float(row.revoked_at),
        rpm=row.rpm,
        tpm=row.tpm,
    )
