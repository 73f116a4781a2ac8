"""The route store on real SQLite files: versions, If-Match, races between writers, audit, keys,
and the change marker the gateway polls (its cheap read on the event loop included). Rollback:
``test_route_store_rollback.py``."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from serving.errors import ClientError, Conflict, NotFound
from serving.store import ApiKeyRecord, RouteStore, RouteVersion
from serving.store.marker_probe import MarkerProbe
from tests.integration.route_store_specs import AB, ONLY_A, SHADOWED


class FakeClock:
    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state' / 'routes.db'}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(db_url: str, clock: FakeClock) -> Iterator[RouteStore]:
    opened = RouteStore(db_url, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def open_store(db_url: str) -> Iterator[Callable[[], RouteStore]]:
    """Opens more stores on the same file, like more gateway processes; closes them at the end."""
    opened: list[RouteStore] = []

    def make() -> RouteStore:
        opened.append(RouteStore(db_url))
        return opened[-1]

    yield make
    for one in opened:
        one.close()


def test_file_is_created_in_a_new_directory_in_wal_mode(
    db_url: str, tmp_path: Path, store: RouteStore
) -> None:
    path = tmp_path / "state" / "routes.db"
    assert path.is_file()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.current() == {}
    assert store.change_marker() == 0


def test_seed_writes_version_1_once(store: RouteStore, clock: FakeClock) -> None:
    written = store.seed({"chat": AB, "code": ONLY_A})
    assert [(v.route, v.version, v.action, v.author, v.reason) for v in written] == [
        ("chat", 1, "seed", "config", "seeded from config"),
        ("code", 1, "seed", "config", "seeded from config"),
    ]
    store.put("chat", ONLY_A, expected_version=1, author="ana", reason="all to a")

    again = store.seed({"chat": AB, "code": SHADOWED, "new": SHADOWED}, author="boot")
    assert [(v.route, v.version, v.author) for v in again] == [("new", 1, "boot")]
    current = store.current()
    assert {name: v.version for name, v in current.items()} == {"chat": 2, "code": 1, "new": 1}
    assert current["chat"].spec == ONLY_A
    assert current["code"].spec == ONLY_A
    assert [e.action for e in store.audit()] == ["seed", "set", "seed", "seed"]


def test_put_adds_versions_with_author_reason_and_clock_time(store: RouteStore, clock: FakeClock) -> None:
    first = store.put("chat", AB, expected_version=0, author="ana", reason="launch")
    second = store.put(
        "chat", SHADOWED, expected_version=None, author="bo", reason="shadow a", action="custom"
    )
    assert (first.version, first.author, first.reason, first.action) == (1, "ana", "launch", "set")
    assert (second.version, second.author, second.reason, second.action) == (2, "bo", "shadow a", "custom")
    assert second.created_at == clock.now and first.created_at == clock.now - 1
    assert store.get("chat") == second
    assert store.get_version("chat", 1) == first
    assert store.get_version("chat", 2).spec == SHADOWED
    assert second.as_dict() == {
        "route": "chat",
        "version": 2,
        "spec": SHADOWED.model_dump(mode="json"),
        "author": "bo",
        "created_at": clock.now,
        "reason": "shadow a",
        "action": "custom",
    }
    [newest, _] = store.audit()
    assert (newest.actor, newest.action, newest.route, newest.version, newest.detail, newest.at) == (
        "bo",
        "custom",
        "chat",
        2,
        "shadow a",
        clock.now,
    )


def test_if_match_semantics(store: RouteStore) -> None:
    assert store.put("chat", AB, expected_version=0, author="ana", reason="new").version == 1
    store.put("chat", ONLY_A, expected_version=1, author="ana", reason="two")
    store.put("chat", AB, expected_version=2, author="ana", reason="three")
    store.put("chat", ONLY_A, expected_version=3, author="ana", reason="four")
    marker = store.change_marker()

    with pytest.raises(Conflict) as stale:
        store.put("chat", SHADOWED, expected_version=3, author="bo", reason="late")
    assert stale.value.status == 409
    assert stale.value.code == "version_conflict"
    assert "route 'chat' is at version 4, not 3" in stale.value.message
    with pytest.raises(Conflict, match="at version 4, not 0"):
        store.put("chat", SHADOWED, expected_version=0, author="bo", reason="create?")
    with pytest.raises(Conflict, match="version 0"):
        store.put("absent", SHADOWED, expected_version=2, author="bo", reason="edit?")

    assert store.change_marker() == marker  # refused writes leave no trace
    assert store.get("chat").version == 4
    with pytest.raises(NotFound):
        store.get("absent")


def test_two_stores_on_one_file_see_each_other_and_conflict(
    store: RouteStore, open_store: Callable[[], RouteStore]
) -> None:
    other = open_store()
    store.seed({"chat": AB})
    assert other.get("chat").spec == AB
    marker = other.change_marker()

    # Both "processes" read version 1 and both try to write version 2.
    assert store.get("chat").version == other.get("chat").version == 1
    store.put("chat", ONLY_A, expected_version=1, author="gateway-1", reason="first")
    assert other.change_marker() > marker
    with pytest.raises(Conflict, match="at version 2, not 1"):
        other.put("chat", SHADOWED, expected_version=1, author="gateway-2", reason="second")
    assert other.current()["chat"].spec == ONLY_A


def test_threads_racing_on_one_if_match_exactly_one_wins(
    store: RouteStore, open_store: Callable[[], RouteStore]
) -> None:
    store.seed({"chat": AB})
    stores = [store, open_store(), open_store(), open_store()]
    start = threading.Barrier(8)
    won: list[RouteVersion] = []
    lost: list[Conflict] = []

    def write(index: int) -> None:
        start.wait()
        try:
            won.append(
                stores[index % 4].put("chat", ONLY_A, expected_version=1, author=f"t{index}", reason="race")
            )
        except Conflict as refused:
            lost.append(refused)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(won) == 1 and len(lost) == 7
    assert won[0].version == 2
    assert [v.version for v in store.history("chat")] == [1, 2]


def test_unconditional_writes_racing_all_land_on_distinct_versions(
    store: RouteStore, open_store: Callable[[], RouteStore]
) -> None:
    stores = [store, open_store()]
    start = threading.Barrier(8)
    written: list[int] = []

    def write(index: int) -> None:
        start.wait()
        written.append(
            stores[index % 2].put("chat", AB, expected_version=None, author="t", reason="any").version
        )

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(written) == list(range(1, 9))


def _put_in_another_process(
    url: str, start: multiprocessing.synchronize.Barrier, results: multiprocessing.Queue[str]
) -> None:
    other = RouteStore(url)
    start.wait()
    try:
        other.put("chat", ONLY_A, expected_version=1, author="proc", reason="race")
        results.put("won")
    except Conflict:
        results.put("conflict")
    finally:
        other.close()


def test_processes_racing_on_one_if_match_exactly_one_wins(store: RouteStore, db_url: str) -> None:
    store.seed({"chat": AB})
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    results: multiprocessing.Queue[str] = context.Queue()
    procs = [context.Process(target=_put_in_another_process, args=(db_url, start, results)) for _ in range(2)]
    for proc in procs:
        proc.start()
    outcomes = sorted(results.get(timeout=60) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
    assert outcomes == ["conflict", "won"]
    assert store.get("chat").version == 2


def test_not_found_errors(store: RouteStore) -> None:
    store.seed({"chat": AB})
    with pytest.raises(NotFound) as missing:
        store.get("absent")
    assert missing.value.status == 404
    assert missing.value.code == "route_not_found"
    assert missing.value.message == "route 'absent' does not exist"
    with pytest.raises(NotFound, match="does not exist"):
        store.history("absent")
    with pytest.raises(NotFound, match="does not exist"):
        store.get_version("absent", 1)
    with pytest.raises(NotFound, match="no version 7"):
        store.get_version("chat", 7)


def test_everything_survives_reopening(db_url: str, clock: FakeClock) -> None:
    first = RouteStore(db_url, clock=clock)
    first.seed({"chat": AB})
    first.put("chat", SHADOWED, expected_version=1, author="ana", reason="shadow")
    first.add_key(name="ci", role="client", key_hash="h1", prefix="tk-ab", rpm=60, actor="ana")
    before = (first.current(), first.history("chat"), first.audit(), first.keys(), first.change_marker())
    first.close()

    reopened = RouteStore(db_url)
    try:
        after = (
            reopened.current(),
            reopened.history("chat"),
            reopened.audit(),
            reopened.keys(),
            reopened.change_marker(),
        )
        assert after == before
        assert reopened.put("chat", AB, expected_version=2, author="bo", reason="back").version == 3
    finally:
        reopened.close()


def test_audit_is_newest_first_and_filters_by_route(store: RouteStore) -> None:
    store.seed({"chat": AB, "code": ONLY_A})
    store.put("chat", ONLY_A, expected_version=1, author="ana", reason="chat v2")
    store.record(actor="controller", action="canary-hold", route="code", detail="waiting for requests")
    store.record(actor="ops", action="note")

    everything = store.audit()
    assert [e.id for e in everything] == sorted((e.id for e in everything), reverse=True)
    assert [(e.action, e.route) for e in everything] == [
        ("note", None),
        ("canary-hold", "code"),
        ("set", "chat"),
        ("seed", "code"),
        ("seed", "chat"),
    ]
    assert [(e.action, e.version) for e in store.audit(route="chat")] == [("set", 2), ("seed", 1)]
    assert [e.detail for e in store.audit(route="code", limit=1)] == ["waiting for requests"]
    assert len(store.audit(limit=2)) == 2
    assert everything[1].as_dict() == {
        "id": everything[1].id,
        "at": everything[1].at,
        "actor": "controller",
        "action": "canary-hold",
        "route": "code",
        "version": None,
        "detail": "waiting for requests",
    }


def test_change_marker_grows_with_every_kind_of_write(
    store: RouteStore, open_store: Callable[[], RouteStore]
) -> None:
    poller = open_store()
    seen = [poller.change_marker()]

    def moved() -> bool:
        seen.append(poller.change_marker())
        assert poller.change_marker_nowait() == seen[-1]  # the event loop's cheap read agrees
        return seen[-1] > seen[-2]

    _every_kind_of_write(store, moved)


def test_in_memory_store_knows_its_marker_without_asking() -> None:
    store = RouteStore("sqlite://")
    try:
        assert store.change_marker_nowait() == 0
        seen = [0]

        def moved() -> bool:
            seen.append(store.change_marker())  # what the database says
            assert store.change_marker_nowait() == seen[-1]  # what the poller reads, not asking it
            return seen[-1] > seen[-2]

        _every_kind_of_write(store, moved)
    finally:
        store.close()


def _every_kind_of_write(store: RouteStore, moved: Callable[[], bool]) -> None:
    """Each kind of write moves the marker; a write that changes nothing or is refused does not."""
    store.seed({"chat": AB})
    assert moved()
    store.seed({"chat": AB})
    assert not moved()
    store.put("chat", ONLY_A, expected_version=1, author="ana", reason="r")
    assert moved()
    store.rollback("chat", to_version=None, expected_version=2, author="ana")
    assert moved()
    store.record(actor="ops", action="note")
    assert moved()
    store.add_key(name="ci", role="client", key_hash="h1", prefix="tk-1", actor="ops")
    assert moved()
    store.revoke_key("ci", actor="ops")
    assert moved()
    with pytest.raises(Conflict):
        store.put("chat", AB, expected_version=1, author="ana", reason="stale")
    assert not moved()


def test_api_keys(store: RouteStore, clock: FakeClock) -> None:
    ci = store.add_key(
        name="ci", role="client", key_hash="h1", prefix="tk-aaaa", rpm=60, tpm=10_000, actor="ops"
    )
    assert (ci.name, ci.role, ci.key_hash, ci.prefix, ci.rpm, ci.tpm, ci.revoked_at) == (
        "ci",
        "client",
        "h1",
        "tk-aaaa",
        60,
        10_000,
        None,
    )
    assert ci.created_at == clock.now
    assert "key_hash" not in ci.as_dict()
    assert ci.as_dict()["prefix"] == "tk-aaaa"
    admin = store.add_key(name="root", role="admin", key_hash="h2", prefix="tk-bbbb", actor="ops")
    assert admin.rpm is None and admin.tpm is None
    assert store.keys() == [ci, admin]

    with pytest.raises(Conflict) as taken:
        store.add_key(name="ci", role="viewer", key_hash="h3", prefix="tk-cccc", actor="ops")
    assert taken.value.status == 409
    with pytest.raises(Conflict):
        store.add_key(name="other", role="viewer", key_hash="h1", prefix="tk-aaaa", actor="ops")
    with pytest.raises(ClientError, match="unknown role"):
        store.add_key(name="x", role="superuser", key_hash="h4", prefix="tk-dddd", actor="ops")

    revoked = store.revoke_key("ci", actor="ops")
    assert revoked.revoked_at == clock.now
    assert revoked.id == ci.id
    assert store.keys() == [admin]
    assert store.keys(include_revoked=True) == [revoked, admin]
    with pytest.raises(NotFound) as gone:
        store.revoke_key("ci", actor="ops")
    assert (gone.value.status, gone.value.code) == (404, "key_not_found")
    with pytest.raises(NotFound):
        store.revoke_key("never", actor="ops")

    # A revoked key's name can be given to a new key.
    again = store.add_key(name="ci", role="operator", key_hash="h5", prefix="tk-eeee", actor="ops")
    assert isinstance(again, ApiKeyRecord) and again.id != ci.id
    assert [(e.action, e.detail) for e in store.audit(limit=2)] == [
        ("key-create", "name=ci role=operator"),
        ("key-revoke", "name=ci role=client"),
    ]


def test_in_memory_store_is_shared_by_threads() -> None:
    store = RouteStore("sqlite://")
    try:
        store.seed({"chat": AB})
        errors: list[BaseException] = []

        def write(index: int) -> None:
            try:
                store.put(f"route-{index}", ONLY_A, expected_version=0, author="t", reason="r")
                store.put("chat", ONLY_A, expected_version=None, author="t", reason="r")
                store.current()
            except BaseException as failed:  # surfaced by the assert below
                errors.append(failed)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert errors == []
        current = store.current()
        assert len(current) == 9
        assert current["chat"].version == 9
        assert store.change_marker() == 17
        assert store.change_marker_nowait() == 17  # kept by the writes, under the same turns
    finally:
        store.close()


def test_marker_probe_answers_none_at_once_when_sqlite_cannot_answer(tmp_path: Path) -> None:
    """The poller's cheap read runs on the event loop, so it must never wait on a lock."""
    path = tmp_path / "routes.db"
    RouteStore(f"sqlite:///{path}").close()  # the schema, in WAL mode
    probe = MarkerProbe(str(path))
    assert probe.read() == 0
    probe.close()
    hog = sqlite3.connect(path, isolation_level=None)  # holds the file alone, as a WAL recovery would
    hog.execute("PRAGMA locking_mode=EXCLUSIVE")
    hog.execute("BEGIN EXCLUSIVE")
    hog.execute("INSERT INTO audit (at, actor, action, detail) VALUES (1, 'ops', 'note', '')")
    started = time.monotonic()
    assert probe.read() is None
    assert time.monotonic() - started < 1.0  # refused at once: the store's busy timeout is 5 s
    hog.execute("COMMIT")
    hog.close()
    assert probe.read() == 1  # a fresh connection once the file is free
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    assert MarkerProbe(str(tmp_path / "junk.db")).read() is None
    probe.close()
