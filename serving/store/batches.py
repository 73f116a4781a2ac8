"""Batch API state: batches, their requests and answers, and which gateway runs each.

Where it sits: :attr:`serving.store.RouteStore.batches`, called from a worker thread by
``/v1/batches`` (``serving.api.batches_route``: create, read, list, cancel) and by each
gateway's ``serving.batch_runner``, which claims a batch nobody runs (or whose runner stopped
beating: killed, or cut off), beats for it while it sends the lines that have no answer yet,
records each answer as it comes, and ends it: the output and error files are written in the
same transaction as the batch's final state, and its requests deleted (the files hold them
now). An answer is kept once; a line a killed gateway had in flight is sent again by the next
runner. A batch's row is kept (as OpenAI lists old batches), its files until they expire. An
operator (``serving.api.admin_batches``) lists every key's batches and cancels any; only that
cancel is audited.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import asdict, replace
from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    true,
    update,
)

from serving.batches import (
    CANCELLING,
    ENDED,
    EXPIRED,
    FINALIZING,
    IN_PROGRESS,
    STATE_TIMES,
    VALIDATING,
    BatchLine,
    BatchRecord,
    RequestCounts,
    is_success,
    unrun_line,
)
from serving.files import BATCH_OUTPUT, StoredFile, new_file_id
from serving.store import audit_log
from serving.store.files import add_file
from serving.store.tables import batch_requests, batches

_Session = Callable[[], AbstractContextManager[Connection]]
_OPEN = (VALIDATING, IN_PROGRESS, CANCELLING, FINALIZING)
NEVER_SENT = 0  # the status_code kept for a line an expired batch never sent


class BatchStore:
    """Batches beside the route store's tables, through its connections and clock."""

    def __init__(
        self,
        reading: _Session,
        writing: _Session,
        clock: Callable[[], float],
    ) -> None:
        self._reading = reading
        self._writing = writing
        self._clock = clock

    # ---- the client's side ---------------------------------------------------------------------

    def create(self, record: BatchRecord, lines: list[BatchLine]) -> None:
        with self._writing() as conn:
            counts = _counts_text(RequestCounts(total=len(lines)))
            conn.execute(insert(batches).values(**_row(record), counts=counts))
            if lines:
                rows = [
                    {
                        "batch_id": record.batch_id,
                        "line": line.index,
                        "custom_id": line.custom_id,
                        "body": line.body,
                    }
                    for line in lines
                ]
                conn.execute(insert(batch_requests), rows)

    def get(self, batch_id: str, owner: str | None) -> tuple[BatchRecord, RequestCounts] | None:
        """The owner's batch (None: whoever's it is)."""
        with self._reading() as conn:
            row = conn.execute(select(batches).where(batches.c.id == batch_id, _owned_by(owner))).first()
            if row is None:
                return None
            return _record(row), _kept_counts(row)

    def page(
        self, owner: str | None, *, limit: int, after: str | None, status: str | None = None
    ) -> tuple[list[tuple[BatchRecord, RequestCounts]], bool]:
        """The owner's batches (None: every owner's; ``status``: only those in it), newest first,
        after the batch ``after``; and whether more follow."""
        mine = _owned_by(owner)
        query = select(batches).where(mine)
        if status is not None:
            query = query.where(batches.c.status == status)
        with self._reading() as conn:
            if after is not None:
                mark = conn.execute(select(batches.c.created_at).where(batches.c.id == after, mine)).first()
                if mark is None:
                    return [], False
                query = query.where(
                    or_(
                        batches.c.created_at < mark.created_at,
                        and_(batches.c.created_at == mark.created_at, batches.c.id < after),
                    )
                )
            rows = conn.execute(
                query.order_by(batches.c.created_at.desc(), batches.c.id.desc()).limit(limit + 1)
            ).all()
        return [(_record(row), _kept_counts(row)) for row in rows[:limit]], len(rows) > limit

    def cancel(
        self,
        batch_id: str,
        owner: str | None,
        *,
        actor: str | None = None,
        detail: Callable[[BatchRecord], str] | None = None,
    ) -> tuple[BatchRecord, RequestCounts] | None:
        """Mark a batch that has not ended ``cancelling`` (its runner ends it ``cancelled``).
        ``owner`` None: whoever's it is, an operator's cancel, audited under ``actor`` with what
        ``detail`` says of the batch (whose it is)."""
        with self._writing() as conn:
            row = conn.execute(select(batches).where(batches.c.id == batch_id, _owned_by(owner))).first()
            if row is None:
                return None
            record = _record(row)
            if record.status in (VALIDATING, IN_PROGRESS):
                now = self._clock()
                record = _entered(record, CANCELLING, now)
                conn.execute(update(batches).where(batches.c.id == batch_id).values(**_state(record)))
                if actor is not None:
                    said = f"id={batch_id} {detail(record) if detail else ''}".strip()
                    audit_log.append(conn, at=now, actor=actor, action="batch-cancel", detail=said)
            return record, _kept_counts(row)

    # ---- the runner's side ---------------------------------------------------------------------

    def claim(self, claimant: str, stale_s: float) -> BatchRecord | None:
        """The oldest open batch that no gateway beats for, now ``claimant``'s (in progress)."""
        now = self._clock()
        free = or_(batches.c.claimant.is_(None), batches.c.heartbeat_at < now - stale_s)
        with self._reading() as conn:  # every gateway asks every beat: no write lock for a no
            if (
                conn.execute(select(batches.c.id).where(batches.c.status.in_(_OPEN), free).limit(1)).first()
                is None
            ):
                return None
        with self._writing() as conn:
            candidates = conn.execute(
                select(batches)
                .where(batches.c.status.in_(_OPEN), free)
                .order_by(batches.c.created_at)
                .limit(8)
            ).all()
            for row in candidates:
                record = _record(row)
                if record.status == VALIDATING:
                    record = _entered(record, IN_PROGRESS, now)
                taken = conn.execute(
                    update(batches)
                    .where(batches.c.id == record.batch_id, batches.c.status == row.status, free)
                    .values(claimant=claimant, heartbeat_at=now, **_state(record))
                )
                if taken.rowcount:  # another gateway did not take it between the read and here
                    return record
        return None

    def beat(self, batch_ids: Iterable[str], claimant: str) -> dict[str, str]:
        """Beat for these batches; the status of each that is still ``claimant``'s (one missing
        from the answer was taken over by another gateway while this one could not beat)."""
        ids = list(batch_ids)
        if not ids:
            return {}
        mine = and_(batches.c.id.in_(ids), batches.c.claimant == claimant)
        with self._writing() as conn:
            conn.execute(update(batches).where(mine).values(heartbeat_at=self._clock()))
            rows = conn.execute(select(batches.c.id, batches.c.status).where(mine)).all()
        return {row.id: row.status for row in rows}

    def release(self, batch_ids: Iterable[str], claimant: str) -> None:
        """This gateway stops running them (it is going down): another may claim them at once."""
        ids = list(batch_ids)
        if ids:
            with self._writing() as conn:
                conn.execute(
                    update(batches)
                    .where(batches.c.id.in_(ids), batches.c.claimant == claimant)
                    .values(claimant=None, heartbeat_at=None)
                )

    def unanswered(self, batch_id: str) -> list[BatchLine]:
        with self._reading() as conn:
            rows = conn.execute(
                select(batch_requests.c.line, batch_requests.c.custom_id, batch_requests.c.body)
                .where(batch_requests.c.batch_id == batch_id, batch_requests.c.status_code.is_(None))
                .order_by(batch_requests.c.line)
            ).all()
        return [BatchLine(row.line, row.custom_id, row.body) for row in rows]

    def answer(self, batch_id: str, answers: list[tuple[int, int, dict[str, Any], int, int]]) -> None:
        """Keep answers: (line, status code, output or error file line, input tokens, output
        tokens); a line already answered keeps its first answer."""
        if not answers:
            return
        kept = update(batch_requests).where(
            batch_requests.c.batch_id == bindparam("b_batch"),
            batch_requests.c.line == bindparam("b_line"),
            batch_requests.c.status_code.is_(None),
        )
        rows = [
            {
                "b_batch": batch_id,
                "b_line": line,
                "status_code": status,
                "result": orjson.dumps(result).decode(),
                "input_tokens": taken,
                "output_tokens": given,
            }
            for line, status, result, taken, given in answers
        ]
        with self._writing() as conn:  # one statement, many rows; then the batch's counts, once
            conn.execute(kept, rows)
            _recount(conn, batch_id)

    def end(self, batch_id: str, claimant: str, status: str, file_retention_s: float) -> BatchRecord | None:
        """End a batch ``claimant`` runs: ``completed``, ``cancelled`` or ``expired`` (its lines
        never sent then go to the error file as ``batch_expired``); its output and error files
        are written with its final state. None: it is no longer this claimant's."""
        now = self._clock()
        with self._writing() as conn:
            row = conn.execute(
                select(batches).where(batches.c.id == batch_id, batches.c.claimant == claimant)
            ).first()
            if row is None or row.status in ENDED:
                return None
            record = _record(row)
            rows = conn.execute(
                select(
                    batch_requests.c.line,
                    batch_requests.c.custom_id,
                    batch_requests.c.status_code,
                    batch_requests.c.result,
                )
                .where(batch_requests.c.batch_id == batch_id)
                .order_by(batch_requests.c.line)
            ).all()
            outputs: list[bytes] = []
            errors: list[bytes] = []
            for line in rows:
                if line.status_code is not None:
                    (outputs if is_success(line.status_code) else errors).append(line.result.encode())
                elif status == EXPIRED:
                    result = unrun_line(
                        line.custom_id, "batch_expired", "the batch expired before this request was sent"
                    )
                    errors.append(orjson.dumps(result))
                    conn.execute(
                        update(batch_requests)
                        .where(batch_requests.c.batch_id == batch_id, batch_requests.c.line == line.line)
                        .values(status_code=NEVER_SENT, result=errors[-1].decode())
                    )
            output_id = _write(conn, record, "output", outputs, now, file_retention_s)
            error_id = _write(conn, record, "error", errors, now, file_retention_s)
            record = _entered(_entered(record, FINALIZING, now), status, now)
            record = replace(record, output_file_id=output_id, error_file_id=error_id)
            conn.execute(
                update(batches)
                .where(batches.c.id == batch_id)
                .values(claimant=None, heartbeat_at=None, **_state(record))
            )
            _recount(conn, batch_id)
            # Its files hold every answer now, and its row their counts: the lines go.
            conn.execute(delete(batch_requests).where(batch_requests.c.batch_id == batch_id))
            return record


def _owned_by(owner: str | None) -> ColumnElement[bool]:
    """The batches of ``owner``; None: every owner's (an operator's view)."""
    return batches.c.owner == owner if owner is not None else true()


def _write(
    conn: Connection, record: BatchRecord, kind: str, lines: list[bytes], now: float, retention_s: float
) -> str | None:
    if not lines:
        return None
    content = b"".join(line + b"\n" for line in lines)
    described = StoredFile(
        new_file_id(),
        record.owner,
        BATCH_OUTPUT,
        f"{record.batch_id}_{kind}.jsonl",
        len(content),
        now,
        now + retention_s,
    )
    add_file(conn, described, content, now)
    return described.file_id


def _entered(record: BatchRecord, status: str, now: float) -> BatchRecord:
    times = dict(record.times)
    name = STATE_TIMES.get(status)
    if name is not None:
        times.setdefault(name, now)
    return replace(record, status=status, times=times)


def _row(record: BatchRecord) -> dict[str, Any]:
    return {
        "id": record.batch_id,
        "owner": record.owner,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        **_state(record),
    }


def _state(record: BatchRecord) -> dict[str, Any]:
    rest = {
        "endpoint": record.endpoint,
        "input_file_id": record.input_file_id,
        "completion_window": record.completion_window,
        "metadata": record.metadata,
        "model": record.model,
        "errors": record.errors,
        "output_file_id": record.output_file_id,
        "error_file_id": record.error_file_id,
        "times": record.times,
    }
    return {"status": record.status, "batch": orjson.dumps(rest).decode()}


def _record(row: Row[Any]) -> BatchRecord:
    rest = orjson.loads(row.batch)
    return BatchRecord(
        batch_id=row.id,
        owner=row.owner,
        status=row.status,
        created_at=row.created_at,
        expires_at=row.expires_at,
        endpoint=rest["endpoint"],
        input_file_id=rest["input_file_id"],
        completion_window=rest["completion_window"],
        metadata=rest["metadata"],
        model=rest["model"],
        errors=rest["errors"],
        output_file_id=rest["output_file_id"],
        error_file_id=rest["error_file_id"],
        times=rest["times"],
    )


def _kept_counts(row: Row[Any]) -> RequestCounts:
    return RequestCounts(**orjson.loads(row.counts))


def _counts_text(counts: RequestCounts) -> str:
    return orjson.dumps(asdict(counts)).decode()


def _recount(conn: Connection, batch_id: str) -> None:
    """Count the batch's answers into its row, so that a read (a client polling) is one row."""
    counts = _counts(conn, [batch_id]).get(batch_id, RequestCounts())
    conn.execute(update(batches).where(batches.c.id == batch_id).values(counts=_counts_text(counts)))


def _counts(conn: Connection, batch_ids: list[str]) -> dict[str, RequestCounts]:
    if not batch_ids:
        return {}
    answered = batch_requests.c.status_code.is_not(None)
    succeeded = and_(batch_requests.c.status_code >= 200, batch_requests.c.status_code < 300)
    rows = conn.execute(
        select(
            batch_requests.c.batch_id,
            func.count(),
            func.sum(case((succeeded, 1), else_=0)),
            func.sum(case((and_(answered, ~succeeded), 1), else_=0)),
            func.sum(batch_requests.c.input_tokens),
            func.sum(batch_requests.c.output_tokens),
        )
        .where(batch_requests.c.batch_id.in_(batch_ids))
        .group_by(batch_requests.c.batch_id)
    ).all()
    return {row[0]: RequestCounts(*(int(value or 0) for value in row[1:])) for row in rows}
