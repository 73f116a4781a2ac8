"""The canary's eval gate as values: the plan's shape, the judge's verdicts, the CLI flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from evals.datasets import shipped
from serving.cli_routes_pure import EditError, eval_gate, start_canary
from serving.routing.canary import EvalScores, Verdict, WindowStats, judge
from serving.routing.spec import (
    SHIPPED_EVAL_DATASETS,
    CanaryPlan,
    EvalGate,
    RouteSpec,
    SloGate,
    WeightedTarget,
    problems,
)

FLOOR = EvalGate(min_accuracy=0.95)
BUDGET = EvalGate(max_drop_pt=1.0, examples=100)


def plan(gate: EvalGate | None, **changes: object) -> CanaryPlan:
    gates = [SloGate(metric="error_rate", max=0.05)]
    return CanaryPlan.model_validate(
        {"stable": "v1", "canary": "v2", "gates": gates, "eval_gate": gate, **changes}
    )


def stats(count: int, errors: int = 0) -> WindowStats:
    return WindowStats(count, errors, errors / count if count else 0.0, None, 200.0, 0)


STABLE = stats(1000)


def test_an_eval_gate_needs_a_bound_and_a_known_dataset() -> None:
    with pytest.raises(ValidationError, match="min_accuracy or max_drop_pt"):
        EvalGate()
    with pytest.raises(ValidationError, match="addition, continuation, or a path"):
        EvalGate(min_accuracy=0.9, dataset="gsm8k")
    assert EvalGate(min_accuracy=0.9, dataset="/data/mine.jsonl").against_stable is False
    assert BUDGET.against_stable is True


def test_the_shipped_names_are_the_shipped_generation_datasets() -> None:
    assert set(SHIPPED_EVAL_DATASETS) == {d.name for d in shipped().values() if d.kind == "generation"}


def test_a_plan_may_gate_on_the_eval_alone_but_not_on_nothing() -> None:
    alone = CanaryPlan(stable="v1", canary="v2", eval_gate=FLOOR)
    assert alone.gates == []
    with pytest.raises(ValidationError, match="at least one gate"):
        CanaryPlan(stable="v1", canary="v2")


def test_a_missing_dataset_file_is_a_problem_of_the_route(tmp_path: Path) -> None:
    mine = tmp_path / "mine.jsonl"
    gate = EvalGate(min_accuracy=0.9, dataset=str(mine))
    spec = RouteSpec(
        targets=[WeightedTarget(variant="v1")], canary=CanaryPlan(stable="v1", canary="v2", eval_gate=gate)
    )
    assert problems(spec, {"v1", "v2"}) == [
        f"canary.eval_gate.dataset: no such file '{mine}' on this gateway"
    ]
    mine.write_text('{"id": "1", "prompt": "p", "answer": "a"}\n')
    assert problems(spec, {"v1", "v2"}) == []


def test_a_failing_eval_rolls_back_at_once_without_traffic() -> None:
    scores = EvalScores("addition@1", 50, canary=0.62, canary_failed=3)
    verdict = judge(plan(FLOOR), 1.0, stats(0), STABLE, scores)
    assert verdict == Verdict(
        "rollback", "eval accuracy 62.0% < 95.0% on 50 addition@1 examples (3 requests failed)"
    )


def test_an_eval_that_cannot_run_rolls_back_rather_than_holding_for_good() -> None:
    """It runs once per plan: held, the canary kept its share of traffic unjudged (QA: an empty
    JSONL dataset); Argo and Flagger abort a failed analysis."""
    why = "eval cannot run: dataset /data/mine.jsonl has no rows"
    assert judge(plan(FLOOR), 1.0, stats(0), STABLE, why) == Verdict("rollback", why)
    assert judge(plan(None), 61.0, stats(100), STABLE, why).action == "promote"  # no eval gate: moot


def test_a_drop_past_the_budget_against_stable_rolls_back() -> None:
    scores = EvalScores("addition@1", 100, canary=0.90, stable=0.98)
    verdict = judge(plan(BUDGET), 1.0, stats(0), STABLE, scores)
    assert verdict == Verdict(
        "rollback",
        "eval accuracy 90.0% is 8.0 pt below stable's 98.0% (budget 1 pt) on 100 addition@1 examples",
    )


def test_a_drop_exactly_at_the_budget_holds() -> None:
    scores = EvalScores("addition@1", 100, canary=0.97, stable=0.98)
    assert judge(plan(BUDGET), 61.0, stats(100), STABLE, scores).action == "promote"


def test_the_promotion_waits_for_the_eval_and_then_names_it() -> None:
    waiting = judge(plan(FLOOR), 61.0, stats(100), STABLE, None)
    assert waiting == Verdict("hold", "waiting: eval of the canary on addition (50 examples)")
    done = judge(
        plan(BUDGET), 61.0, stats(100), STABLE, EvalScores("addition@1", 100, canary=0.99, stable=0.98)
    )
    assert done.action == "promote"
    assert done.reason.endswith("eval accuracy 99.0% (stable 98.0%) on 100 addition@1 examples")


def test_slo_gates_still_roll_back_while_the_eval_runs() -> None:
    assert judge(plan(FLOOR), 5.0, stats(100, errors=20), STABLE, None).action == "rollback"


def test_a_plan_without_an_eval_gate_ignores_scores() -> None:
    scores = EvalScores("addition@1", 50, canary=0.0)
    assert judge(plan(None), 61.0, stats(100), STABLE, scores).action == "promote"


def test_eval_flags_make_the_gate_and_a_canary_may_have_only_it() -> None:
    assert eval_gate(dataset="addition", examples=50) is None
    gate = eval_gate(dataset="continuation", examples=20, max_drop_pt=2.0, chat=True)
    assert gate == EvalGate(dataset="continuation", examples=20, max_drop_pt=2.0, endpoint="chat")
    spec = RouteSpec(targets=[WeightedTarget(variant="a")])
    running = start_canary(spec, "b", [50, 100], 10, 5, [], gate)
    assert running.canary is not None and running.canary.eval_gate == gate
    with pytest.raises(EditError, match=r"eval gate: .*min_accuracy"):
        eval_gate(dataset="addition", examples=50, min_accuracy=1.5)
