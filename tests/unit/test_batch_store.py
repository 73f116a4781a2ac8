"""The Files and Batch API stores without a server (SQLite in memory, a clock the test moves): a
file's owner, expiry and pages; a batch's creation, pages and cancel (an operator's across owners,
audited), the runner's claim, beat and release, its answers kept once, and its end writing the
output and error files."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select

from serving.batches import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    EXPIRED,
    IN_PROGRESS,
    VALIDATING,
    BatchLine,
    BatchRecord,
    RequestCounts,
    output_line,
)
from serving.files import BATCH_OUTPUT, StoredFile
from serving.store import RouteStore
from serving.store.tables import batch_requests

CHAT = "/v1/chat/completions"


@pytest.fixture
def now() -> list[float]:
    return [100.0]


@pytest.fixture
def store(now: list[float]) -> Iterator[RouteStore]:
    opened = RouteStore("sqlite://", clock=lambda: now[0])
    try:
        yield opened
    finally:
        opened.close()


def _file(file_id: str, owner: str = "alice", at: float = 100.0, **changed: Any) -> StoredFile:
    fields: dict[str, Any] = {"purpose": "batch", "filename": f"{file_id}.jsonl", "expires_at": None}
    fields.update(changed)
    return StoredFile(file_id, owner, fields["purpose"], fields["filename"], 3, at, fields["expires_at"])


def test_a_file_is_its_owners_alone(store: RouteStore) -> None:
    kept = _file("file-a")
    store.files.add(kept, b"abc")
    assert store.files.get("file-a", "alice") == kept and store.files.content("file-a", "alice") == b"abc"
    assert store.files.get("file-a", "bob") is None and store.files.content("file-a", "bob") is None
    assert store.files.page("bob", purpose=None, limit=10, order="desc", after=None) == ([], False)
    assert not store.files.drop("file-a", "bob") and store.files.get("file-a", "alice") == kept
    assert store.files.drop("file-a", "alice") and store.files.get("file-a", "alice") is None
    assert not store.files.drop("file-a", "alice")


def test_a_file_past_its_expiry_is_never_read_and_the_next_write_deletes_it(
    store: RouteStore, now: list[float]
) -> None:
    store.files.add(_file("file-old", purpose=BATCH_OUTPUT, expires_at=200.0), b"abc")
    now[0] = 199.0
    assert store.files.get("file-old", "alice") is not None
    now[0] = 200.0
    assert store.files.get("file-old", "alice") is None and store.files.content("file-old", "alice") is None
    assert store.files.page("alice", purpose=None, limit=10, order="asc", after=None) == ([], False)
    store.files.add(_file("file-new", at=200.0), b"xyz")  # a write deletes what expired
    now[0] = 150.0
    assert store.files.get("file-old", "alice") is None and store.files.get("file-new", "alice") is not None


def test_files_are_paged_by_creation_either_way_after_a_cursor_and_by_purpose(store: RouteStore) -> None:
    for n, at in enumerate((100.0, 110.0, 110.0, 120.0)):
        purpose = BATCH_OUTPUT if n == 3 else "batch"
        store.files.add(_file(f"file-{n}", at=at, purpose=purpose), b"abc")
    store.files.add(_file("file-bob", owner="bob", at=105.0), b"abc")

    def ids(**query: Any) -> tuple[list[str], bool]:
        query = {"purpose": None, "limit": 10, "order": "asc", "after": None, **query}
        found, more = store.files.page("alice", **query)
        return [kept.file_id for kept in found], more

    assert ids() == (["file-0", "file-1", "file-2", "file-3"], False)
    assert ids(order="desc") == (["file-3", "file-2", "file-1", "file-0"], False)
    assert ids(limit=2) == (["file-0", "file-1"], True)
    assert ids(limit=2, after="file-1") == (["file-2", "file-3"], False)  # same time: by id
    assert ids(order="desc", limit=2, after="file-2") == (["file-1", "file-0"], False)
    assert ids(order="desc", limit=1, after="file-3") == (["file-2"], True)
    assert ids(purpose="batch", order="desc") == (["file-2", "file-1", "file-0"], False)
    assert ids(purpose=BATCH_OUTPUT) == (["file-3"], False)
    assert ids(after="file-bob") == ([], False)  # another owner's file is no cursor
    assert ids(after="file-none") == ([], False)


def _batch(batch_id: str, owner: str = "alice", at: float = 100.0) -> BatchRecord:
    return BatchRecord(batch_id, owner, CHAT, "file-in", "24h", VALIDATING, at, at + 86400.0)


def _lines(*custom_ids: str) -> list[BatchLine]:
    return [BatchLine(n, custom_id, '{"model":"m"}') for n, custom_id in enumerate(custom_ids)]


def _answer(line: int, custom_id: str, status: int, taken: int = 0, given: int = 0) -> Any:
    body = {"usage": {"prompt_tokens": taken}} if status < 300 else {"error": {"message": "no"}}
    return (line, status, output_line(custom_id, status, f"req-{line}", body), taken, given)


def test_a_created_batch_is_read_back_by_its_owner_with_its_request_count(store: RouteStore) -> None:
    record = BatchRecord(
        "batch_a", "alice", CHAT, "file-in", "24h", VALIDATING, 100.5, 86500.5, {"job": "x"}, "m"
    )
    store.batches.create(record, _lines("a", "b", "c"))
    assert store.batches.get("batch_a", "alice") == (record, RequestCounts(total=3))
    assert store.batches.get("batch_a", "bob") is None and store.batches.get("batch_none", "alice") is None
    failed = BatchRecord("batch_f", "alice", CHAT, "file-in", "24h", "failed", 101.0, 86501.0, errors=[])
    store.batches.create(failed, [])
    assert store.batches.get("batch_f", "alice") == (failed, RequestCounts())


def test_batches_are_paged_newest_first_after_a_cursor(store: RouteStore) -> None:
    for n, at in enumerate((100.0, 110.0, 110.0, 120.0)):
        store.batches.create(_batch(f"batch_{n}", at=at), _lines("a"))
    store.batches.create(_batch("batch_bob", owner="bob", at=130.0), [])

    def ids(limit: int = 10, after: str | None = None) -> tuple[list[str], bool]:
        found, more = store.batches.page("alice", limit=limit, after=after)
        assert all(counts == RequestCounts(total=1) for _, counts in found)
        return [record.batch_id for record, _ in found], more

    assert ids() == (["batch_3", "batch_2", "batch_1", "batch_0"], False)
    assert ids(limit=2) == (["batch_3", "batch_2"], True)
    assert ids(limit=2, after="batch_2") == (["batch_1", "batch_0"], False)
    assert ids(after="batch_bob") == ([], False)


def test_cancel_marks_an_open_batch_cancelling_and_leaves_an_ended_one(
    store: RouteStore, now: list[float]
) -> None:
    store.batches.create(_batch("batch_p"), _lines("a"))
    claimed = store.batches.claim("gw-a", stale_s=30.0)
    assert claimed is not None and claimed.status == IN_PROGRESS
    store.batches.create(_batch("batch_v", at=101.0), _lines("a"))  # still validating
    now[0] = 150.0
    assert store.batches.cancel("batch_v", "bob") is None
    for batch_id, was in (("batch_v", VALIDATING), ("batch_p", IN_PROGRESS)):
        before = store.batches.get(batch_id, "alice")
        assert before is not None and before[0].status == was
        found = store.batches.cancel(batch_id, "alice")
        assert found is not None and found[0].status == CANCELLING
        assert found[0].times["cancelling_at"] == 150.0 and found[1] == RequestCounts(total=1)
        assert store.batches.get(batch_id, "alice") == found
    assert store.batches.beat(["batch_p"], "gw-a") == {"batch_p": CANCELLING}  # its runner sees it
    assert store.batches.end("batch_p", "gw-a", CANCELLED, 100.0) is not None
    now[0] = 160.0
    found = store.batches.cancel("batch_p", "alice")
    assert found is not None and found[0].status == CANCELLED and found[0].times["cancelling_at"] == 150.0


def test_an_operator_pages_every_owners_batches_by_status_and_cancels_any_audited(
    store: RouteStore, now: list[float]
) -> None:
    store.batches.create(_batch("batch_a", owner="alice", at=100.0), _lines("a"))
    store.batches.create(_batch("batch_b", owner="bob", at=110.0), _lines("a", "b"))
    store.batches.create(_batch("batch_c", owner="carol", at=120.0), _lines("a"))
    assert store.batches.claim("gw-a", stale_s=30.0) is not None  # batch_a, the oldest: in progress

    def ids(status: str | None = None, limit: int = 10, after: str | None = None) -> tuple[list[str], bool]:
        found, more = store.batches.page(None, limit=limit, after=after, status=status)
        return [record.batch_id for record, _ in found], more

    assert ids() == (["batch_c", "batch_b", "batch_a"], False)
    assert ids(status=VALIDATING) == (["batch_c", "batch_b"], False)
    assert ids(status=VALIDATING, limit=1, after="batch_c") == (["batch_b"], False)
    assert ids(status=IN_PROGRESS) == (["batch_a"], False)
    assert store.batches.get("batch_b", None) == store.batches.get("batch_b", "bob")

    now[0] = 150.0
    found = store.batches.cancel("batch_b", None, actor="ops", detail=lambda record: f"key={record.owner}")
    assert found is not None and found[0].owner == "bob" and found[0].status == CANCELLING
    entry = store.audit(limit=1)[0]
    assert (entry.actor, entry.action, entry.detail, entry.at) == (
        "ops",
        "batch-cancel",
        "id=batch_b key=bob",
        150.0,
    )
    assert store.batches.cancel("batch_none", None, actor="ops") is None
    store.batches.cancel("batch_c", "carol")  # the owner's own cancel is not audited
    assert [e.detail for e in store.audit(limit=10) if e.action == "batch-cancel"] == ["id=batch_b key=bob"]
    assert store.batches.cancel("batch_b", None, actor="ops") is not None  # cancelling already: unchanged,
    assert len([e for e in store.audit(limit=10) if e.action == "batch-cancel"]) == 1  # and not audited again


def test_the_oldest_open_batch_is_claimed_once_and_taken_over_when_its_runner_goes_quiet(
    store: RouteStore, now: list[float]
) -> None:
    store.batches.create(_batch("batch_new", at=90.0), _lines("a"))
    store.batches.create(_batch("batch_old", at=80.0), _lines("a"))
    now[0] = 120.0
    claimed = store.batches.claim("gw-a", stale_s=30.0)
    assert claimed is not None and claimed.batch_id == "batch_old"
    assert claimed.status == IN_PROGRESS and claimed.times == {"in_progress_at": 120.0}
    assert store.batches.get("batch_old", "alice") == (claimed, RequestCounts(total=1))
    second = store.batches.claim("gw-a", stale_s=30.0)
    assert second is not None and second.batch_id == "batch_new"
    assert store.batches.claim("gw-b", stale_s=30.0) is None  # gw-a runs both
    now[0] = 145.0
    assert store.batches.beat(["batch_old", "batch_new"], "gw-a") == {
        "batch_old": IN_PROGRESS,
        "batch_new": IN_PROGRESS,
    }
    now[0] = 170.0
    assert store.batches.claim("gw-b", stale_s=30.0) is None  # gw-a beat 25 s ago
    now[0] = 176.0
    taken = store.batches.claim("gw-b", stale_s=30.0)  # quiet for 31 s: gw-b takes over
    assert taken is not None and taken.batch_id == "batch_old"
    assert taken.times == {"in_progress_at": 120.0}  # it entered in_progress once
    assert store.batches.beat(["batch_old", "batch_new"], "gw-a") == {"batch_new": IN_PROGRESS}
    assert store.batches.beat(["batch_old", "batch_new"], "gw-b") == {"batch_old": IN_PROGRESS}
    assert store.batches.beat([], "gw-a") == {}
    store.batches.release(["batch_new"], "gw-b")  # not gw-b's: nothing changes
    assert store.batches.claim("gw-c", stale_s=30.0) is None
    store.batches.release(["batch_new"], "gw-a")  # gw-a going down
    released = store.batches.claim("gw-c", stale_s=30.0)
    assert released is not None and released.batch_id == "batch_new"


def test_answers_are_kept_once_and_counted_with_their_tokens(store: RouteStore) -> None:
    store.batches.create(_batch("batch_a"), _lines("a", "b", "c", "d"))
    assert [line.custom_id for line in store.batches.unanswered("batch_a")] == ["a", "b", "c", "d"]
    store.batches.answer("batch_a", [_answer(2, "c", 200, 5, 7), _answer(0, "a", 400)])
    store.batches.answer("batch_a", [])
    assert store.batches.unanswered("batch_a") == _lines("a", "b", "c", "d")[1::2]
    store.batches.answer("batch_a", [_answer(2, "c", 500), _answer(1, "b", 201, 3, 4)])  # c stays 200
    assert store.batches.unanswered("batch_a") == [BatchLine(3, "d", '{"model":"m"}')]
    found = store.batches.get("batch_a", "alice")
    assert found is not None
    assert found[1] == RequestCounts(total=4, completed=2, failed=1, input_tokens=8, output_tokens=11)
    assert store.batches.unanswered("batch_none") == []


def _claimed(store: RouteStore, batch_id: str, *custom_ids: str) -> None:
    store.batches.create(_batch(batch_id), _lines(*custom_ids))
    claimed = store.batches.claim("gw-a", stale_s=30.0)
    assert claimed is not None and claimed.batch_id == batch_id


def _jsonl(store: RouteStore, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    content = store.files.content(file_id, "alice")
    assert content is not None and content.endswith(b"\n")
    return [orjson.loads(line) for line in content.splitlines()]


def test_a_completed_batch_writes_its_output_and_error_files_in_line_order(
    store: RouteStore, now: list[float]
) -> None:
    _claimed(store, "batch_a", "a", "b", "c", "d")
    answers = [_answer(3, "d", 200, 1, 1), _answer(2, "c", 429), _answer(0, "a", 200, 2, 2)]
    store.batches.answer("batch_a", [*answers, _answer(1, "b", 404)])
    now[0] = 300.0
    ended = store.batches.end("batch_a", "gw-a", COMPLETED, file_retention_s=1000.0)
    assert ended is not None and ended.status == COMPLETED
    assert ended.times == {"in_progress_at": 100.0, "finalizing_at": 300.0, "completed_at": 300.0}
    assert store.batches.get("batch_a", "alice") == (ended, RequestCounts(4, 2, 2, 3, 3))
    with store._reading() as conn:  # its lines are gone: the files hold them, its row their counts
        assert conn.execute(select(func.count()).select_from(batch_requests)).scalar() == 0
    assert [line["custom_id"] for line in _jsonl(store, ended.output_file_id)] == ["a", "d"]
    errors = _jsonl(store, ended.error_file_id)
    assert [(line["custom_id"], line["response"]["status_code"]) for line in errors] == [
        ("b", 404),
        ("c", 429),
    ]
    for file_id, kind in ((ended.output_file_id, "output"), (ended.error_file_id, "error")):
        assert file_id is not None
        kept = store.files.get(file_id, "alice")
        assert kept is not None and kept.purpose == BATCH_OUTPUT and kept.filename == f"batch_a_{kind}.jsonl"
        assert kept.created_at == 300.0 and kept.expires_at == 1300.0
        assert kept.size == len(store.files.content(file_id, "alice") or b"")
        assert store.files.get(file_id, "gw-a") is None  # the owner's, not the runner's
    assert store.batches.claim("gw-b", stale_s=0.0) is None  # ended: nobody runs it
    assert store.batches.beat(["batch_a"], "gw-a") == {}  # claimant cleared
    assert store.batches.end("batch_a", "gw-a", COMPLETED, 1000.0) is None


def test_a_batch_with_no_failed_line_has_no_error_file(store: RouteStore) -> None:
    _claimed(store, "batch_a", "a")
    store.batches.answer("batch_a", [_answer(0, "a", 200)])
    ended = store.batches.end("batch_a", "gw-a", COMPLETED, 1000.0)
    assert ended is not None and ended.error_file_id is None and ended.output_file_id is not None


def test_an_expired_batch_fails_each_line_it_never_sent(store: RouteStore, now: list[float]) -> None:
    _claimed(store, "batch_a", "a", "b", "c")
    store.batches.answer("batch_a", [_answer(1, "b", 200, 2, 3)])
    now[0] = 86600.0
    ended = store.batches.end("batch_a", "gw-a", EXPIRED, 1000.0)
    assert ended is not None and ended.status == EXPIRED and ended.times["expired_at"] == 86600.0
    assert "completed_at" not in ended.times and ended.times["finalizing_at"] == 86600.0
    errors = _jsonl(store, ended.error_file_id)
    assert [line["custom_id"] for line in errors] == ["a", "c"]
    assert all(line["response"] is None for line in errors)
    assert all(line["error"]["code"] == "batch_expired" and line["error"]["message"] for line in errors)
    assert [line["custom_id"] for line in _jsonl(store, ended.output_file_id)] == ["b"]
    assert store.batches.get("batch_a", "alice") == (ended, RequestCounts(3, 1, 2, 2, 3))
    assert store.batches.unanswered("batch_a") == []


def test_only_the_claimant_ends_a_batch(store: RouteStore) -> None:
    _claimed(store, "batch_a", "a")
    before = store.batches.get("batch_a", "alice")
    assert store.batches.end("batch_a", "gw-b", EXPIRED, 1000.0) is None
    assert store.batches.end("batch_none", "gw-a", COMPLETED, 1000.0) is None
    assert store.batches.get("batch_a", "alice") == before
    assert store.batches.unanswered("batch_a") == _lines("a")
    assert store.files.page("alice", purpose=None, limit=10, order="asc", after=None) == ([], False)
    assert store.batches.beat(["batch_a"], "gw-a") == {"batch_a": IN_PROGRESS}  # still gw-a's
