"""The admin API against real gateway processes: versions, If-Match, 422s, rollback, audit, A/B.

Two fault servers answer as variants ``a`` and ``b`` (each with its own reply, so the
answer says who served); routes live in a per-test SQLite store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.fault import FaultServer
from serving.auth import hash_key, key_prefix, new_key
from serving.routing.spec import RouteSpec
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

SPLIT_70_30 = {"targets": [{"variant": "a", "weight": 70}, {"variant": "b", "weight": 30}]}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FaultServer, FaultServer]]:
    with FaultServer(reply="answer from a") as a, FaultServer(reply="answer from b") as b:
        yield a, b


@pytest.fixture
def config(tmp_path: Path, servers: tuple[FaultServer, FaultServer]) -> Path:
    a, b = servers
    variants = {"a": fault_variant(a), "b": fault_variant(b)}
    return write_config(tmp_path / "gateway.yaml", variants, {"chat": {"targets": [{"variant": "a"}]}})


@pytest.fixture
def gateway(config: Path) -> Iterator[str]:
    with running_gateway(config) as launched:
        yield launched.url


def _store_url(config: Path) -> str:
    return f"sqlite:///{config.parent / 'routes.db'}"


def test_config_seeds_version_one_and_requests_carry_version_and_variant(gateway: str) -> None:
    current = httpx.get(f"{gateway}/admin/routes/chat", headers=admin())
    assert current.status_code == 200
    assert current.json()["version"] == 1 and current.json()["action"] == "seed"
    assert current.headers["etag"] == '"1"'
    reply = chat(gateway)
    assert reply.status_code == 200
    assert reply.headers["x-turnout-variant"] == "a"
    assert reply.headers["x-turnout-route-version"] == "1"
    assert reply.json()["choices"][0]["message"]["content"] == "answer from a"


def test_admin_api_needs_a_token_of_the_right_role(gateway: str, config: Path) -> None:
    store = RouteStore(_store_url(config))
    keys = {}
    for name, role in [("app", "client"), ("watcher", "viewer"), ("ops", "operator")]:
        keys[role] = new_key(role)  # type: ignore[arg-type]
        store.add_key(
            name=name, role=role, key_hash=hash_key(keys[role]), prefix=key_prefix(keys[role]), actor="test"
        )
    store.close()
    url = f"{gateway}/admin/routes/chat"
    eventually(lambda: httpx.get(url, headers=admin(keys["viewer"])).status_code == 200, 2)
    missing = httpx.get(url)
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    assert httpx.get(url, headers=admin("tadm-wrong")).status_code == 401
    client = httpx.get(url, headers=admin(keys["client"]))
    assert client.status_code == 403 and "client API key" in client.json()["error"]["message"]
    body = {"spec": SPLIT_70_30, "reason": "viewer tries"}
    viewer_write = httpx.put(url, json=body, headers=admin(keys["viewer"]))
    assert viewer_write.status_code == 403
    operator_write = httpx.put(url, json=body, headers=admin(keys["operator"]))
    assert operator_write.status_code == 200 and operator_write.json()["author"] == "ops"


def test_put_with_if_match_makes_a_new_version_and_a_stale_one_is_409(gateway: str) -> None:
    first = put_route(gateway, "chat", SPLIT_70_30, version=1, reason="start A/B")
    assert first.status_code == 200, first.text
    assert first.json()["version"] == 2 and first.json()["reason"] == "start A/B"
    stale = put_route(gateway, "chat", {"targets": [{"variant": "b"}]}, version=1, reason="late")
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "version_conflict"
    assert httpx.get(f"{gateway}/admin/routes/chat", headers=admin()).json()["version"] == 2


def test_a_change_is_in_force_at_once_and_splits_seventy_thirty_stickily(gateway: str) -> None:
    assert put_route(gateway, "chat", SPLIT_70_30, version=1).status_code == 200
    served = {}
    for i in range(300):
        reply = chat(gateway, key=f"user-{i}")
        assert reply.headers["x-turnout-route-version"] == "2"
        served[f"user-{i}"] = reply.headers["x-turnout-variant"]
    share_a = list(served.values()).count("a") / len(served)
    assert 0.60 <= share_a <= 0.80  # 300 keys: ±10 points; the 10,000-key ±2% check is a unit test
    for key in list(served)[:30]:
        assert chat(gateway, key=key).headers["x-turnout-variant"] == served[key]
    by_user = chat(gateway, user="someone")
    assert chat(gateway, user="someone").headers["x-turnout-variant"] == by_user.headers["x-turnout-variant"]


BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("zero weights", {"targets": [{"variant": "a", "weight": 0}]}, "sum to a positive number"),
    ("unknown variant", {"targets": [{"variant": "nope"}]}, "unknown variant 'nope'"),
    (
        "shadow equals primary",
        {"targets": [{"variant": "a"}], "shadows": [{"variant": "a"}]},
        "shadow 'a' is also a primary target",
    ),
    (
        "canary steps not increasing",
        {
            "targets": [{"variant": "a"}],
            "canary": {
                "stable": "a",
                "canary": "b",
                "steps": [50, 10],
                "gates": [{"metric": "error_rate", "max": 0.1}],
            },
        },
        "must increase strictly",
    ),
    (
        "canary without gates",
        {"targets": [{"variant": "a"}], "canary": {"stable": "a", "canary": "b", "gates": []}},
        "a canary needs at least one gate (gates or eval_gate)",
    ),
    (
        "canary on a split",
        {
            "targets": [{"variant": "a", "weight": 70}, {"variant": "b", "weight": 30}],
            "canary": {"stable": "a", "canary": "b", "gates": [{"metric": "error_rate", "max": 0.1}]},
        },
        "spec.canary: a canary moves traffic from one stable variant, but the targets split it (a 70, b 30)",
    ),
    (
        "canary from a target that takes no traffic",
        {
            "targets": [{"variant": "a", "weight": 0}, {"variant": "b", "weight": 1}],
            "canary": {"stable": "a", "canary": "c", "gates": [{"metric": "error_rate", "max": 0.1}]},
        },
        "spec.canary.stable: 'a' takes no traffic (weight 0); the route's traffic goes to 'b'",
    ),
    (
        "weights whose sum overflows",
        {"targets": [{"variant": "a", "weight": 1e308}, {"variant": "b", "weight": 1e308}]},
        "spec.targets: the weights must sum to a finite number",
    ),
    ("negative weight", {"targets": [{"variant": "a", "weight": -1}]}, "spec.targets.0.weight"),
    ("unknown field", {"targets": [{"variant": "a"}], "weights": {}}, "spec.weights"),
    (
        "a shadow's rate, as the CLI's flag is named",
        {"targets": [{"variant": "a"}], "shadows": [{"variant": "b", "rate": 0.5}]},
        "spec.shadows.0.rate: unknown field; did you mean 'sample_rate'?",
    ),
    ("a target that is no object", {"targets": ["a"]}, "spec.targets.0: must be an object"),
    ("targets that are no list", {"targets": {"variant": "a"}}, "spec.targets: must be a list"),
]


@pytest.mark.parametrize(("case", "spec", "reason"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_an_invalid_spec_is_422_with_the_reason_and_changes_nothing(
    gateway: str, case: str, spec: dict[str, Any], reason: str
) -> None:
    reply = put_route(gateway, "chat", spec, version=1)
    assert reply.status_code == 422, reply.text
    assert reason in reply.json()["error"]["message"]
    assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx.get(f"{gateway}/admin/routes/chat", headers=admin()).json()["version"] == 1
    assert chat(gateway).status_code == 200


def test_bad_admin_requests_are_4xx(gateway: str) -> None:
    url = f"{gateway}/admin/routes/chat"
    not_json = httpx.put(url, content=b"{nope", headers=admin())
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_json"
    no_spec = httpx.put(url, json={"reason": "x"}, headers=admin())
    assert no_spec.status_code == 422
    bad_match = httpx.put(url, json={"spec": SPLIT_70_30}, headers={**admin(), "if-match": "abc"})
    assert bad_match.status_code == 400
    assert httpx.get(f"{gateway}/admin/routes/missing", headers=admin()).status_code == 404
    assert httpx.get(f"{gateway}/admin/audit?limit=0", headers=admin()).status_code == 400
    huge = httpx.put(url, json={"spec": SPLIT_70_30, "reason": "x" * 2_000_000}, headers=admin())
    assert huge.status_code == 413 and huge.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(url, headers=admin()).json()["version"] == 1  # server.max_body_bytes, as /v1's


def test_history_rollback_and_audit(gateway: str) -> None:
    assert put_route(gateway, "chat", SPLIT_70_30, version=1, reason="A/B").status_code == 200
    assert (
        put_route(gateway, "chat", {"targets": [{"variant": "b"}]}, version=2, reason="all b").json()[
            "version"
        ]
        == 3
    )
    assert chat(gateway).headers["x-turnout-variant"] == "b"
    back = httpx.post(f"{gateway}/admin/routes/chat/rollback", json={}, headers=admin())
    assert back.status_code == 200
    assert back.json()["version"] == 4 and back.json()["action"] == "rollback"
    assert back.json()["spec"]["targets"] == [
        {"variant": "a", "weight": 70.0},
        {"variant": "b", "weight": 30.0},
    ]
    to_one = httpx.post(
        f"{gateway}/admin/routes/chat/rollback",
        json={"to_version": 1, "reason": "undo everything"},
        headers={**admin(), "if-match": '"4"'},
    )
    assert to_one.status_code == 200 and to_one.json()["version"] == 5
    assert chat(gateway).headers["x-turnout-variant"] == "a"
    history = httpx.get(f"{gateway}/admin/routes/chat/history", headers=admin()).json()["versions"]
    assert [v["version"] for v in history] == [1, 2, 3, 4, 5]
    assert [v["action"] for v in history] == ["seed", "set", "set", "rollback", "rollback"]
    assert (
        history[4]["spec"] == history[0]["spec"] and history[4]["reason"] == "rollback to v1: undo everything"
    )
    entries = httpx.get(f"{gateway}/admin/audit?route=chat", headers=admin()).json()["entries"]
    assert [e["version"] for e in entries[:5]] == [5, 4, 3, 2, 1]
    assert entries[0]["actor"] == "env-admin"
    missing = httpx.post(f"{gateway}/admin/routes/chat/rollback", json={"to_version": 99}, headers=admin())
    assert missing.status_code == 404
    not_a_version = httpx.post(
        f"{gateway}/admin/routes/chat/rollback", json={"to_version": True}, headers=admin()
    )
    assert not_a_version.status_code == 400 and not_a_version.json()["error"]["param"] == "to_version"


def test_a_rollback_never_restores_a_version_this_gateway_cannot_serve(
    config: Path, servers: tuple[FaultServer, FaultServer]
) -> None:
    """Version 2 sends to ``b``, which the restarted gateway no longer has: rolling back to it,
    by number or as the default one before the current, is a 422 and writes nothing (the default
    used to be written unchecked and then never put in force)."""
    with running_gateway(config) as launched:
        assert put_route(launched.url, "chat", {"targets": [{"variant": "b"}]}, version=1).status_code == 200
        assert put_route(launched.url, "chat", {"targets": [{"variant": "a"}]}, version=2).status_code == 200
    a, _ = servers
    write_config(config, {"a": fault_variant(a)}, {"chat": {"targets": [{"variant": "a"}]}})
    with running_gateway(config) as launched:
        rollback = f"{launched.url}/admin/routes/chat/rollback"
        for body in ({}, {"to_version": 2}):
            refused = httpx.post(rollback, json=body, headers=admin())
            assert refused.status_code == 422, refused.text
            assert "unknown variant 'b'" in refused.json()["error"]["message"]
        assert httpx.get(f"{launched.url}/admin/routes/chat", headers=admin()).json()["version"] == 3
        assert chat(launched.url).headers["x-turnout-route-version"] == "3"
        too_big = httpx.post(rollback, json={"to_version": 2**63}, headers=admin())
        assert too_big.status_code == 400 and too_big.json()["error"]["param"] == "to_version"


def test_a_version_stored_before_todays_spec_rules_still_opens_serves_and_is_replaced(config: Path) -> None:
    """An older release let a canary start from a weight-0 target; its stored version must not
    stop a newer gateway from starting on that store (the rules apply to writes, not reads)."""
    legacy = {
        "targets": [{"variant": "a", "weight": 0}, {"variant": "b", "weight": 1}],
        "canary": {"stable": "a", "canary": "b", "gates": [{"metric": "error_rate", "max": 0.1}]},
    }
    wide = {"targets": [{"variant": "a", "weight": 1e308}, {"variant": "b", "weight": 1e308}]}
    store = RouteStore(_store_url(config))
    store.put("chat", RouteSpec.model_validate(legacy), expected_version=None, author="old", reason="")
    store.put("wide", RouteSpec.model_validate(wide), expected_version=None, author="old", reason="")
    store.close()
    with running_gateway(config) as launched:
        listed = httpx.get(f"{launched.url}/admin/routes", headers=admin())
        assert listed.status_code == 200 and listed.json()["routes"][0]["spec"]["targets"][0]["weight"] == 0
        served = chat(launched.url)  # the stored canary's split (a 95, b 5), not the file's route
        assert served.status_code == 200 and served.headers["x-turnout-route-version"] == "1"
        assert served.headers["x-turnout-variant"] in ("a", "b")
        assert launched.log is not None and "cannot be served here" not in launched.log.read_text()
        as_before = chat(launched.url, "wide")  # not in the file at all: served as the old release did
        assert as_before.status_code == 200 and as_before.headers["x-turnout-variant"] == "b"
        again = put_route(launched.url, "chat", legacy, version=1)
        assert again.status_code == 422 and "takes no traffic" in again.json()["error"]["message"]
        assert put_route(launched.url, "chat", {"targets": [{"variant": "b"}]}, version=1).status_code == 200
        eventually(lambda: chat(launched.url).headers["x-turnout-variant"] == "b", timeout=2)


def test_routes_survive_a_restart(config: Path) -> None:
    with running_gateway(config) as launched:
        assert put_route(launched.url, "chat", {"targets": [{"variant": "b"}]}, version=1).status_code == 200
    with running_gateway(config) as launched:
        current = httpx.get(f"{launched.url}/admin/routes/chat", headers=admin()).json()
        assert current["version"] == 2 and current["spec"]["targets"] == [{"variant": "b", "weight": 1.0}]
        assert chat(launched.url).headers["x-turnout-variant"] == "b"


def test_the_store_wins_over_a_config_file_edited_since_it_seeded_the_route(
    config: Path, servers: tuple[FaultServer, FaultServer]
) -> None:
    """Edit the file's route (a → b) and restart on the same store: the stored version 1 is
    what serves and what the admin API shows, and the log says the file was not taken."""
    with running_gateway(config) as launched:
        assert chat(launched.url).headers["x-turnout-variant"] == "a"
    a, b = servers
    write_config(
        config, {"a": fault_variant(a), "b": fault_variant(b)}, {"chat": {"targets": [{"variant": "b"}]}}
    )
    with running_gateway(config) as launched:
        reply = chat(launched.url)
        assert (reply.headers["x-turnout-route-version"], reply.headers["x-turnout-variant"]) == ("1", "a")
        current = httpx.get(f"{launched.url}/admin/routes/chat", headers=admin()).json()
        assert current["version"] == 1 and current["spec"]["targets"] == [{"variant": "a", "weight": 1.0}]
        assert launched.log is not None
        logged = launched.log.read_text()
        assert "the config file's spec differs from the store's v1" in logged
        assert f"turnout: route store sqlite:///{config.parent / 'routes.db'}" in logged  # said at start


def test_a_change_reaches_another_gateway_process_within_one_second(config: Path) -> None:
    with running_gateway(config) as first, running_gateway(config) as second:
        assert chat(second.url).headers["x-turnout-variant"] == "a"
        assert put_route(first.url, "chat", {"targets": [{"variant": "b"}]}, version=1).status_code == 200
        took = eventually(lambda: chat(second.url).headers["x-turnout-variant"] == "b", timeout=1.0)
        assert took < 1.0


def test_only_the_write_that_made_a_route_is_a_201(config: Path) -> None:
    """Not every write to a route this process had not loaded yet (QA: five writes at once, five 201s)."""
    with running_gateway(config) as first, running_gateway(config) as second:
        assert put_route(first.url, "fresh", {"targets": [{"variant": "a"}]}, version=0).status_code == 201
        again = put_route(second.url, "fresh", {"targets": [{"variant": "b"}]})  # before it synced
        assert (again.status_code, again.json()["version"]) == (200, 2)


def test_a_new_route_appears_in_models(gateway: str) -> None:
    created = put_route(gateway, "chat-b", {"targets": [{"variant": "b"}]}, version=0)
    assert created.status_code == 201 and created.json()["version"] == 1
    names = [m["id"] for m in httpx.get(f"{gateway}/v1/models").json()["data"]]
    assert "chat-b" in names
    assert chat(gateway, model="chat-b").json()["choices"][0]["message"]["content"] == "answer from b"
