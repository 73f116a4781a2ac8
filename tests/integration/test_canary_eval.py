"""The canary's eval gate end to end: a canary that answers wrong is rolled back on accuracy alone,
a quantized canary that keeps the stable variant's accuracy is promoted with its score in the reason.

One gateway process with the embedded fp32 and int8 variants and a fault server that answers
every prompt with "7" (a variant that is fast and never fails, so no SLO gate can catch it).
The canary controller ticks every 0.2 s; each test uses its own route. Two gateways on one store
run a plan's eval once between them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.fault import FaultServer
from evals.datasets import shipped
from serving.launcher import Launched
from tests.integration.control_plane import (
    admin,
    eventually,
    fault_variant,
    metric_value,
    put_route,
    running_gateway,
    write_config,
)

SUMS = shipped()["addition"].rows


@pytest.fixture(scope="module")
def wrong() -> Iterator[FaultServer]:
    with FaultServer(reply="7", chunks=1) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, wrong: FaultServer) -> Iterator[Launched]:
    variants = {
        "fp32": {"kind": "embedded"},
        "int8": {"kind": "embedded", "precision": "int8"},
        "wrong": fault_variant(wrong),
    }
    routes = {name: {"targets": [{"variant": "fp32"}]} for name in ("sums", "sums-b")}
    path = tmp_path_factory.mktemp("canary-eval") / "gateway.yaml"
    with running_gateway(write_config(path, variants, routes, canary={"tick_s": 0.2})) as launched:
        yield launched


def _start(base: str, route: str, canary: str, eval_gate: dict[str, Any], **plan: Any) -> None:
    gates = [{"metric": "error_rate", "max": 0.05}]
    canary_plan = {"stable": "fp32", "canary": canary, "gates": gates, "eval_gate": eval_gate, **plan}
    spec = {"targets": [{"variant": "fp32"}], "canary": canary_plan}
    reply = put_route(base, route, spec, version=1, reason=f"canary {canary}")
    assert reply.status_code == 200, reply.text


def _current(base: str, route: str) -> dict[str, Any]:
    return dict(httpx.get(f"{base}/admin/routes/{route}", headers=admin()).json())


def test_a_canary_that_answers_wrong_is_rolled_back_on_its_eval_without_traffic(
    gateway: Launched, wrong: FaultServer
) -> None:
    wrong.reset_stats()
    gate = {"dataset": "addition", "examples": 20, "min_accuracy": 0.9, "max_tokens": 4}
    _start(gateway.url, "sums", "wrong", gate, min_requests=1000, min_duration_s=0)
    eventually(lambda: _current(gateway.url, "sums")["action"] == "canary-rollback", timeout=30)
    current = _current(gateway.url, "sums")
    assert current["author"] == "canary-judge" and current["spec"]["canary"] is None
    assert current["spec"]["targets"] == [{"variant": "fp32", "weight": 1.0}]
    assert current["reason"] == "eval accuracy 0.0% < 90.0% on 20 addition@1 examples"
    assert wrong.stats()["requests"] == 20  # the eval's rows; no client request reached the canary
    assert metric_value(gateway.url, "turnout_canary_eval_accuracy", variant="wrong") == 0.0


def test_a_canary_that_keeps_the_accuracy_is_promoted_with_its_score(gateway: Launched) -> None:
    gate = {"dataset": "addition", "examples": 40, "max_drop_pt": 5.0, "max_tokens": 4}
    _start(gateway.url, "sums-b", "int8", gate, steps=[50, 100], min_requests=5, min_duration_s=0)
    status = _current(gateway.url, "sums-b").get("canary_status", {})
    assert status.get("eval", {}).get("state") in (None, "running", "done")
    sent = 0
    while _current(gateway.url, "sums-b")["action"] != "canary-complete" and sent < 400:
        row = SUMS[sent % len(SUMS)]
        body = {"model": "sums-b", "prompt": row["prompt"], "max_tokens": 4, "temperature": 0}
        assert httpx.post(f"{gateway.url}/v1/completions", json=body, timeout=30).status_code == 200
        sent += 1
    history = httpx.get(f"{gateway.url}/admin/routes/sums-b/history", headers=admin()).json()["versions"]
    assert [v["action"] for v in history] == ["seed", "canary-start", "canary-promote", "canary-complete"]
    for version in history[2:]:
        assert version["reason"].endswith("on 40 addition@1 examples"), version["reason"]
        assert "eval accuracy 100.0% (stable 100.0%)" in version["reason"]
    for variant in ("fp32", "int8"):
        assert metric_value(gateway.url, "turnout_canary_eval_accuracy", variant=variant) == 1.0


def test_gateways_on_one_store_run_a_plans_eval_once_between_them(tmp_path: Path) -> None:
    """Two gateways on one store judge the same canary: one claims its eval and runs it, the
    other waits for the result in the store, so the canary's backend gets the rows once."""
    with FaultServer(reply="7", chunks=1) as wrong, FaultServer(reply="7", chunks=1) as steady:
        variants = {"steady": fault_variant(steady), "wrong": fault_variant(wrong)}
        routes = {"sums": {"targets": [{"variant": "steady"}]}}
        config = write_config(tmp_path / "gateway.yaml", variants, routes, canary={"tick_s": 0.2})
        with running_gateway(config) as first, running_gateway(config) as second:
            gate = {"dataset": "addition", "examples": 20, "min_accuracy": 0.9, "max_tokens": 4}
            plan = {"stable": "steady", "canary": "wrong", "eval_gate": gate, "min_requests": 1000}
            reply = put_route(
                first.url, "sums", {"targets": [{"variant": "steady"}], "canary": plan}, version=1
            )
            assert reply.status_code == 200, reply.text
            eventually(lambda: _current(second.url, "sums")["action"] == "canary-rollback", timeout=30)
            assert _current(first.url, "sums")["reason"].startswith("eval accuracy 0.0% < 90.0% on 20")
            assert wrong.stats()["requests"] == 20  # once between them, not once per gateway
            history = httpx.get(f"{first.url}/admin/routes/sums/history", headers=admin()).json()["versions"]
            assert [v["action"] for v in history] == ["seed", "canary-start", "canary-rollback"]
