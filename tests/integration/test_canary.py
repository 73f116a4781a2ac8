"""Canaries end to end: a slow or failing canary is rolled back by itself, a good one promoted.

The stable and canary variants are fault servers; the canary controller ticks every 0.2 s
and writes each promotion or rollback as a new route version with the judge's reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import (
    ADMIN_TOKEN,
    admin,
    chat,
    eventually,
    fault_variant,
    metric_value,
    put_route,
    running_gateway,
    write_config,
)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, FaultServer]]:
    with (
        FaultServer(reply="stable answer") as stable,
        FaultServer(reply="stable answer", default="latency=300") as slow,
        FaultServer(default="error=500") as failing,
        FaultServer(reply="stable answer") as good,
    ):
        yield {"stable": stable, "slow": slow, "failing": failing, "good": good}


@pytest.fixture
def gateway(tmp_path: Path, servers: dict[str, FaultServer]) -> Iterator[Launched]:
    variants = {name: fault_variant(server) for name, server in servers.items()}
    routes = {"chat": {"targets": [{"variant": "stable"}], "fallbacks": ["stable"]}}
    config = write_config(tmp_path / "gateway.yaml", variants, routes, canary={"tick_s": 0.2})
    for server in servers.values():
        server.reset_stats()
    with running_gateway(config) as launched:
        yield launched


def _start_canary(base: str, canary: str, gates: list[dict[str, Any]], **plan: Any) -> None:
    spec = {
        "targets": [{"variant": "stable"}],
        "fallbacks": ["stable"],
        "canary": {"stable": "stable", "canary": canary, "gates": gates, **plan},
    }
    reply = put_route(base, "chat", spec, version=1, reason=f"canary {canary}")
    assert reply.status_code == 200, reply.text


def _current(base: str) -> dict[str, Any]:
    return dict(httpx.get(f"{base}/admin/routes/chat", headers=admin()).json())


def _drive(base: str, requests: int, until: Any) -> list[httpx.Response]:
    """Send requests 4 at a time (random assignment: no key) until ``until()`` or the count is spent."""
    replies: list[httpx.Response] = []
    with ThreadPoolExecutor(4) as pool:
        for _ in range(requests // 4):
            replies += list(pool.map(lambda _: chat(base), range(4)))
            if until():
                break
    return replies


def test_a_slow_canary_is_rolled_back_with_the_reason(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    gates = [{"metric": "p95_latency_ms", "max": 150}]
    _start_canary(gateway.url, "slow", gates, steps=[50, 100], min_requests=10, min_duration_s=0)
    replies = _drive(gateway.url, 200, lambda: _current(gateway.url)["action"] != "canary-start")
    eventually(lambda: _current(gateway.url)["action"] == "canary-rollback", timeout=3)
    current = _current(gateway.url)
    assert current["version"] == 3 and current["author"] == "canary-judge"
    assert current["spec"]["targets"] == [{"variant": "stable", "weight": 1.0}]
    assert current["spec"]["canary"] is None
    assert "p95 latency" in current["reason"] and "> 150 ms over" in current["reason"]
    assert all(r.status_code == 200 for r in replies)
    # Rolled back within the plan's bounds: about min_requests canary answers, plus those in flight
    # (a few batches of 4 at 50% while the judge's tick and its store write run on a busy machine).
    assert 10 <= servers["slow"].stats()["requests"] <= 10 + 16
    # The store has version 3; the gateway applies it once its refresh after the write is done.
    eventually(lambda: chat(gateway.url).headers["x-turnout-route-version"] == "3", timeout=3)
    before = servers["slow"].stats()["requests"]
    for _ in range(10):
        assert chat(gateway.url).headers["x-turnout-variant"] == "stable"
    assert servers["slow"].stats()["requests"] == before
    audit = httpx.get(f"{gateway.url}/admin/audit?route=chat", headers=admin()).json()["entries"]
    assert audit[0]["action"] == "canary-rollback" and audit[0]["detail"] == current["reason"]
    assert metric_value(gateway.url, "turnout_canary_actions_total", action="canary-rollback") == 1


def test_a_failing_canary_is_rolled_back_and_fallbacks_hide_its_errors(gateway: Launched) -> None:
    gates = [{"metric": "error_rate", "max": 0.1}]
    _start_canary(gateway.url, "failing", gates, steps=[50, 100], min_requests=10, min_duration_s=0)
    replies = _drive(gateway.url, 200, lambda: _current(gateway.url)["action"] != "canary-start")
    eventually(lambda: _current(gateway.url)["action"] == "canary-rollback", timeout=3)
    reason = _current(gateway.url)["reason"]
    assert reason.startswith("error rate 100.0% > 10.0% over"), reason
    assert all(r.status_code == 200 for r in replies)  # the stable fallback answered for the canary


def test_a_healthy_canary_is_promoted_step_by_step_to_all_traffic(gateway: Launched) -> None:
    gates = [{"metric": "error_rate", "max": 0.05}, {"metric": "p95_latency_ms", "max": 1000}]
    _start_canary(gateway.url, "good", gates, steps=[25, 50, 100], min_requests=5, min_duration_s=0)
    _drive(gateway.url, 400, lambda: _current(gateway.url)["action"] == "canary-complete")
    eventually(lambda: _current(gateway.url)["action"] == "canary-complete", timeout=3)
    history = httpx.get(f"{gateway.url}/admin/routes/chat/history", headers=admin()).json()["versions"]
    actions = [v["action"] for v in history]
    assert actions == ["seed", "canary-start", "canary-promote", "canary-promote", "canary-complete"]
    assert "held" in history[2]["reason"]
    final = history[-1]["spec"]
    assert final["targets"] == [{"variant": "good", "weight": 1.0}] and final["canary"] is None
    assert final["fallbacks"] == ["stable"]
    assert chat(gateway.url).headers["x-turnout-variant"] == "good"


def test_after_a_restart_a_step_counts_time_from_the_restart_not_the_downtime(
    tmp_path: Path, servers: dict[str, FaultServer]
) -> None:
    """Samples live in memory: a step must not pass on the downtime plus a few new requests."""
    variants = {name: fault_variant(server) for name, server in servers.items()}
    routes = {"chat": {"targets": [{"variant": "stable"}], "fallbacks": ["stable"]}}
    config = write_config(tmp_path / "gateway.yaml", variants, routes, canary={"tick_s": 0.2})
    gates = [{"metric": "error_rate", "max": 0.05}]
    with running_gateway(config) as first:
        _start_canary(first.url, "good", gates, steps=[50, 100], min_requests=5, min_duration_s=4)
        _drive(first.url, 40, lambda: False)
    time.sleep(4.5)  # down for longer than the step's minimum time
    with running_gateway(config) as second:
        back_at = time.time()
        _drive(second.url, 2000, lambda: _current(second.url)["action"] == "canary-promote")
        promoted = _current(second.url)
    assert promoted["action"] == "canary-promote", promoted
    assert promoted["created_at"] - back_at >= 3.0, promoted["reason"]  # ~4 s after it started judging
    assert "held:" in promoted["reason"] and " over 4 s" in promoted["reason"]


def test_pinned_requests_do_not_decide_a_canary(gateway: Launched) -> None:
    """An operator's load test pinned to the canary (x-turnout-variant) is not its traffic sample."""
    gates = [{"metric": "error_rate", "max": 0.1}]
    _start_canary(gateway.url, "failing", gates, steps=[10, 100], min_requests=5, min_duration_s=0)
    pinned = {"authorization": f"Bearer {ADMIN_TOKEN}", "x-turnout-variant": "failing"}
    replies = [chat(gateway.url, headers=pinned) for _ in range(12)]
    assert {r.status_code for r in replies} <= {502, 503}  # its own failures (then its open breaker)
    time.sleep(1.0)  # five judge ticks
    current = _current(gateway.url)
    assert current["version"] == 2 and current["action"] == "canary-start", current["reason"]
