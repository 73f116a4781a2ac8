"""Load-aware balancing between two real Triton servers behind one variant.

Replica 0 is the session's ``tritonserver``; replica 1 is a second one on the same model
repository. The gateway scrapes each server's own metrics port for
``nv_inference_pending_request_count``. Loading replica 0 directly (clients that bypass the
gateway) fills its queue, and the gateway's new requests move to replica 1.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.triton_repo import stage_repository
from deploy.triton_runtime import TritonServer, triton_server
from tests.integration.control_plane import chat, eventually, metric_value, running_gateway, write_config
from tests.integration.engines import distinct_ports, triton_install_or_skip

BALANCE = {"policy": "power_of_two", "probe_interval_s": 0.2, "probe_timeout_s": 1.0}


@pytest.fixture(scope="module")
def second_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    install = triton_install_or_skip()
    work = tmp_path_factory.mktemp("triton-replica")
    repo = stage_repository(work / "repo")
    log = work / "tritonserver.log"
    with triton_server(install, repo, *distinct_ports(3), timeout=90, log=log) as server:
        yield server


@pytest.fixture
def gateway(tmp_path: Path, triton: TritonServer, second_triton: TritonServer) -> Iterator[str]:
    variant: dict[str, Any] = {
        "kind": "triton",
        "preset": "turnout-tiny",
        "url": triton.http_url,
        "metrics_url": triton.metrics_url,
        "replicas": [{"url": second_triton.http_url, "metrics_url": second_triton.metrics_url}],
        "balance": BALANCE,
    }
    routes = {"tiny": {"targets": [{"variant": "pool"}]}}
    config = write_config(tmp_path / "gateway.yaml", {"pool": variant}, routes)
    with running_gateway(config) as launched:
        yield launched.url


def _picked(url: str) -> tuple[float, float]:
    def one(replica: str) -> float:
        return metric_value(url, "turnout_backend_replica_requests_total", variant="pool", replica=replica)

    return one("0"), one("1")


def _send(url: str, count: int) -> None:
    for _ in range(count):
        reply = chat(url, "tiny", max_tokens=4, temperature=0)
        assert reply.status_code == 200, reply.text


FLOOD_CLIENTS = 40  # over 2 batches' worth (max_batch_size 16): the queue never drains


def _flood(server: TritonServer, stop: threading.Event) -> None:
    # ignore_eos: every flood request decodes all 200 tokens, so a batch cannot end early and
    # leave the queue empty for a scrape to see (an early EOS let 4 of 20 requests through).
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            client.post(
                f"{server.http_url}/v2/models/turnout_tiny/generate",
                json={"text_input": "the", "max_tokens": 200, "ignore_eos": True},
            )


def test_a_loaded_triton_replica_gets_fewer_new_requests(gateway: str, triton: TritonServer) -> None:
    _send(gateway, 20)
    idle = _picked(gateway)
    assert min(idle) >= 2 and sum(idle) == 20, f"both replicas serve while idle: {idle}"

    stop = threading.Event()
    with ThreadPoolExecutor(FLOOD_CLIENTS) as pool:
        for _ in range(FLOOD_CLIENTS):
            pool.submit(_flood, triton, stop)
        try:

            def queued() -> bool:
                name = "turnout_backend_requests_waiting"
                return metric_value(gateway, name, variant="pool", replica="0") > 0

            for _ in range(20):  # each one while the gateway sees replica 0's queue (the flood
                eventually(queued, timeout=20)  # ebbs now and then on a busy machine)
                _send(gateway, 1)
        finally:
            stop.set()
    loaded = _picked(gateway)
    to_first, to_second = loaded[0] - idle[0], loaded[1] - idle[1]
    print(f"idle: {idle}; while replica 0 was flooded: {to_first} to it, {to_second} to replica 1")
    assert to_first + to_second == 20 and to_second >= 17
