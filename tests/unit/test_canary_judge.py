"""The canary judge and the route changes it leads to, as values in, values out."""

from __future__ import annotations

import pytest

from serving.routing.canary import Sample, Verdict, WindowStats, apply, hand_edit_action, judge, summarize
from serving.routing.spec import CanaryPlan, RouteSpec, ShadowTarget, SloGate, WeightedTarget

GATES = [
    SloGate(metric="error_rate", max=0.05),
    SloGate(metric="p95_ttft_ms", max=500),
    SloGate(metric="p95_latency_ms", max_ratio_to_stable=1.5),
]


def plan(**changes: object) -> CanaryPlan:
    fields: dict[str, object] = {"stable": "v1", "canary": "v2", "gates": GATES, **changes}
    return CanaryPlan.model_validate(fields)


def stats(
    count: int,
    errors: int = 0,
    ttft: float | None = 100.0,
    latency: float | None = 200.0,
    ttft_count: int | None = None,
) -> WindowStats:
    return WindowStats(
        count=count,
        errors=errors,
        error_rate=errors / count if count else 0.0,
        p95_ttft_ms=ttft,
        p95_latency_ms=latency,
        ttft_count=count if ttft_count is None else ttft_count,
    )


STABLE = stats(1000, errors=5, ttft=100.0, latency=200.0)


def route(canary: CanaryPlan | None = None, **changes: object) -> RouteSpec:
    fields: dict[str, object] = {
        "targets": [WeightedTarget(variant="v1")],
        "canary": canary or plan(),
        **changes,
    }
    return RouteSpec.model_validate(fields)


# summarize


def test_summarize_counts_and_nearest_rank_p95() -> None:
    samples = [Sample(at=float(i), ok=i % 10 != 0, latency_s=i / 1000, ttft_s=None) for i in range(1, 101)]
    result = summarize(samples)
    assert result.count == 100
    assert result.errors == 10
    assert result.error_rate == pytest.approx(0.10)
    assert result.p95_latency_ms == pytest.approx(95.0)  # nearest rank: the 95th of 100
    assert result.p95_ttft_ms is None
    assert result.ttft_count == 0


def test_summarize_ttft_only_from_streamed_samples() -> None:
    samples = [
        Sample(at=0.0, ok=True, latency_s=1.0, ttft_s=0.2),
        Sample(at=1.0, ok=True, latency_s=2.0, ttft_s=None),
        Sample(at=2.0, ok=False, latency_s=3.0, ttft_s=0.4),
    ]
    result = summarize(samples)
    assert result.ttft_count == 2
    assert result.p95_ttft_ms == pytest.approx(400.0)
    assert result.p95_latency_ms == pytest.approx(3000.0)
    assert result.errors == 1


def test_summarize_empty() -> None:
    assert summarize([]) == WindowStats(0, 0, 0.0, None, None, 0)


# hold


def test_hold_while_too_few_requests() -> None:
    verdict = judge(plan(), 3.0, stats(12, errors=12), STABLE)  # all failing, but too few to judge
    assert verdict == Verdict("hold", "waiting: 12/100 requests, 3/60 s")


def test_hold_while_too_short() -> None:
    verdict = judge(plan(), 30.0, stats(150), STABLE)
    assert verdict == Verdict("hold", "waiting: 150/100 requests, 30/60 s")


def test_broken_gate_rolls_back_before_min_duration() -> None:
    assert judge(plan(), 5.0, stats(100, errors=20), STABLE).action == "rollback"


# promote


def test_promote_reason() -> None:
    verdict = judge(plan(step=1), 61.0, stats(212, ttft=120.0, latency=300.0), STABLE)
    assert verdict == Verdict(
        "promote",
        "step 2/4 (25%) held: 212 requests over 61 s, error rate 0.0%, p95 TTFT 120 ms, p95 latency 300 ms",
    )


def test_promote_reason_leaves_out_missing_ttft() -> None:
    no_ttft_gate = [gate for gate in GATES if gate.metric != "p95_ttft_ms"]
    verdict = judge(plan(gates=no_ttft_gate), 60.0, stats(100, ttft=None, ttft_count=0), STABLE)
    assert verdict.reason == "step 1/4 (5%) held: 100 requests over 60 s, error rate 0.0%, p95 latency 200 ms"


def test_promote_through_all_steps_then_complete() -> None:
    spec = route()
    seen: list[tuple[float | None, str]] = []
    while spec.canary is not None:
        current = spec.canary
        assert judge(current, 10.0, stats(150), STABLE).action == "hold"
        verdict = judge(current, 60.0, stats(150), STABLE)
        assert verdict.action == "promote"
        changed = apply(spec, verdict)
        assert changed is not None
        spec, action = changed
        seen.append((spec.canary.percent if spec.canary else None, action))
    assert seen == [
        (25.0, "canary-promote"),
        (50.0, "canary-promote"),
        (100.0, "canary-promote"),
        (None, "canary-complete"),
    ]
    assert spec.targets == [WeightedTarget(variant="v2")]
    assert spec.primaries() == [WeightedTarget(variant="v2")]


def test_promote_splits_traffic_by_the_next_step() -> None:
    changed = apply(route(), Verdict("promote", "ok"))
    assert changed is not None
    spec, _ = changed
    assert spec.primaries() == [
        WeightedTarget(variant="v1", weight=75.0),
        WeightedTarget(variant="v2", weight=25.0),
    ]


# rollback, one per gate kind


@pytest.mark.parametrize(
    ("gate", "canary", "reason"),
    [
        (
            SloGate(metric="error_rate", max=0.05),
            stats(150, errors=18),
            "error rate 12.0% > 5.0% over 150 requests",
        ),
        (
            SloGate(metric="p95_ttft_ms", max=500),
            stats(212, ttft=840.0),
            "p95 TTFT 840 ms > 500 ms over 212 requests",
        ),
        (
            SloGate(metric="p95_latency_ms", max=1000),
            stats(120, latency=1200.4),
            "p95 latency 1200 ms > 1000 ms over 120 requests",
        ),
        (
            SloGate(metric="p95_latency_ms", max_ratio_to_stable=1.5),
            stats(130, latency=310.0),
            "p95 latency 310 ms > 1.5× stable's 200 ms over 130 requests",
        ),
        (
            SloGate(metric="p95_ttft_ms", max_ratio_to_stable=2),
            stats(100, ttft=250.0),
            "p95 TTFT 250 ms > 2× stable's 100 ms over 100 requests",
        ),
        (
            SloGate(metric="error_rate", max_ratio_to_stable=2),
            stats(200, errors=6),
            "error rate 3.0% > 2× stable's 0.5% over 200 requests",
        ),
        # small bounds keep two significant digits (a 0.5 ms gate read "7 ms > 0 ms")
        (
            SloGate(metric="p95_latency_ms", max=0.5),
            stats(138, latency=7.44),
            "p95 latency 7.4 ms > 0.5 ms over 138 requests",
        ),
        (
            SloGate(metric="error_rate", max=0.0005),
            stats(2000, errors=2),
            "error rate 0.1% > 0.05% over 2000 requests",
        ),
    ],
)
def test_rollback_on_each_gate(gate: SloGate, canary: WindowStats, reason: str) -> None:
    assert judge(plan(gates=[gate]), 1.0, canary, STABLE) == Verdict("rollback", reason)


def test_value_at_the_bound_holds() -> None:
    gates = [
        SloGate(metric="p95_ttft_ms", max=500),
        SloGate(metric="p95_latency_ms", max_ratio_to_stable=1.5),
    ]
    assert judge(plan(gates=gates), 60.0, stats(100, ttft=500.0, latency=300.0), STABLE).action == "promote"


def test_first_broken_gate_in_plan_order_is_reported() -> None:
    verdict = judge(plan(), 60.0, stats(200, errors=20, ttft=900.0), STABLE)
    assert verdict.reason == "error rate 10.0% > 5.0% over 200 requests"


def test_gate_with_both_bounds_checks_both() -> None:
    gate = SloGate(metric="p95_latency_ms", max=1000, max_ratio_to_stable=1.5)
    assert judge(plan(gates=[gate]), 60.0, stats(100, latency=1100.0), STABLE).reason.startswith(
        "p95 latency 1100 ms > 1000 ms"
    )
    assert judge(plan(gates=[gate]), 60.0, stats(100, latency=400.0), STABLE).reason.startswith(
        "p95 latency 400 ms > 1.5× stable's 200 ms"
    )


def test_relative_error_rate_against_a_stable_with_no_errors() -> None:
    stable = stats(150, errors=0)
    gates = [SloGate(metric="error_rate", max_ratio_to_stable=2)]
    # 0 errors in 150 counts as 1/150 ≈ 0.67%, so up to 1.33% passes...
    assert judge(plan(gates=gates), 60.0, stats(300, errors=4), stable).action == "promote"
    # ...and more rolls back, with the floor shown.
    assert judge(plan(gates=gates), 60.0, stats(300, errors=5), stable) == Verdict(
        "rollback", "error rate 1.7% > 2× stable's 0.0% (taken as 1/150) over 300 requests"
    )


# gates that cannot be evaluated


def test_a_ttft_gate_without_enough_streamed_requests_holds_rather_than_passes() -> None:
    """No TTFT cannot break the gate, nor promote past it: it used to count as holding (QA: a
    canary with a 50 ms TTFT gate and a 300 ms upstream was promoted on non-streamed traffic)."""
    gates = [SloGate(metric="p95_ttft_ms", max=1), SloGate(metric="p95_ttft_ms", max_ratio_to_stable=1)]
    verdict = judge(plan(gates=gates), 60.0, stats(100, ttft=None, ttft_count=0), STABLE)
    assert verdict == Verdict("hold", "waiting: 0/10 streamed requests for the p95 TTFT gate")
    few = judge(plan(gates=[gates[1]]), 60.0, stats(100, ttft=50.0, ttft_count=9), STABLE)
    assert few == Verdict("hold", "waiting: 9/10 streamed requests for the p95 TTFT gate")
    enough = judge(plan(gates=[gates[1]]), 60.0, stats(100, ttft=90.0, ttft_count=10), STABLE)
    assert enough.action == "promote"
    small = plan(gates=[gates[1]], min_requests=3, min_duration_s=0)  # the need follows min_requests
    assert judge(small, 0.0, stats(3, ttft=90.0, ttft_count=3), STABLE).action == "promote"


@pytest.mark.parametrize(
    "stable",
    [
        stats(9, latency=10.0),  # fewer than min(10, min_requests) requests
        stats(0, ttft=None, latency=None),  # nothing at all
    ],
)
def test_relative_bound_skipped_without_stable_data(stable: WindowStats) -> None:
    gates = [
        SloGate(metric="p95_latency_ms", max_ratio_to_stable=1.1),
        SloGate(metric="error_rate", max=0.05),
    ]
    assert judge(plan(gates=gates), 60.0, stats(100, latency=900.0), stable).action == "promote"


def test_relative_ttft_needs_enough_streamed_stable_requests() -> None:
    gates = [SloGate(metric="p95_ttft_ms", max_ratio_to_stable=1.1)]
    few_streamed = stats(1000, ttft=50.0, ttft_count=9)
    assert judge(plan(gates=gates), 60.0, stats(100, ttft=900.0), few_streamed).action == "promote"
    enough = stats(1000, ttft=50.0, ttft_count=10)
    assert judge(plan(gates=gates), 60.0, stats(100, ttft=900.0), enough).action == "rollback"


def test_stable_minimum_follows_a_small_min_requests() -> None:
    gates = [SloGate(metric="p95_latency_ms", max_ratio_to_stable=1.1)]
    small = plan(gates=gates, min_requests=3, min_duration_s=0)
    assert judge(small, 0.0, stats(3, latency=900.0), stats(3, latency=100.0)).action == "rollback"
    assert judge(small, 0.0, stats(3, latency=900.0), stats(2, latency=100.0)).action == "promote"


# apply


def test_hold_changes_nothing() -> None:
    assert apply(route(), Verdict("hold", "waiting")) is None


def test_apply_without_a_canary_plan_is_an_error() -> None:
    spec = RouteSpec(targets=[WeightedTarget(variant="v1")])
    with pytest.raises(ValueError, match="no canary plan"):
        apply(spec, Verdict("rollback", "x"))


def test_rollback_returns_to_stable_alone() -> None:
    spec = route(canary=plan(step=2))
    changed = apply(spec, Verdict("rollback", "error rate 12.0% > 5.0% over 150 requests"))
    assert changed is not None
    new, action = changed
    assert action == "canary-rollback"
    assert new.targets == [WeightedTarget(variant="v1")]
    assert new.canary is None


def test_apply_keeps_other_fields_and_drops_the_new_sole_target() -> None:
    spec = route(
        sticky="user",
        retries=2,
        shadows=[ShadowTarget(variant="v3", sample_rate=0.1)],
        fallbacks=["v2", "v1", "v4"],
        canary=plan(step=3),
    )
    promoted = apply(spec, Verdict("promote", "ok"))
    assert promoted is not None
    done, action = promoted
    assert action == "canary-complete"
    assert done.targets == [WeightedTarget(variant="v2")]
    assert done.fallbacks == ["v1", "v4"]
    assert done.shadows == [ShadowTarget(variant="v3", sample_rate=0.1)]
    assert (done.sticky, done.retries) == ("user", 2)

    rolled = apply(spec, Verdict("rollback", "bad"))
    assert rolled is not None
    back, _ = rolled
    assert back.fallbacks == ["v2", "v4"]
    assert back.shadows == [ShadowTarget(variant="v3", sample_rate=0.1)]
    assert (back.sticky, back.retries) == ("user", 2)


def test_rollback_drops_a_shadow_equal_to_stable() -> None:
    # RouteSpec never lets stable be a shadow, so build such an old spec without validation.
    valid = route(shadows=[ShadowTarget(variant="v3")])
    spec = valid.model_copy(update={"shadows": [ShadowTarget(variant="v1"), ShadowTarget(variant="v3")]})
    changed = apply(spec, Verdict("rollback", "bad"))
    assert changed is not None
    assert [s.variant for s in changed[0].shadows] == ["v3"]


def test_rollback_leaves_other_targets_out() -> None:
    # RouteSpec now refuses a canary beside a second live target; a version stored before may hold one.
    targets = [WeightedTarget(variant="v1"), WeightedTarget(variant="v9")]
    spec = route().model_copy(update={"targets": targets})
    changed = apply(spec, Verdict("rollback", "bad"))
    assert changed is not None
    assert changed[0].targets == [WeightedTarget(variant="v1")]


def test_complete_drops_a_shadow_equal_to_the_canary() -> None:
    # RouteSpec forbids the canary as a shadow, so build the old spec without validation.
    valid = route(shadows=[ShadowTarget(variant="v3")], canary=plan(step=3))
    spec = valid.model_copy(update={"shadows": [ShadowTarget(variant="v2"), ShadowTarget(variant="v3")]})
    changed = apply(spec, Verdict("promote", "ok"))
    assert changed is not None
    assert [s.variant for s in changed[0].shadows] == ["v3"]


# hand edits: what the audit log calls them


def plain(*variants: str) -> RouteSpec:
    """A route with no canary, its traffic split evenly over ``variants``."""
    return RouteSpec(targets=[WeightedTarget(variant=v) for v in variants])


@pytest.mark.parametrize(
    ("before", "after", "action"),
    [
        (None, plain("v1"), "set"),
        (plain("v1"), plain("v2"), "set"),
        (plain("v1"), route(), "canary-start"),
        (None, route(), "canary-start"),  # a new route that starts with a canary
        (route(), plain("v1"), "canary-abort"),
        (route(), plain("v2"), "canary-complete"),
        (route(), route(canary=plan(steps=[5, 100])), "set"),  # the running plan edited
        (route(), plain("v3"), "set"),
        (route(), plain("v1", "v2"), "set"),
    ],
)
def test_a_hand_edit_is_named_by_what_it_did_to_a_canary(
    before: RouteSpec | None, after: RouteSpec, action: str
) -> None:
    assert hand_edit_action(before, after) == action


def test_a_hand_abort_or_promote_is_named_as_the_judge_names_the_same_change() -> None:
    running = route()
    rolled_back = apply(running, Verdict("rollback", "why"))
    last_step = route(canary=plan(step=len(plan().steps) - 1))
    promoted = apply(last_step, Verdict("promote", "why"))
    assert rolled_back is not None and promoted is not None
    assert (rolled_back[1], hand_edit_action(running, rolled_back[0])) == ("canary-rollback", "canary-abort")
    assert (promoted[1], hand_edit_action(last_step, promoted[0])) == ("canary-complete", "canary-complete")
