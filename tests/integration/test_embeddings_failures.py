"""``/v1/embeddings`` when upstreams fail: retries, fallbacks and the errors a client sees,
through a real gateway in front of fault servers (``backends/fault.py``, which answers
embeddings with a vector per input drawn from a hash of it).

A request picks its failure with the body field ``x_fault``, which the gateway passes on (to
every attempt: a fallback is shown with a server that always fails instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import fault_variant, metric_value, running_gateway, write_config


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    with FaultServer() as main, FaultServer() as spare, FaultServer(default="error=503") as down:
        variants = {
            "main": fault_variant(main, 1.0),
            "spare": fault_variant(spare),
            "down": fault_variant(down),
        }
        routes = {
            "alone": {"targets": [{"variant": "main"}]},
            "failing-over": {"targets": [{"variant": "down"}], "fallbacks": ["spare"], "retries": 1},
        }
        config = write_config(tmp_path_factory.mktemp("embed-faults") / "gateway.yaml", variants, routes)
        with running_gateway(config) as launched:
            yield launched


def embed(gateway: Launched, route: str, fault: str | None = None, **fields: Any) -> httpx.Response:
    body: dict[str, Any] = {"model": route, "input": ["a", "b"], "encoding_format": "float", **fields}
    if fault is not None:
        body["x_fault"] = fault
    return httpx.post(f"{gateway.url}/v1/embeddings", json=body, timeout=30)


def test_an_upstream_answer_reaches_the_client_vector_for_vector(gateway: Launched) -> None:
    first, again = embed(gateway, "alone"), embed(gateway, "alone")
    assert first.status_code == 200 and first.headers["x-turnout-variant"] == "main"
    rows = [item["embedding"] for item in first.json()["data"]]
    assert [len(row) for row in rows] == [8, 8] and rows[0] != rows[1]
    assert again.json()["data"] == first.json()["data"]  # the same inputs, the same vectors


def test_a_failing_variant_is_retried_then_its_fallback_serves(gateway: Launched) -> None:
    before = metric_value(gateway.url, "turnout_attempts_failed_total", route="failing-over", variant="down")
    reply = embed(gateway, "failing-over")
    assert reply.status_code == 200 and reply.headers["x-turnout-variant"] == "spare"
    failed = metric_value(gateway.url, "turnout_attempts_failed_total", route="failing-over", variant="down")
    assert failed - before == 2  # the first try and its one retry


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        ("error=400", 400, None),  # the request's fault: passed on as the upstream said it
        ("corrupt", 502, "bad_gateway"),
        ("latency=3000", 504, None),  # past its 1 s read timeout
        ("drop", 502, "bad_gateway"),
    ],
)
def test_each_failure_is_the_openai_error_it_should_be(
    gateway: Launched, fault: str, status: int, code: str
) -> None:
    reply = embed(gateway, "alone", fault)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["message"] and (code is None or error["code"] == code)
    assert embed(gateway, "alone").status_code == 200  # and it keeps serving
