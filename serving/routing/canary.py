"""The canary judge: hold, promote or roll back a canary from the observations of the current step.

Sits beside the request path, not on it: requests are observed after they finish, and the
gateway's canary controller calls :func:`judge` every tick with the canary's and the stable
variant's :class:`WindowStats` since the current step began. When the verdict is promote or
rollback, :func:`apply` gives the next :class:`~serving.routing.spec.RouteSpec`, which the
controller writes as a new route version (the verdict's reason goes to the audit log), and
``serving.routing.policy`` routes by it from then on. Nothing here reads the clock: elapsed time
and sample times are passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from serving.routing.spec import CanaryPlan, EvalGate, RouteSpec, SloGate, WeightedTarget

__all__ = ["EvalScores", "Sample", "Verdict", "WindowStats", "apply", "judge", "summarize"]

# A relative gate needs the stable variant to have at least min(this, plan.min_requests) values,
# and no step is promoted before each gate's metric has that many of the canary's.
MIN_VALUES = 10


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # unix seconds
    ok: bool  # False for 5xx / timeouts / upstream failures (the caller decides)
    latency_s: float
    ttft_s: float | None  # only streamed requests have one


@dataclass(frozen=True, slots=True)
class WindowStats:
    count: int
    errors: int
    error_rate: float  # errors / count; 0.0 when count is 0
    p95_ttft_ms: float | None  # None when no sample has a TTFT
    p95_latency_ms: float | None  # None when there are no samples
    ttft_count: int = 0  # how many samples have a TTFT (the streamed ones)


def _p95(values: Sequence[float]) -> float | None:
    """95th percentile by nearest rank: the smallest value with at least 95% of values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def summarize(samples: Iterable[Sample]) -> WindowStats:
    """Count, errors and nearest-rank p95s (in milliseconds) of ``samples``."""
    items = list(samples)
    errors = sum(1 for s in items if not s.ok)
    ttfts = [s.ttft_s * 1000.0 for s in items if s.ttft_s is not None]
    return WindowStats(
        count=len(items),
        errors=errors,
        error_rate=errors / len(items) if items else 0.0,
        p95_ttft_ms=_p95(ttfts),
        p95_latency_ms=_p95([s.latency_s * 1000.0 for s in items]),
        ttft_count=len(ttfts),
    )


@dataclass(frozen=True, slots=True)
class EvalScores:
    """The eval gate's result: accuracies (fractions) on the same ``examples`` rows of ``dataset``."""

    dataset: str
    examples: int
    canary: float
    stable: float | None = None  # measured only when the gate compares with stable
    canary_failed: int = 0  # requests that failed (counted as wrong)


def _eval_broken(gate: EvalGate, scores: EvalScores) -> str | None:
    """Why the eval gate is broken, or None when it holds."""
    over = f"on {scores.examples} {scores.dataset} examples"
    failed = f" ({scores.canary_failed} requests failed)" if scores.canary_failed else ""
    if gate.min_accuracy is not None and scores.canary < gate.min_accuracy:
        return f"eval accuracy {scores.canary:.1%} < {gate.min_accuracy:.1%} {over}{failed}"
    if gate.max_drop_pt is not None and scores.stable is not None:
        drop = (scores.stable - scores.canary) * 100.0
        if drop > gate.max_drop_pt + 1e-9:
            return (
                f"eval accuracy {scores.canary:.1%} is {drop:.1f} pt below stable's {scores.stable:.1%} "
                f"(budget {gate.max_drop_pt:g} pt) {over}{failed}"
            )
    return None


def _eval_shown(scores: EvalScores) -> str:
    stable = f" (stable {scores.stable:.1%})" if scores.stable is not None else ""
    return f"eval accuracy {scores.canary:.1%}{stable} on {scores.examples} {scores.dataset} examples"


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Literal["hold", "promote", "rollback"]
    reason: str


_LABELS = {"error_rate": "error rate", "p95_ttft_ms": "p95 TTFT", "p95_latency_ms": "p95 latency"}


def _ms(value: float) -> str:
    """Whole milliseconds, with two significant digits below 10 (a 0.5 ms gate is not "0 ms")."""
    return f"{value:.0f} ms" if value >= 10 else f"{value:.2g} ms"


def _share(value: float) -> str:
    """A percentage to a tenth, with two significant digits below 0.1% (not "0.0%" for 0.05%)."""
    return f"{value:.1%}" if value == 0 or value >= 0.001 else f"{100 * value:.2g}%"


def _fmt(metric: str, value: float) -> str:
    return _share(value) if metric == "error_rate" else _ms(value)


def _values_behind(metric: str, stats: WindowStats) -> int:
    """How many samples the metric's value in ``stats`` is computed from."""
    return stats.ttft_count if metric == "p95_ttft_ms" else stats.count


def _broken(gate: SloGate, plan: CanaryPlan, canary: WindowStats, stable: WindowStats) -> str | None:
    """Why ``gate`` is broken, or None when it holds (or cannot be evaluated yet)."""
    value: float | None = getattr(canary, gate.metric)
    if value is None:
        return None
    label, over = _LABELS[gate.metric], f"over {canary.count} requests"
    if gate.max is not None and value > gate.max:
        return f"{label} {_fmt(gate.metric, value)} > {_fmt(gate.metric, gate.max)} {over}"
    ratio = gate.max_ratio_to_stable
    base: float | None = getattr(stable, gate.metric)
    if ratio is None or base is None:
        return None
    if _values_behind(gate.metric, stable) < min(MIN_VALUES, plan.min_requests):
        return None
    shown = _fmt(gate.metric, base)
    if gate.metric == "error_rate" and base < 1 / stable.count:
        # No errors seen on stable yet: count it as one error in its window, not as a perfect 0%.
        base = 1 / stable.count
        shown += f" (taken as 1/{stable.count})"
    if value > ratio * base:
        return f"{label} {_fmt(gate.metric, value)} > {ratio:g}× stable's {shown} {over}"
    return None


def judge(
    plan: CanaryPlan,
    elapsed_s: float,
    canary: WindowStats,
    stable: WindowStats,
    evals: EvalScores | str | None = None,
) -> Verdict:
    """Decide what to do with the canary, from the stats gathered since the current step began.

    Rules, in order:

    0. With an eval gate and its ``evals`` in: an eval that could not run (``evals`` is why,
       e.g. ``"eval cannot run: dataset … has no rows"``) means rollback at once, as a failed
       analysis does in Argo Rollouts and Flagger: it runs once per plan, so holding would keep
       the canary's share of traffic unjudged for good. A broken eval gate means rollback at
       once too (it needs no traffic), e.g. ``"eval accuracy 62.0% < 95.0% on 50 addition examples"`` or
       ``"eval accuracy 90.0% is 8.0 pt below stable's 98.0% (budget 1 pt) on 50 addition
       examples"``.

    1. Fewer than ``plan.min_requests`` canary requests: hold (gates are not evaluated yet);
       the reason says what it waits for, e.g. ``"waiting: 12/100 requests, 3/60 s"``.
    2. Each gate, in plan order: a broken one means rollback, e.g.
       ``"p95 TTFT 840 ms > 500 ms over 212 requests"`` or
       ``"p95 latency 310 ms > 1.5× stable's 120 ms over 130 requests"``.

       - A gate whose canary value is None (no streamed request → no TTFT) cannot break.
       - The absolute bound ``max`` is checked first; the value must not exceed it.
       - The relative bound ``max_ratio_to_stable`` needs the stable variant to have at least
         ``min(10, plan.min_requests)`` values for the metric (requests; streamed requests
         for TTFT); otherwise it is skipped. The canary may be at most ratio × stable's value.
       - For the error rate, a stable rate below one error in its window (i.e. 0%) is taken
         as ``1 / stable.count``: zero errors in n requests is no evidence of a rate below 1/n,
         and a bound of ratio × 0 would roll back on the first canary error.
    3. Every gate holds and ``elapsed_s >= plan.min_duration_s``, but a gate's metric has fewer
       than ``min(10, plan.min_requests)`` of the canary's values (a TTFT gate and few streamed
       requests): hold, as no evidence is no pass (``"waiting: 3/10 streamed requests for the
       p95 TTFT gate"``); or the eval gate's result is not in yet: hold (``"waiting: eval of the
       canary on addition (50 examples)"``).
    4. Every gate holds and ``elapsed_s >= plan.min_duration_s``: promote, e.g.
       ``"step 2/4 (25%) held: 212 requests over 61 s, error rate 0.0%, p95 TTFT 120 ms,
       p95 latency 300 ms"`` (a metric with no value is left out; the eval's accuracy added).
    5. Otherwise hold until the step has lasted long enough.
    """
    eval_gate = plan.eval_gate
    if eval_gate is not None and isinstance(evals, str):
        return Verdict("rollback", evals)
    scores = evals if isinstance(evals, EvalScores) else None
    if eval_gate is not None and scores is not None:
        why = _eval_broken(eval_gate, scores)
        if why is not None:
            return Verdict("rollback", why)
    waiting = (
        f"waiting: {canary.count}/{plan.min_requests} requests, {elapsed_s:.0f}/{plan.min_duration_s:.0f} s"
    )
    if canary.count < plan.min_requests:
        return Verdict("hold", waiting)
    for gate in plan.gates:
        why = _broken(gate, plan, canary, stable)
        if why is not None:
            return Verdict("rollback", why)
    if elapsed_s < plan.min_duration_s:
        return Verdict("hold", waiting)
    need = min(MIN_VALUES, plan.min_requests)
    for gate in plan.gates:
        have = _values_behind(gate.metric, canary)
        if have < need:
            kind = "streamed requests" if gate.metric == "p95_ttft_ms" else "requests"
            return Verdict("hold", f"waiting: {have}/{need} {kind} for the {_LABELS[gate.metric]} gate")
    if eval_gate is not None and scores is None:
        wanted = f"{eval_gate.dataset} ({eval_gate.examples} examples)"
        return Verdict("hold", f"waiting: eval of the canary on {wanted}")
    metrics = [f"error rate {_share(canary.error_rate)}"]
    if canary.p95_ttft_ms is not None:
        metrics.append(f"p95 TTFT {_ms(canary.p95_ttft_ms)}")
    if canary.p95_latency_ms is not None:
        metrics.append(f"p95 latency {_ms(canary.p95_latency_ms)}")
    if scores is not None:
        metrics.append(_eval_shown(scores))
    return Verdict(
        "promote",
        f"step {plan.step + 1}/{len(plan.steps)} ({plan.percent:g}%) held: {canary.count} requests "
        f"over {elapsed_s:.0f} s, " + ", ".join(metrics),
    )


def apply(spec: RouteSpec, verdict: Verdict) -> tuple[RouteSpec, str] | None:
    """The route spec after ``verdict`` and the audit action, or None for hold.

    promote → the next step (``"canary-promote"``), or after the last step the canary as the
    only target with the plan removed (``"canary-complete"``); rollback → the stable variant as
    the only target with the plan removed (``"canary-rollback"``). Stickiness, shadows,
    fallbacks and retries are kept, except a shadow or fallback equal to the new sole target.
    """
    if verdict.action == "hold":
        return None
    plan = spec.canary
    if plan is None:
        raise ValueError(f"cannot {verdict.action}: the route has no canary plan")
    update: dict[str, Any]
    if verdict.action == "promote" and plan.step + 1 < len(plan.steps):
        action = "canary-promote"
        update = {"canary": plan.model_copy(update={"step": plan.step + 1})}
    else:
        promoted = verdict.action == "promote"
        action = "canary-complete" if promoted else "canary-rollback"
        sole = plan.canary if promoted else plan.stable
        update = {
            "targets": [WeightedTarget(variant=sole)],
            "canary": None,
            "shadows": [s for s in spec.shadows if s.variant != sole],
            "fallbacks": [f for f in spec.fallbacks if f != sole],
        }
    # Re-validate the whole spec: model_copy alone would skip the RouteSpec rules.
    new_spec = RouteSpec.model_validate(spec.model_copy(update=update).model_dump())
    return new_spec, action


def hand_edit_action(before: RouteSpec | None, after: RouteSpec) -> str:
    """The audit action of a version written by hand (the admin API's PUT), from what it changed:

    - ``"canary-start"``: ``after`` has a canary plan and ``before`` had none;
    - ``"canary-abort"``: ``before``'s canary plan is gone and its stable variant is the only
      target (``routes canary --abort``, as the judge's ``"canary-rollback"``);
    - ``"canary-complete"``: the plan is gone and its canary is the only target
      (``routes canary --promote``, as the judge's after its last step);
    - ``"set"``: anything else, a running canary's plan edited included.
    """
    plan = before.canary if before is not None else None
    if plan is None:
        return "set" if after.canary is None else "canary-start"
    if after.canary is not None:
        return "set"
    sole = [t.variant for t in after.targets]
    if sole == [plan.stable]:
        return "canary-abort"
    if sole == [plan.canary]:
        return "canary-complete"
    return "set"


def canary_started_at(actions: Mapping[int, str], version: int) -> int:
    """The route version a canary in force at ``version`` started at: back over the judge's
    promotions (``actions``: each version's audit action), as any other write ends a canary."""
    at = version
    while actions.get(at) == "canary-promote" and at - 1 in actions:
        at -= 1
    return at
