"""Files API state: uploaded batch input files and the output and error files batches write.

Where it sits: :attr:`serving.store.RouteStore.files`, called from a worker thread by
``/v1/files`` (``serving.api.files_route``), by ``POST /v1/batches`` reading its input file and
by ``serving.batch_runner`` writing a batch's results. A file is its owner's alone; one past its
``expires_at`` is never read, and every write first deletes those. Not audited.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from sqlalchemy import ColumnElement, Connection, RowMapping, and_, delete, insert, select

from serving.files import StoredFile
from serving.store.tables import files

_Session = Callable[[], AbstractContextManager[Connection]]
_DESCRIPTION = (
    files.c.id,
    files.c.owner,
    files.c.purpose,
    files.c.filename,
    files.c.bytes,
    files.c.created_at,
    files.c.expires_at,
)


class FileStore:
    """Files beside the route store's tables, through its connections and clock."""

    def __init__(self, reading: _Session, writing: _Session, clock: Callable[[], float]) -> None:
        self._reading = reading
        self._writing = writing
        self._clock = clock

    def add(self, described: StoredFile, content: bytes) -> None:
        with self._writing() as conn:
            add_file(conn, described, content, self._clock())

    def get(self, file_id: str, owner: str) -> StoredFile | None:
        with self._reading() as conn:
            row = conn.execute(select(*_DESCRIPTION).where(_visible(file_id, owner, self._clock()))).first()
        return None if row is None else _described(row._mapping)

    def content(self, file_id: str, owner: str) -> bytes | None:
        with self._reading() as conn:
            found = conn.execute(
                select(files.c.content).where(_visible(file_id, owner, self._clock()))
            ).first()
        return None if found is None else bytes(found.content)

    def with_content(self, file_id: str, owner: str) -> tuple[StoredFile, bytes] | None:
        """The file and its bytes in one read (a batch being made reads its input file)."""
        with self._reading() as conn:
            row = conn.execute(
                select(*_DESCRIPTION, files.c.content).where(_visible(file_id, owner, self._clock()))
            ).first()
        return None if row is None else (_described(row._mapping), bytes(row.content))

    def page(
        self, owner: str, *, purpose: str | None, limit: int, order: str, after: str | None
    ) -> tuple[list[StoredFile], bool]:
        """A page of the owner's files by creation (``order`` asc or desc), after the file
        ``after`` (none when it is not the owner's); and whether more follow."""
        now = self._clock()
        query = select(*_DESCRIPTION).where(
            files.c.owner == owner, (files.c.expires_at.is_(None)) | (files.c.expires_at > now)
        )
        if purpose is not None:
            query = query.where(files.c.purpose == purpose)
        newest_first = order == "desc"
        with self._reading() as conn:
            if after is not None:
                mark = conn.execute(
                    select(files.c.created_at, files.c.id).where(_visible(after, owner, now))
                ).first()
                if mark is None:
                    return [], False
                beyond = (
                    (files.c.created_at < mark.created_at)
                    | ((files.c.created_at == mark.created_at) & (files.c.id < mark.id))
                    if newest_first
                    else (files.c.created_at > mark.created_at)
                    | ((files.c.created_at == mark.created_at) & (files.c.id > mark.id))
                )
                query = query.where(beyond)
            ordering = (
                (files.c.created_at.desc(), files.c.id.desc())
                if newest_first
                else (files.c.created_at.asc(), files.c.id.asc())
            )
            rows = conn.execute(query.order_by(*ordering).limit(limit + 1)).all()
        return [_described(row._mapping) for row in rows[:limit]], len(rows) > limit

    def drop(self, file_id: str, owner: str) -> bool:
        with self._writing() as conn:
            now = self._clock()
            _drop_expired(conn, now)
            done = conn.execute(delete(files).where(_visible(file_id, owner, now)))
            return bool(done.rowcount)


def add_file(conn: Connection, described: StoredFile, content: bytes, now: float) -> None:
    """Keep a file (in the caller's transaction: a batch's results go in with its end)."""
    _drop_expired(conn, now)
    conn.execute(
        insert(files).values(
            id=described.file_id,
            owner=described.owner,
            purpose=described.purpose,
            filename=described.filename,
            bytes=described.size,
            created_at=described.created_at,
            expires_at=described.expires_at,
            content=content,
        )
    )


def _visible(file_id: str, owner: str, now: float) -> ColumnElement[bool]:
    return and_(
        files.c.id == file_id,
        files.c.owner == owner,
        (files.c.expires_at.is_(None)) | (files.c.expires_at > now),
    )


def _described(mapping: RowMapping) -> StoredFile:
    """A row holding the columns of ``_DESCRIPTION`` (and perhaps more), as a file's description."""
    return StoredFile(
        str(mapping["id"]),
        str(mapping["owner"]),
        str(mapping["purpose"]),
        str(mapping["filename"]),
        int(mapping["bytes"]),
        float(mapping["created_at"]),
        None if mapping["expires_at"] is None else float(mapping["expires_at"]),
    )


def _drop_expired(conn: Connection, now: float) -> None:
    conn.execute(delete(files).where(files.c.expires_at.is_not(None), files.c.expires_at <= now))
