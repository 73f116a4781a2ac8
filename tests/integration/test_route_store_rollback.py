"""Rolling a route back in the route store on a real SQLite file: to a named version or the
previous one, past versions with a canary in progress or equal to the current one, and the
refusals (a rollback of a rollback, nothing earlier)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.errors import ClientError, Conflict, NotFound
from serving.routing.spec import RouteSpec, WeightedTarget
from serving.store import RouteStore
from tests.integration.route_store_specs import AB, ONLY_A, SHADOWED


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RouteStore]:
    opened = RouteStore(f"sqlite:///{tmp_path / 'routes.db'}")
    yield opened
    opened.close()


def test_rollback(store: RouteStore) -> None:
    store.seed({"chat": AB})
    store.put("chat", ONLY_A, expected_version=1, author="ana", reason="v2")
    store.put("chat", SHADOWED, expected_version=2, author="ana", reason="v3")

    back = store.rollback("chat", to_version=None, expected_version=3, author="bo")
    assert (back.version, back.action, back.reason, back.author) == (4, "rollback", "rollback to v2", "bo")
    assert back.spec == store.get_version("chat", 2).spec == ONLY_A

    to_first = store.rollback("chat", to_version=1, expected_version=None, author="bo", reason="bad canary")
    assert (to_first.version, to_first.reason, to_first.spec) == (5, "rollback to v1: bad canary", AB)
    assert [(v.version, v.action) for v in store.history("chat")] == [
        (1, "seed"),
        (2, "set"),
        (3, "set"),
        (4, "rollback"),
        (5, "rollback"),
    ]
    assert store.audit(limit=1)[0].detail == "rollback to v1: bad canary"  # what it restored, and why

    with pytest.raises(Conflict, match="at version 5, not 4"):
        store.rollback("chat", to_version=1, expected_version=4, author="bo")
    with pytest.raises(ClientError) as current:
        store.rollback("chat", to_version=5, expected_version=5, author="bo")
    assert (current.value.status, current.value.code) == (400, "no_earlier_version")
    with pytest.raises(NotFound):
        store.rollback("chat", to_version=9, expected_version=None, author="bo")
    with pytest.raises(NotFound) as no_route:
        store.rollback("absent", to_version=None, expected_version=None, author="bo")
    assert no_route.value.code == "route_not_found"

    with pytest.raises(Conflict) as again:  # v5 is a rollback: "the previous" would bring v4 back
        store.rollback("chat", to_version=None, expected_version=None, author="cy")
    assert (again.value.status, again.value.code) == (409, "already_rolled_back")
    assert "version 5, itself a rollback (rollback to v1: bad canary, by bo)" in again.value.message
    assert "--to N" in again.value.message and store.get("chat").version == 5

    store.seed({"fresh": AB})
    with pytest.raises(ClientError) as first_only:
        store.rollback("fresh", to_version=None, expected_version=1, author="bo")
    assert first_only.value.code == "no_earlier_version"
    assert store.get("fresh").version == 1


def test_a_plain_rollback_skips_versions_with_a_canary_in_progress(store: RouteStore) -> None:
    """The version before a completed canary is its last step: restored, the judge completed it
    again a second later. A plain rollback returns to the stable state the canary started from."""
    gate = {"metric": "error_rate", "max": 0.05}
    plan = {"stable": "a", "canary": "b", "steps": [50, 100], "gates": [gate]}
    canary_at = {
        step: RouteSpec.model_validate({
            "targets": [{"variant": "a", "weight": 100 - pct}, {"variant": "b", "weight": pct}],
            "canary": {**plan, "step": step},
        })
        for step, pct in ((0, 50), (1, 100))
    }  # fmt: skip
    only_b = RouteSpec(targets=[WeightedTarget(variant="b")])
    store.seed({"chat": ONLY_A})
    store.put("chat", canary_at[0], expected_version=1, author="ana", reason="canary")
    store.put("chat", canary_at[1], expected_version=2, author="judge", reason="promote")
    store.put("chat", only_b, expected_version=3, author="judge", reason="complete")
    back = store.rollback("chat", to_version=None, expected_version=4, author="bo", reason="back to a")
    assert (back.spec, back.reason) == (ONLY_A, "rollback to v1: back to a")
    with pytest.raises(Conflict, match="would return to version 4"):  # undoing it takes a --to
        store.rollback("chat", to_version=None, expected_version=5, author="cy")
    mid = store.put("chat", canary_at[1], expected_version=5, author="ana", reason="at its last step")
    assert store.rollback("chat", to_version=None, expected_version=mid.version, author="bo").spec == ONLY_A
    named = store.rollback("chat", to_version=3, expected_version=None, author="bo")
    assert named.spec == canary_at[1]  # named, a canary version comes back as it was


def test_a_plain_rollback_after_a_canary_abort_says_to_name_a_version(store: RouteStore) -> None:
    """The abort put the stable state back: 'the last version with no canary' is that same spec,
    and a rollback to it changed nothing (review)."""
    plan = {
        "stable": "a",
        "canary": "b",
        "steps": [50, 100],
        "gates": [{"metric": "error_rate", "max": 0.05}],
    }
    canary = RouteSpec.model_validate({"targets": [{"variant": "a"}], "canary": plan})
    store.seed({"chat": ONLY_A})
    store.put("chat", canary, expected_version=1, author="ana", reason="canary")
    store.put("chat", ONLY_A, expected_version=2, author="ana", reason="abort canary b")
    with pytest.raises(ClientError) as refused:
        store.rollback("chat", to_version=None, expected_version=3, author="bo")
    assert refused.value.code == "no_earlier_version" and "--to N" in refused.value.message
    assert store.get("chat").version == 3
