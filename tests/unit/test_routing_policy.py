"""The pure routing policy: sticky weighted assignment."""

from __future__ import annotations

import hashlib
import math

import pytest
from pydantic import ValidationError

from serving.routing.policy import RouteSpec, WeightedTarget, decide, pick_sticky, pick_weighted


def split(a: float, b: float) -> RouteSpec:
    return RouteSpec(targets=[WeightedTarget(variant="a", weight=a), WeightedTarget(variant="b", weight=b)])


def test_single_target_ignores_key_and_randomness() -> None:
    spec = RouteSpec(targets=[WeightedTarget(variant="only")])
    assert decide("r", spec, None, 0.99).primary == "only"
    assert decide("r", spec, "user-1", 0.0).primary == "only"


def test_sticky_pick_is_stable_per_route_and_skips_zero_weights() -> None:
    targets = split(50, 50).targets
    here = [pick_sticky("route", f"k{i}", targets) for i in range(1000)]
    assert here == [pick_sticky("route", f"k{i}", targets) for i in range(1000)]
    assert here != [pick_sticky("other-route", f"k{i}", targets) for i in range(1000)]  # routes differ
    muted = [WeightedTarget(variant="a", weight=0), WeightedTarget(variant="b", weight=1)]
    assert {pick_sticky("route", f"k{i}", muted) for i in range(1000)} == {"b"}


def test_a_tiny_weight_still_picks_a_target_and_ordinary_picks_are_unchanged() -> None:
    """-ln(u)/1e-320 was inf for every target: none won, and every sticky request was a 500."""
    tiny = [WeightedTarget(variant="a", weight=1e-320), WeightedTarget(variant="b", weight=0)]
    assert {pick_sticky("route", f"k{i}", tiny) for i in range(100)} == {"a"}
    both_tiny = [WeightedTarget(variant="a", weight=1e-320), WeightedTarget(variant="b", weight=3e-320)]
    assert {pick_sticky("route", f"k{i}", both_tiny) for i in range(200)} == {"a", "b"}

    def before(key: str, targets: list[WeightedTarget]) -> str:  # the formula as it was
        keyed = hashlib.sha256(f"route\x00{key}\x00".encode())
        scores = {}
        for target in targets:
            digest = keyed.copy()
            digest.update(target.variant.encode())
            unit = (int.from_bytes(digest.digest()[:8], "big") | 1) / 2.0**64
            scores[target.variant] = -math.log(unit) / target.weight
        return min(scores, key=lambda variant: scores[variant])

    targets = split(70, 30).targets  # no sticky user moves on upgrade
    assert [pick_sticky("route", f"k{i}", targets) for i in range(2000)] == [
        before(f"k{i}", targets) for i in range(2000)
    ]


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


def three(a: float, b: float, c: float, order: str = "abc") -> RouteSpec:
    weights = {"a": a, "b": b, "c": c}
    return RouteSpec(targets=[WeightedTarget(variant=v, weight=weights[v]) for v in order])


KEYS = [f"u{i}" for i in range(10_000)]


def _assign(spec: RouteSpec) -> dict[str, str]:
    return {k: decide("chat", spec, k, 0.0).primary for k in KEYS}


def test_the_order_targets_are_listed_in_moves_no_key() -> None:
    assert _assign(split(30, 70)) == _assign(
        RouteSpec(targets=[WeightedTarget(variant="b", weight=70), WeightedTarget(variant="a", weight=30)])
    )
    assert _assign(three(30, 40, 30)) == _assign(three(30, 40, 30, order="cab"))


def test_three_way_shares_and_one_weight_change_moves_only_that_targets_keys() -> None:
    before = _assign(three(30, 40, 30))
    for variant, share in (("a", 0.30), ("b", 0.40), ("c", 0.30)):
        assert abs(list(before.values()).count(variant) / len(KEYS) - share) <= 0.02
    after = _assign(three(30, 40, 60))  # c: 30% → 46%
    moved = [k for k in KEYS if before[k] != after[k]]
    assert all(after[k] == "c" for k in moved)  # keys only went to c, from a and b alike
    assert abs(len(moved) / len(KEYS) - (60 / 130 - 0.30)) <= 0.02
    added = _assign(RouteSpec(targets=[*three(30, 40, 30).targets, WeightedTarget(variant="d", weight=10)]))
    assert all(added[k] == "d" for k in KEYS if before[k] != added[k])  # a new target only takes keys


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


@pytest.mark.parametrize("field", ["weight", "sample_rate"])
def test_a_number_in_a_route_is_never_true_or_false(field: str) -> None:
    """The admin API took true as a weight of 1 (and as a sample rate: mirror everything)."""
    spec = {"targets": [{"variant": "a"}], "shadows": [{"variant": "b"}]}
    where = spec["targets"][0] if field == "weight" else spec["shadows"][0]
    where[field] = True
    with pytest.raises(ValidationError, match="must be a number, not true"):
        RouteSpec.model_validate(spec)


def test_true_is_no_number_in_optional_fields_and_lists_either() -> None:
    """A gate's max of true was a bound of 1.0 (100% errors): a gate that never breaks (review)."""
    plan = {"stable": "a", "canary": "b", "gates": [{"metric": "error_rate", "max": 0.05}]}
    for changed in ({"steps": [True, 50, 100]}, {"gates": [{"metric": "error_rate", "max": True}]}):
        with pytest.raises(ValidationError, match="must be a number, not true or false"):
            RouteSpec.model_validate({"targets": [{"variant": "a"}], "canary": {**plan, **changed}})


def test_numbers_written_as_strings_still_read_as_numbers() -> None:
    """PyYAML reads 1e-3 as a string: a config file's gate written so must keep loading."""
    gate = {"metric": "error_rate", "max": "1e-3"}
    plan = {"stable": "a", "canary": "b", "gates": [gate]}
    spec = RouteSpec.model_validate({"targets": [{"variant": "a", "weight": "70"}], "canary": plan})
    assert spec.targets[0].weight == 70.0 and spec.canary is not None and spec.canary.gates[0].max == 0.001
