"""Load-aware balancing among replicas of one variant, through a real gateway process.

Two fault servers play two vLLM replicas behind one variant; each answers ``/metrics`` in
vLLM's names with the load the test sets through its ``POST /load``, and counts the
requests it served (``/stats``). The gateway probes them every 0.2 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from backends.base import GenerateRequest, SamplingParams
from backends.fault import FaultServer
from backends.load_probe import EngineLoad
from backends.replica_set import ReplicaSetBackend
from backends.settings import OpenAIHttpSettings
from serving.launcher import Launched, free_port
from tests.integration.control_plane import (
    chat,
    eventually,
    metric_value,
    running_gateway,
    write_config,
)

PROBE_S = 0.2
# A generous probe timeout: one probe of an in-process fault server slowed by a busy machine
# must not mark the replica unhealthy and skew the split.
BALANCE = {"policy": "power_of_two", "probe_interval_s": PROBE_S, "probe_timeout_s": 2.0}


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # bound and released: nothing listens there


def replica_variant(first: str, *others: str, **overrides: Any) -> dict[str, Any]:
    return {
        "kind": "openai_http",
        "base_url": first,
        "replicas": list(others),
        "balance": BALANCE,
        "model": "fake-model",
        "engine": "vllm",
        "vendor": "cpu",
        "accelerator": "cpu-x86",
        "timeouts": {"connect": 1.0, "read": 10.0, "pool": 1.0},
        **overrides,
    }


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, FaultServer]]:
    with FaultServer(reply="from A") as a, FaultServer(reply="from B") as b, FaultServer() as c:
        yield {"a": a, "b": b, "c": c}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, servers: dict[str, FaultServer]) -> Iterator[Launched]:
    variants = {
        "pool": replica_variant(servers["a"].base_url, servers["b"].base_url),
        "halfdead": replica_variant(closed_port_url(), servers["c"].base_url),
    }
    routes = {name: {"targets": [{"variant": name}]} for name in variants}
    config = write_config(tmp_path_factory.mktemp("balance") / "gateway.yaml", variants, routes)
    with running_gateway(config) as launched:
        yield launched


def waiting_gauge(base: str, variant: str, replica: str) -> float:
    return metric_value(base, "turnout_backend_requests_waiting", variant=variant, replica=replica)


def send(base: str, route: str, n: int) -> list[int]:
    """``n`` chat requests on one keep-alive client, every other one streamed; their status codes."""
    statuses = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for i in range(n):
            body = {"model": route, "messages": [{"role": "user", "content": "hi"}], "stream": bool(i % 2)}
            statuses.append(client.post("/v1/chat/completions", json=body).status_code)
    return statuses


def served(servers: dict[str, FaultServer]) -> tuple[int, int]:
    return servers["a"].stats()["requests"], servers["b"].stats()["requests"]


def settle(gateway: Launched, servers: dict[str, FaultServer], waiting_b: float) -> float:
    """Set the loads (A idle, B ``waiting_b``), wait until the gateway has seen them; seconds taken."""
    servers["a"].set_load(waiting=0, running=0, kv=0)
    servers["b"].set_load(waiting=waiting_b, running=0, kv=0)
    started = time.monotonic()
    eventually(lambda: waiting_gauge(gateway.url, "pool", "1") == waiting_b, timeout=5.0)
    took = time.monotonic() - started
    for server in servers.values():
        server.reset_stats()
    return took


def test_equal_load_splits_traffic_evenly(gateway: Launched, servers: dict[str, FaultServer]) -> None:
    settle(gateway, servers, 0)
    assert send(gateway.url, "pool", 200) == [200] * 200
    a, b = served(servers)
    print(f"equal load: A {a}, B {b}")
    assert a + b == 200
    assert 60 <= a <= 140  # binomial(200, 0.5): 100 ± 7; this is more than 5 sigma wide


def test_a_loaded_replica_stops_getting_new_traffic(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    settle(gateway, servers, 0)
    took = settle(gateway, servers, 50)
    assert took < 15 * PROBE_S  # seen by the periodic probe (a few intervals + the scrape, on a busy VM)
    assert send(gateway.url, "pool", 100) == [200] * 100
    a, b = served(servers)
    print(f"B waiting=50 seen after {took:.2f}s: A {a}, B {b}")
    assert a >= 98 and a + b == 100
    settle(gateway, servers, 0)  # and back: B takes its share again
    assert send(gateway.url, "pool", 100) == [200] * 100
    a, b = served(servers)
    print(f"B idle again: A {a}, B {b}")
    assert b >= 20


def test_replica_gauges_on_turnout_metrics(gateway: Launched, servers: dict[str, FaultServer]) -> None:
    servers["a"].set_load(waiting=2, running=3, kv=0.25)
    servers["b"].set_load(waiting=0, running=1, kv=0.5)

    def gauge(name: str, replica: str) -> float:
        return metric_value(gateway.url, f"turnout_backend_{name}", variant="pool", replica=replica)

    eventually(lambda: gauge("kv_cache_usage", "0") == 0.25 and gauge("kv_cache_usage", "1") == 0.5, 5.0)
    assert (gauge("requests_waiting", "0"), gauge("requests_running", "0")) == (2, 3)
    assert (gauge("requests_waiting", "1"), gauge("requests_running", "1")) == (0, 1)
    assert gauge("healthy", "0") == gauge("healthy", "1") == 1
    assert gauge("in_flight", "0") == gauge("in_flight", "1") == 0
    assert gauge("replica_requests_total", "0") > 0 and gauge("replica_requests_total", "1") > 0
    url = servers["b"].base_url
    assert metric_value(gateway.url, "turnout_backend_replica_info", replica="1", url=url) == 1
    text = httpx.get(f"{gateway.url}/metrics").text
    assert 'turnout_variant_info{accelerator="cpu-x86",engine="vllm",kind="openai_http"' in text


def test_an_unreachable_replica_is_skipped_without_client_errors(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    servers["c"].reset_stats()
    assert send(gateway.url, "halfdead", 40) == [200] * 40
    assert servers["c"].stats()["requests"] == 40
    assert metric_value(gateway.url, "turnout_backend_healthy", variant="halfdead", replica="0") == 0
    assert metric_value(gateway.url, "turnout_backend_healthy", variant="halfdead", replica="1") == 1


def test_a_stopped_replica_moves_all_traffic_to_the_other(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    settle(gateway, servers, 0)
    picked_b = metric_value(
        gateway.url, "turnout_backend_replica_requests_total", variant="pool", replica="1"
    )
    servers["b"].stop()  # the module's last use of B
    statuses = send(gateway.url, "pool", 60)
    assert statuses == [200] * 60  # calls that found B gone were sent on to A
    assert servers["a"].stats()["requests"] == 60
    retried = metric_value(gateway.url, "turnout_backend_replica_requests_total", variant="pool", replica="1")
    print(f"B stopped: A served 60 of 60; {retried - picked_b:.0f} call(s) found B gone and went on to A")
    eventually(
        lambda: metric_value(gateway.url, "turnout_backend_healthy", variant="pool", replica="1") == 0, 2
    )


def test_a_turnout_gateway_is_a_replica_through_its_queue_depth(
    tmp_path: Any, gateway_url: str, servers: dict[str, FaultServer]
) -> None:
    variants = {"mixed": replica_variant(f"{gateway_url}/v1", servers["c"].base_url, model="turnout-tiny")}
    routes = {"mixed": {"targets": [{"variant": "mixed"}]}}
    with running_gateway(write_config(tmp_path / "gateway.yaml", variants, routes)) as front:
        lines = eventually_line(front.url, 'turnout_backend_requests_waiting{replica="0",variant="mixed"}')
        assert lines == 0.0  # read from the embedded engine's turnout_queue_depth
        assert metric_value(front.url, "turnout_backend_healthy", variant="mixed", replica="0") == 1
        statuses = [chat(front.url, "mixed", max_tokens=4).status_code for _ in range(20)]
        assert statuses == [200] * 20
        assert metric_value(front.url, "turnout_backend_replica_requests_total", variant="mixed") == 20


def eventually_line(base: str, head: str) -> float:
    """The value of the exposition line starting with ``head`` (waits for it to appear)."""
    found: list[float] = []

    def present() -> bool:
        for line in httpx.get(f"{base}/metrics").text.splitlines():
            if line.startswith(head + " "):
                found.append(float(line.rsplit(" ", 1)[1]))
                return True
        return False

    eventually(present, timeout=5.0)
    return found[-1]


# ---- the replica set in-process: the retry before the first byte, exactly ----------------


async def test_a_call_that_finds_a_replica_gone_is_retried_once_on_another() -> None:
    with FaultServer(reply="A") as a, FaultServer(reply="B") as b:
        settings = OpenAIHttpSettings.model_validate(
            {
                "base_url": a.base_url,
                "replicas": [b.base_url],
                "model": "fake-model",
                "balance": {"probe_interval_s": 60},  # one round at start, then none in this test
            }
        )
        backend = ReplicaSetBackend("pool", settings, draw=lambda: 0.99)  # both tie → B first
        await backend.start()
        try:
            await asyncio.wait_for(_until(lambda: backend.probe.rounds >= 1), 5.0)
            request = GenerateRequest("chat", SamplingParams(), messages=[{"role": "user", "content": "x"}])
            assert (await backend.complete(request)).text == "B"
            b.stop()
            assert (await backend.complete(request)).text == "A"  # B refused; retried on A
            assert [r.healthy for r in backend.replicas] == [True, False]
            chunks = [chunk.text async for chunk in backend.stream(request)]
            assert "".join(chunks) == "A"  # B is left out while unhealthy: no second failure
            assert [r.in_flight for r in backend.replicas] == [0, 0]
            assert [r.picked for r in backend.replicas] == [2, 2]
            # A probe that started before the failure proves nothing; a later success does.
            backend._probed(1, EngineLoad(), started=backend.replicas[1].down_since - 1)
            assert not backend.replicas[1].healthy
            backend._probed(1, EngineLoad(waiting=3), started=backend.replicas[1].down_since + 1)
            assert backend.replicas[1].healthy and backend.replica_stats()[1].waiting == 3
        finally:
            await backend.close()


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.01)
