"""The route store on a real PostgreSQL server: same behaviour as on SQLite, and two gateways sharing it.

Skipped (with what to install) where no PostgreSQL server binaries or driver exist.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backends.fault import FaultServer
from serving.errors import Conflict
from serving.routing.spec import RouteSpec, WeightedTarget
from serving.store import RouteStore
from tests.integration.control_plane import (
    admin,
    chat,
    eventually,
    fault_variant,
    put_route,
    running_gateway,
    write_config,
)
from tests.integration.postgres_server import postgres_server, why_unavailable

pytestmark = pytest.mark.skipif(why_unavailable() is not None, reason=str(why_unavailable()))

ONLY_A = RouteSpec(targets=[WeightedTarget(variant="a")])
SPLIT = RouteSpec(targets=[WeightedTarget(variant="a", weight=70), WeightedTarget(variant="b", weight=30)])


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture
def store(postgres_url: str) -> Iterator[RouteStore]:
    opened = RouteStore(postgres_url)
    yield opened
    opened.close()


def test_versions_conflicts_rollback_and_audit(store: RouteStore, postgres_url: str) -> None:
    store.seed({"pg-chat": ONLY_A})
    assert store.get("pg-chat").version == 1
    written = store.put("pg-chat", SPLIT, expected_version=1, author="ops", reason="A/B")
    assert written.version == 2
    other = RouteStore(postgres_url)  # a second process's view
    with pytest.raises(Conflict):
        other.put("pg-chat", ONLY_A, expected_version=1, author="late", reason="stale")
    assert other.get("pg-chat").spec == SPLIT
    back = other.rollback("pg-chat", to_version=None, expected_version=2, author="ops")
    assert back.version == 3 and back.spec == ONLY_A
    other.close()
    assert [e.version for e in store.audit(route="pg-chat")] == [3, 2, 1]


def test_racing_writers_with_the_same_version_only_one_wins(store: RouteStore) -> None:
    store.seed({"pg-race": ONLY_A})
    outcomes: list[str] = []

    def write(index: int) -> None:
        try:
            store.put("pg-race", SPLIT, expected_version=1, author=f"w{index}", reason="race")
            outcomes.append("ok")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("ok") == 1 and outcomes.count("conflict") == 7
    assert store.get("pg-race").version == 2


def test_two_gateways_on_one_postgres_store_see_each_others_changes(
    tmp_path: Path, postgres_url: str
) -> None:
    with FaultServer(reply="from a") as a, FaultServer(reply="from b") as b:
        config = write_config(
            tmp_path / "gateway.yaml",
            {"a": fault_variant(a), "b": fault_variant(b)},
            {"pg-gw": {"targets": [{"variant": "a"}]}},
        )
        text = config.read_text().replace(f"sqlite:///{tmp_path / 'routes.db'}", postgres_url)
        config.write_text(text)
        with running_gateway(config) as first, running_gateway(config) as second:
            assert chat(second.url, "pg-gw").headers["x-turnout-variant"] == "a"
            moved = put_route(first.url, "pg-gw", {"targets": [{"variant": "b"}]}, version=1)
            assert moved.status_code == 200
            took = eventually(lambda: chat(second.url, "pg-gw").headers["x-turnout-variant"] == "b", 1.0)
            assert took < 1.0
            history = httpx.get(f"{second.url}/admin/routes/pg-gw/history", headers=admin()).json()
            assert [v["version"] for v in history["versions"]] == [1, 2]
