"""The route store: versioned route specs, the audit log and API keys, in one SQL database (and
the stored Responses API answers, ``serving/store/responses.py``, and the Conversations API's
conversations, :attr:`RouteStore.conversations`, which are not audited).

Off the request path, beside it: the gateway's poller reads :meth:`RouteStore.change_marker` and, when
it moves, :meth:`RouteStore.current`, then swaps the route table that ``serving.routing`` decides from;
the admin API, the canary controller and the ``turnout keys`` CLI write here. Every write is a new
immutable row plus an audit row in the same transaction. Synchronous (SQLAlchemy Core); async callers
wrap it in ``asyncio.to_thread``, except :meth:`RouteStore.change_marker_nowait`, which never waits
(a SQLite file: ``marker_probe.py``; in-memory SQLite, which no other process or store can write: the
marker as this store's last write left it). SQLite file by default, any SQLAlchemy URL (e.g.
PostgreSQL) works.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from serving.auth import Role, hash_key, key_prefix, new_key
from serving.errors import ClientError, ConfigError, Conflict
from serving.responses_context import StoredResponse
from serving.routing.canary import hand_edit_action
from serving.routing.spec import RouteSpec
from serving.store import audit_log, background_runs, keys, versions
from serving.store import responses as stored_responses
from serving.store.batches import BatchStore
from serving.store.conversations import ConversationStore
from serving.store.engine import WRITE_OPTION, display_url, is_in_memory_sqlite, open_engine, sqlite_file
from serving.store.eval_claims import EvalClaims
from serving.store.files import FileStore
from serving.store.marker_probe import MarkerProbe
from serving.store.records import ApiKeyRecord, AuditEntry, RouteVersion
from serving.store.response_events import ResponseEventStore
from serving.store.tables import metadata

# Versions that are themselves a return to an earlier one (by an operator, or the canary judge).
ROLLBACK_ACTIONS = frozenset({"rollback", "canary-rollback"})

# A write with no If-Match that loses a race to another writer (PostgreSQL: both read version N and both
# insert N+1) re-reads and tries again, after a short random pause, up to this many times in all.
_UNCONDITIONAL_ATTEMPTS = 20
_RETRY_PAUSE_S = 0.01

# Builds the new version's spec, reason and audit action from the route's current version (None:
# no version yet).
_NextSpec = Callable[[Connection, RouteVersion | None], tuple[RouteSpec, str, str]]


def _shown(url: str) -> str:
    try:
        return display_url(url)
    except SQLAlchemyError:  # not even a URL
        return repr(url)


class RouteStore:
    """Route versions + audit log + API keys behind one SQLAlchemy engine (thread-safe)."""

    def __init__(
        self, url: str, *, clock: Callable[[], float] = time.time, orphan_after_s: float = 15.0
    ) -> None:
        """Open (and create) the store; one that cannot be opened is a :class:`ConfigError`
        naming it and why (no driver, no server there, a folder that cannot be written)."""
        self._clock = clock
        self.orphan_after_s = orphan_after_s  # a background run silent this long is failed on read
        try:
            # In-memory SQLite is one shared connection: threads take turns so transactions never
            # interleave.
            in_memory = is_in_memory_sqlite(url)
            self._turn: AbstractContextManager[Any] = threading.RLock() if in_memory else nullcontext()
            # In memory, only this store writes: the marker is known after each write, never asked.
            self._written_marker: int | None = 0 if in_memory else None
            self._engine = open_engine(url)
            self._create_tables()
            self.conversations = ConversationStore(self._reading, self._writing, clock)
            self.response_events = ResponseEventStore(self._reading, self._writing, clock)
            self.eval_claims = EvalClaims(self._reading, self._writing, clock)
            self.files = FileStore(self._reading, self._writing, clock)
            self.batches = BatchStore(self._reading, self._writing, clock)
            database = sqlite_file(url)
            self._probe = MarkerProbe(database) if database is not None else None
        except (SQLAlchemyError, OSError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise ConfigError(f"store.url {_shown(url)}: cannot open the store: {reason}") from None

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
        self._engine.dispose()

    # ---- route versions ----------------------------------------------------------------------

    def seed(self, routes: Mapping[str, RouteSpec], *, author: str = "config") -> list[RouteVersion]:
        """Write version 1 of every route that has no version yet; leave the others alone."""
        written: list[RouteVersion] = []
        for route, spec in routes.items():
            first = RouteVersion(route, 1, spec, author, self._clock(), "seeded from config", "seed")
            try:
                with self._writing() as conn:
                    if versions.latest(conn, route) is not None:
                        continue
                    versions.insert_with_audit(conn, first)
            except IntegrityError:
                continue  # another process seeded it between our read and our insert
            written.append(first)
        return written

    def current(self) -> dict[str, RouteVersion]:
        """The latest version of every route, in one query."""
        with self._reading() as conn:
            return versions.latest_of_every_route(conn)

    def get(self, route: str) -> RouteVersion:
        with self._reading() as conn:
            found = versions.latest(conn, route)
        if found is None:
            raise versions.no_route(route)
        return found

    def get_version(self, route: str, version: int) -> RouteVersion:
        with self._reading() as conn:
            return versions.one(conn, route, version)

    def history(self, route: str) -> list[RouteVersion]:
        """Every version of ``route``, oldest first."""
        with self._reading() as conn:
            found = versions.all_of(conn, route)
        if not found:
            raise versions.no_route(route)
        return found

    def put(
        self,
        route: str,
        spec: RouteSpec,
        *,
        expected_version: int | None,
        author: str,
        reason: str,
        action: str | None = None,
    ) -> RouteVersion:
        """Add the next version of ``route``; ``expected_version`` (If-Match) 0 means "must be new".
        With no ``action`` (a hand edit) the audit action says what the edit did to a canary
        (:func:`serving.routing.canary.hand_edit_action`: ``canary-start``, ``canary-abort``,
        ``canary-complete``), else ``set``."""

        def given(_conn: Connection, latest: RouteVersion | None) -> tuple[RouteSpec, str, str]:
            said = action or hand_edit_action(latest.spec if latest is not None else None, spec)
            return spec, reason, said

        return self._append(route, expected_version=expected_version, author=author, next_spec=given)

    def rollback(
        self,
        route: str,
        *,
        to_version: int | None,
        expected_version: int | None,
        author: str,
        reason: str | None = None,
        check: Callable[[RouteSpec], None] | None = None,
    ) -> RouteVersion:
        """Add a new version equal to an older one (default: the latest before the current with no
        canary in progress, the stable state a canary started from or one an operator set).

        ``check`` sees the spec about to be restored, inside the write, and raises to refuse it
        (the admin API: one whose variants this gateway no longer has cannot be put in force).

        With no ``to_version``, a current version that is itself a rollback is refused (409): its
        "previous" is the version it rolled away from, so two rollbacks at once (two operators, or
        an operator after the canary judge) would undo each other and bring that version back."""

        def older(conn: Connection, latest: RouteVersion | None) -> tuple[RouteSpec, str, str]:
            if latest is None:
                raise versions.no_route(route)
            if to_version is None and latest.action in ROLLBACK_ACTIONS:
                try:
                    undone = f"return to version {_rollback_target(conn, route, latest)}"
                except ClientError:
                    undone = "undo it"
                raise Conflict(
                    f"route '{route}' is at version {latest.version}, itself a rollback "
                    f"({latest.reason}, by {latest.author}): rolling back again would {undone}; "
                    f"name the version to return to (to_version, or `turnout routes rollback "
                    f"{route} --to N`)",
                    code="already_rolled_back",
                )
            if to_version is None and latest.version == 1:
                raise ClientError(
                    f"route '{route}' is at version 1: there is no earlier version to roll back to",
                    code="no_earlier_version",
                )
            if to_version == latest.version:
                raise ClientError(
                    f"route '{route}' is already at version {to_version}: roll back to an earlier one",
                    code="no_earlier_version",
                )
            target = _rollback_target(conn, route, latest) if to_version is None else to_version
            spec = versions.one(conn, route, target).spec
            if check is not None:
                check(spec)
            said = f"rollback to v{target}"
            return spec, f"{said}: {reason}" if reason else said, "rollback"

        return self._append(route, expected_version=expected_version, author=author, next_spec=older)

    # ---- audit log ---------------------------------------------------------------------------

    def audit(self, *, limit: int = 100, route: str | None = None) -> list[AuditEntry]:
        """Newest first."""
        with self._reading() as conn:
            return audit_log.entries(conn, limit=limit, route=route)

    def record(
        self,
        *,
        actor: str,
        action: str,
        route: str | None = None,
        version: int | None = None,
        detail: str = "",
    ) -> None:
        with self._writing() as conn:
            audit_log.append(
                conn,
                at=self._clock(),
                actor=actor,
                action=action,
                route=route,
                version=version,
                detail=detail,
            )

    def change_marker(self) -> int:
        """max(audit.id), 0 when empty: poll it to learn that anything at all changed."""
        with self._reading() as conn:
            return audit_log.change_marker(conn)

    def change_marker_nowait(self) -> int | None:
        """The change marker when it can be had at once without blocking (a SQLite file: ~10 µs,
        fit for the event loop; in memory: kept by this store's own writes), else None: then ask
        :meth:`change_marker` from a thread."""
        if self._written_marker is not None:
            return self._written_marker
        return self._probe.read() if self._probe is not None else None

    # ---- API keys ----------------------------------------------------------------------------

    def add_key(
        self,
        *,
        name: str,
        role: str,
        key_hash: str,
        prefix: str,
        rpm: int | None = None,
        tpm: int | None = None,
        actor: str,
    ) -> ApiKeyRecord:
        at = self._clock()
        try:
            with self._writing() as conn:
                return keys.add(
                    conn,
                    at=at,
                    name=name,
                    role=role,
                    key_hash=key_hash,
                    prefix=prefix,
                    rpm=rpm,
                    tpm=tpm,
                    actor=actor,
                )
        except IntegrityError:
            if any(key.name == name for key in self.keys()):
                raise keys.key_name_taken(name) from None
            raise Conflict("an API key with that hash already exists", code="key_exists") from None

    def issue_key(
        self, *, name: str, role: Role, rpm: int | None = None, tpm: int | None = None, actor: str
    ) -> tuple[str, ApiKeyRecord]:
        """Make a new key of ``role``'s kind and store its hash: the key (the only time it is
        seen: ``turnout keys create`` prints it, ``POST /admin/keys`` answers it) and its record."""
        key = new_key(role)
        record = self.add_key(
            name=name,
            role=role,
            key_hash=hash_key(key),
            prefix=key_prefix(key),
            rpm=rpm,
            tpm=tpm,
            actor=actor,
        )
        return key, record

    def keys(self, *, include_revoked: bool = False) -> list[ApiKeyRecord]:
        with self._reading() as conn:
            return keys.listed(conn, include_revoked=include_revoked)

    def revoke_key(self, name: str, *, actor: str) -> ApiKeyRecord:
        with self._writing() as conn:
            return keys.revoke(conn, name, at=self._clock(), actor=actor)

    # ---- internals ---------------------------------------------------------------------------

    # ---- stored responses (/v1/responses) ------------------------------------------------------

    def keep_response(self, record: StoredResponse, expires_at: float, *, replacing: bool = False) -> bool:
        """Keep it, in place of its earlier state (``stored_responses.keep``)."""
        with self._writing() as conn:
            return stored_responses.keep(conn, record, expires_at, replacing=replacing)

    def cancel_response(self, response_id: str, owner: str) -> StoredResponse | None:
        with self._writing() as conn:
            return stored_responses.cancel(conn, response_id, owner, self._clock())

    def response(self, response_id: str, owner: str) -> StoredResponse | None:
        """That key's response; a background one whose run went silent is failed first."""
        with self._reading() as conn:
            found = stored_responses.fetch(conn, response_id, owner, self._clock())
            if found is None or not self._orphaned(conn, found):
                return found
        with self._writing() as conn:  # again, in the transaction that fails it
            found = stored_responses.fetch(conn, response_id, owner, self._clock())
            if found is None or not self._orphaned(conn, found):
                return found
            return background_runs.fail(conn, found)

    def _orphaned(self, conn: Connection, found: StoredResponse) -> bool:
        running = found.response.get("status") in stored_responses.RUNNING
        return running and background_runs.orphaned(conn, found, self._clock(), self.orphan_after_s)

    def run_started(self, response_id: str) -> None:
        with self._writing() as conn:
            background_runs.started(conn, response_id, self._clock())

    def runs_beat(self, response_ids: list[str]) -> list[str]:
        """Beat for these running background responses; those to stop (``stored_responses.stopped``)."""
        with self._writing() as conn:
            background_runs.beat(conn, response_ids, self._clock())
            return stored_responses.stopped(conn, response_ids)

    def run_ended(self, response_id: str) -> None:
        with self._writing() as conn:
            background_runs.ended(conn, response_id)

    def drop_response(self, response_id: str, owner: str) -> bool:
        with self._writing() as conn:
            return stored_responses.drop(conn, response_id, owner)

    def _append(
        self, route: str, *, expected_version: int | None, author: str, next_spec: _NextSpec
    ) -> RouteVersion:
        """Check If-Match, then insert the next version and its audit row, all in one transaction."""
        attempts = 1 if expected_version is not None else _UNCONDITIONAL_ATTEMPTS
        for _ in range(attempts):
            try:
                with self._writing() as conn:
                    latest = versions.latest(conn, route)
                    at_version = 0 if latest is None else latest.version
                    if expected_version is not None and expected_version != at_version:
                        raise _stale(route, at_version, expected_version)
                    spec, reason, action = next_spec(conn, latest)
                    written = RouteVersion(route, at_version + 1, spec, author, self._clock(), reason, action)
                    versions.insert_with_audit(conn, written)
                    return written
            except IntegrityError:
                # Another writer took that version number first (PostgreSQL; SQLite writers take turns).
                if expected_version is not None:
                    break
                time.sleep(random.random() * _RETRY_PAUSE_S)
        now = self.get(route).version
        if expected_version is not None:
            raise _stale(route, now, expected_version)
        raise Conflict(
            f"route '{route}' kept changing during this write (now version {now}); re-read and retry"
        )

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        with self._turn, self._engine.connect() as conn:
            yield conn

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """One write transaction (SQLite: BEGIN IMMEDIATE), committed on success, rolled back on error."""
        with self._turn, self._engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                yield conn
                marker = None if self._written_marker is None else audit_log.change_marker(conn)
            if marker is not None:  # committed: the poller may see it now
                self._written_marker = marker

    def _create_tables(self) -> None:
        try:
            with self._writing() as conn:
                metadata.create_all(conn)
        except DBAPIError:
            # Two processes creating the schema at once (PostgreSQL): the other one won; check again.
            with self._writing() as conn:
                metadata.create_all(conn)


def _rollback_target(conn: Connection, route: str, latest: RouteVersion) -> int:
    """The version a plain rollback returns to: the latest before ``latest`` with no canary in
    progress whose spec differs from the current one. A version mid-canary would bring its canary
    back, which the judge then went on with: a rollback after a canary completed (or during one)
    was promoted again a second later. One equal to the current would change nothing (after a
    canary's abort, the stable state before it). With no such version: 400, name one."""
    earlier = [v for v in versions.all_of(conn, route) if v.version < latest.version]
    for version in reversed(earlier):  # newest first
        if version.spec.canary is None and version.spec != latest.spec:
            return version.version
    raise ClientError(
        f"route '{route}' has no earlier version without a canary in progress that differs from "
        f"version {latest.version}; name the version to return to (to_version, or "
        f"`turnout routes rollback {route} --to N`)",
        code="no_earlier_version",
    )


def _stale(route: str, at_version: int, expected: int) -> Conflict:
    if expected == 0:
        state = f"route '{route}' is at version {at_version}, not 0 (0 means it must not exist yet)"
    elif at_version == 0:
        state = f"route '{route}' is at version 0 (it does not exist yet), not {expected}"
    else:
        state = f"route '{route}' is at version {at_version}, not {expected}"
    return Conflict(f"{state}: someone else changed it; re-read and retry")
