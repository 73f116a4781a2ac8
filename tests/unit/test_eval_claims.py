"""A canary plan's eval shared by the gateways on one store, without a server: who claims it, a
claim gone quiet taken over, the first result kept; and which version a canary started at."""

from __future__ import annotations

import asyncio

from serving.canary_eval import CanaryEvals, _key
from serving.metrics import GatewayMetrics
from serving.routing.canary import EvalScores, canary_started_at
from serving.routing.spec import CanaryPlan, EvalGate
from serving.store import RouteStore


def test_one_gateway_claims_a_plans_eval_and_a_quiet_claim_is_taken_over() -> None:
    now = [100.0]
    store = RouteStore("sqlite://", clock=lambda: now[0])
    claims = store.eval_claims
    try:
        assert claims.claim("k", "sums", "gw-a", stale_s=30.0)
        assert not claims.claim("k", "sums", "gw-b", stale_s=30.0)  # a runs it
        now[0] = 125.0
        claims.beat("k", "gw-a")
        now[0] = 150.0
        assert not claims.claim("k", "sums", "gw-b", stale_s=30.0)  # a beat 25 s ago
        now[0] = 156.0
        assert claims.claim("k", "sums", "gw-b", stale_s=30.0)  # quiet for 31 s: b takes over
        claims.beat("k", "gw-a")  # a's late beat does not win it back
        now[0] = 190.0
        assert claims.claim("k", "sums", "gw-c", stale_s=30.0)  # b's claim went quiet as well
        assert claims.result("k") is None
        claims.finish("k", '{"scores": {"dataset": "addition@1", "examples": 20, "canary": 0.0}}')
        claims.finish("k", '{"error": "late"}')  # the first result stays
        assert claims.result("k") == '{"scores": {"dataset": "addition@1", "examples": 20, "canary": 0.0}}'
        now[0] = 10_000.0
        assert not claims.claim("k", "sums", "gw-d", stale_s=30.0)  # it has a result: nothing to run
        assert claims.result("other") is None
        assert store.change_marker() == 0  # no audit row: route pollers stay asleep
    finally:
        store.close()


def test_a_canary_started_at_the_version_before_the_judges_promotions() -> None:
    actions = {1: "seed", 2: "canary-start", 3: "canary-promote", 4: "canary-promote"}
    assert canary_started_at(actions, 4) == 2 and canary_started_at(actions, 2) == 2
    assert canary_started_at({1: "seed"}, 1) == 1  # a canary in the config file
    again = {**actions, 5: "canary-rollback", 6: "canary-start", 7: "canary-promote"}
    assert canary_started_at(again, 7) == 6  # started again: a new plan, evaluated again


def test_a_route_whose_name_has_a_colon_forgets_its_eval_when_its_plan_ends() -> None:
    async def scenario() -> None:
        store = RouteStore("sqlite://")
        try:
            plan = CanaryPlan(
                stable="a", canary="b", eval_gate=EvalGate(dataset="addition", min_accuracy=0.9)
            )
            evals = CanaryEvals({}, GatewayMetrics(), store.eval_claims)
            for route in ("llama:8b", "llama"):  # another gateway ran each plan's eval
                key = _key(route, plan, 2)
                assert store.eval_claims.claim(key, route, "gw-a", stale_s=30.0)
                store.eval_claims.finish(
                    key, '{"scores": {"dataset": "addition@1", "examples": 50, "canary": 1.0}}'
                )
                found = await evals.result(route, plan, 2)
                assert isinstance(found, EvalScores) and found.canary == 1.0
            evals.forget("llama:8b")
            assert list(evals._done) == [_key("llama", plan, 2)]  # that route's result alone is gone
        finally:
            store.close()

    asyncio.run(scenario())
