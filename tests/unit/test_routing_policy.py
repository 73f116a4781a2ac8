"""The pure routing policy: sticky weighted assignment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serving.routing.policy import RouteSpec, WeightedTarget, decide, pick_weighted, sticky_unit


def split(a: float, b: float) -> RouteSpec:
    return RouteSpec(targets=[WeightedTarget(variant="a", weight=a), WeightedTarget(variant="b", weight=b)])


def test_single_target_ignores_key_and_randomness() -> None:
    spec = RouteSpec(targets=[WeightedTarget(variant="only")])
    assert decide("r", spec, None, 0.99).primary == "only"
    assert decide("r", spec, "user-1", 0.0).primary == "only"


def test_sticky_unit_is_stable_and_in_range() -> None:
    values = [sticky_unit("route", f"k{i}") for i in range(1000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert sticky_unit("route", "k1") == sticky_unit("route", "k1")
    assert sticky_unit("route", "k1") != sticky_unit("other-route", "k1")


def test_seventy_thirty_split_over_ten_thousand_keys() -> None:
    spec = split(70, 30)
    picks = [decide("chat", spec, f"user-{i}", 0.0).primary for i in range(10_000)]
    share = picks.count("a") / len(picks)
    assert abs(share - 0.70) <= 0.02


def test_same_key_same_variant() -> None:
    spec = split(50, 50)
    first = [decide("chat", spec, f"u{i}", 0.3).primary for i in range(200)]
    again = [decide("chat", spec, f"u{i}", 0.9).primary for i in range(200)]
    assert first == again


def test_moving_weight_moves_only_the_keys_it_must() -> None:
    before = {f"u{i}": decide("chat", split(70, 30), f"u{i}", 0.0).primary for i in range(10_000)}
    after = {f"u{i}": decide("chat", split(60, 40), f"u{i}", 0.0).primary for i in range(10_000)}
    moved = [k for k in before if before[k] != after[k]]
    assert all(before[k] == "a" and after[k] == "b" for k in moved)
    assert abs(len(moved) / 10_000 - 0.10) <= 0.02


def test_no_key_uses_the_random_draw() -> None:
    spec = split(1, 1)
    assert decide("r", spec, None, 0.1).primary == "a"
    assert decide("r", spec, None, 0.9).primary == "b"


def test_pick_weighted_edges() -> None:
    targets = [WeightedTarget(variant="a", weight=1), WeightedTarget(variant="b", weight=3)]
    assert pick_weighted(targets, 0.0) == "a"
    assert pick_weighted(targets, 0.2499) == "a"
    assert pick_weighted(targets, 0.25) == "b"
    assert pick_weighted(targets, 0.999999) == "b"


@pytest.mark.parametrize(
    "targets",
    [[], [{"variant": "a", "weight": 0}], [{"variant": "a"}, {"variant": "a"}], [{"variant": "a", "x": 1}]],
)
def test_invalid_route_specs(targets: list[dict[str, object]]) -> None:
    with pytest.raises(ValidationError):
        RouteSpec.model_validate({"targets": targets})
