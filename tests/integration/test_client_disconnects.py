"""A client that hangs up on a non-streamed request to an upstream: the gateway drops the
upstream request too (so vLLM or Triton stop generating, as they do for their own clients)
once the request is half a second old, and counts a 499. Quick answers are never watched."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from backends.fault import FaultServer
from tests.integration.control_plane import (
    eventually,
    fault_variant,
    metric_value,
    running_gateway,
    write_config,
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FaultServer) -> Iterator[str]:
    config = tmp_path_factory.mktemp("cfg") / "gateway.yaml"
    write_config(config, {"slow": fault_variant(upstream)}, {"slow": {"targets": [{"variant": "slow"}]}})
    with running_gateway(config) as launched:
        yield launched.url


def _open_upstream_connections(upstream: FaultServer) -> int:
    return int(orjson.loads(httpx.get(f"{upstream.url}/stats").content)["open_connections"])


def test_a_client_leaving_a_slow_upstream_answer_drops_the_upstream_request(
    gateway: str, upstream: FaultServer
) -> None:
    body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}], "x_fault": "latency=6000"}
    labels = {"route": "slow", "variant": "slow", "status": "499"}
    before = metric_value(gateway, "turnout_requests_total", **labels)
    idle = _open_upstream_connections(upstream)  # kept-alive ones from earlier requests
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=1.0)  # hangs up after 1 s
    eventually(lambda: metric_value(gateway, "turnout_requests_total", **labels) == before + 1, timeout=3.0)
    assert time.monotonic() - started < 4.0  # long before the upstream's 6 s answer
    # The gateway closed its connection to the upstream mid-request: no more are open than before.
    eventually(lambda: _open_upstream_connections(upstream) == idle, timeout=2.0)


def test_a_client_leaving_a_stream_before_its_first_chunk_drops_the_upstream_request(
    gateway: str, upstream: FaultServer
) -> None:
    body = {
        "model": "slow",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "x_fault": "latency=6000",
    }
    labels = {"route": "slow", "variant": "slow", "status": "499"}
    before = metric_value(gateway, "turnout_requests_total", **labels)
    idle = _open_upstream_connections(upstream)
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):  # no head yet: the gateway waits for the first chunk
        httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=1.0)
    eventually(lambda: metric_value(gateway, "turnout_requests_total", **labels) == before + 1, timeout=3.0)
    assert time.monotonic() - started < 4.0
    eventually(lambda: _open_upstream_connections(upstream) == idle, timeout=2.0)


def test_quick_answers_are_unaffected(gateway: str) -> None:
    reply = httpx.post(
        f"{gateway}/v1/chat/completions",
        json={"model": "slow", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
