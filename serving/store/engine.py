"""Opening the route store's database: an SQLAlchemy engine set up for SQLite or any other URL.

Off the request path: :class:`serving.store.RouteStore` opens it once per process (gateway poller,
admin API, canary controller, ``turnout keys`` CLI). For SQLite it makes the file's directory, turns
on WAL (readers never wait for a writer) with a 5 s busy timeout, and makes write transactions
``BEGIN IMMEDIATE`` so read-check-insert is atomic across processes. An in-memory ``sqlite://`` is
one shared connection, so every thread sees the same database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from serving.errors import ConfigError

# Execution option that marks a connection whose next transaction writes (SQLite: BEGIN IMMEDIATE).
WRITE_OPTION = "turnout_write"


def is_in_memory_sqlite(url: str) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def sqlite_file(url: str) -> str | None:
    """The path of a SQLite file URL, else None (another database, in-memory, or a ``file:`` URI,
    whose query may make it anything, shared memory included)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or is_in_memory_sqlite(url):
        return None
    database = parsed.database or ""
    return None if database.startswith("file:") else str(Path(database).expanduser().absolute())


def display_url(url: str) -> str:
    """``url`` fit to print: its password hidden."""
    return make_url(url).render_as_string(hide_password=True)


def open_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and immediate write transactions."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        try:
            return create_engine(url, pool_pre_ping=True)
        except ModuleNotFoundError as exc:
            hint = (
                "pip install 'turnout[postgres]' and write the URL as postgresql+psycopg://…"
                if parsed.get_backend_name() == "postgresql"
                else ""
            )
            raise ConfigError(
                f"store.url {display_url(url)}: the database driver "
                f"{exc.name!r} is not installed" + (f": {hint}" if hint else "")
            ) from None
    if is_in_memory_sqlite(url):
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
        _take_over_sqlite_transactions(engine, wal=False)
        return engine
    database = parsed.database or ""
    if not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    _take_over_sqlite_transactions(engine, wal=True)
    return engine


def _take_over_sqlite_transactions(engine: Engine, *, wal: bool) -> None:
    """SQLAlchemy's documented recipe: stop pysqlite's own BEGIN handling and emit BEGIN ourselves.

    pysqlite starts a transaction only before the first INSERT/UPDATE, so a SELECT then INSERT is not
    atomic; with WAL a deferred transaction that read first can also fail to upgrade to a writer.
    Writes therefore take the write lock up front (``BEGIN IMMEDIATE``), waiting up to busy_timeout.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA busy_timeout=5000")
            if wal:
                cursor.execute("PRAGMA journal_mode=WAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        writes = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")
