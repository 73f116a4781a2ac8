"""Retries, fallbacks and circuit breakers before the first byte; clean stream ends after it.

Fault servers play the upstreams: ones always failing with 503 or 429, one healthy, and ones
that cut, stall or corrupt a stream after its first chunk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import (
    ADMIN_TOKEN,
    chat,
    fault_variant,
    metric_value,
    running_gateway,
    write_config,
)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, FaultServer]]:
    with (
        FaultServer(default="error=503") as flaky,
        FaultServer(default="error=503,retry_after=7") as flaky_retry,
        FaultServer(default="error=429,retry_after=9") as busy,
        FaultServer(default="error=503,retry_after=5") as unavailable,
        FaultServer(reply="good answer") as good,
        FaultServer() as plain,
        FaultServer(default="cut=2") as cut,
        FaultServer(default="stall=5000") as stall,
        FaultServer(default="corrupt") as corrupt,
        FaultServer(default="latency=400,error=503") as slow_fail,
        FaultServer(default="error=401") as wrong_key,
        FaultServer(default="error=404") as wrong_model,
        FaultServer(default="latency=500") as slow,
        FaultServer(default="bad_content") as bad_content,
    ):
        yield {
            "flaky": flaky,
            "flaky_retry": flaky_retry,
            "busy": busy,
            "unavailable": unavailable,
            "good": good,
            "plain": plain,
            "cut": cut,
            "stall": stall,
            "corrupt": corrupt,
            "slow_fail": slow_fail,
            "wrong_key": wrong_key,
            "wrong_model": wrong_model,
            "slow": slow,
            "bad_content": bad_content,
        }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, servers: dict[str, FaultServer]) -> Iterator[Launched]:
    variants = {name: fault_variant(server) for name, server in servers.items()}
    variants["stall"] = fault_variant(servers["stall"], read_timeout=1.0)
    variants["narrow-hung"] = {  # one connection, its answers given up on after 0.5 s
        **fault_variant(servers["plain"], read_timeout=0.5),
        "max_connections": 1,
        "timeouts": {"connect": 1.0, "read": 0.5, "pool": 0.2},
    }
    variants["narrow"] = {  # one connection, given up on after 0.2 s
        **fault_variant(servers["plain"]),
        "max_connections": 1,
        "timeouts": {"connect": 1.0, "read": 10.0, "pool": 0.2},
    }

    def route(target: str, **extra: Any) -> dict[str, Any]:
        return {"targets": [{"variant": target}], **extra}

    routes = {
        "fallback": route("flaky", fallbacks=["good"]),
        "retry": route("flaky_retry", retries=2),
        "busy-fallback": route("busy", fallbacks=["good"]),
        "busy-alone": route("busy"),
        "everything-fails": route("busy", fallbacks=["unavailable", "flaky"]),
        "flaky-alone": route("flaky"),
        "narrow-alone": route("narrow"),
        "narrow-hung": route("narrow-hung", retries=2),
        "narrow-fallback": route("narrow", fallbacks=["good"]),
        "client-error": route("plain", fallbacks=["good"]),
        "cut": route("cut", fallbacks=["good"]),
        "stall": route("stall", fallbacks=["good"]),
        "corrupt": route("corrupt", fallbacks=["good"]),
        "slow-fallback": route("slow_fail", fallbacks=["good"]),
        "wrong-key": route("wrong_key", retries=2),
        "wrong-model": route("wrong_model", fallbacks=["good"]),
        "slow": route("slow"),
        "bad-content": route("bad_content", fallbacks=["good"]),
    }
    breaker = {"consecutive_failures": 3, "cooldown_s": 1.0}
    config = write_config(
        tmp_path_factory.mktemp("fallbacks") / "gateway.yaml", variants, routes, breaker=breaker
    )
    with running_gateway(config) as launched:
        yield launched


def _events(text: str) -> list[Any]:
    found = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            found.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return found


def _text(body: str, stream: bool) -> str:
    if not stream:
        return str(orjson.loads(body)["choices"][0]["message"]["content"])
    events = [e for e in _events(body) if e != "[DONE]" and e.get("choices")]
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events)


def test_fallback_serves_and_the_breaker_skips_a_failing_variant(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    flaky, good = servers["flaky"], servers["good"]
    for stream in (False, True, False):
        reply = chat(gateway.url, "fallback", stream=stream)
        assert reply.status_code == 200
        assert reply.headers["x-turnout-variant"] == "good"
        assert _text(reply.text, stream) == "good answer"
    assert flaky.stats()["requests"] == 3  # three consecutive failures: the circuit opens
    assert metric_value(gateway.url, "turnout_circuit_open", variant="flaky") == 1
    for _ in range(5):
        assert chat(gateway.url, "fallback").headers["x-turnout-variant"] == "good"
    assert flaky.stats()["requests"] == 3  # skipped while open
    time.sleep(1.1)  # cooldown: one half-open probe goes to flaky, fails, and the circuit reopens
    assert chat(gateway.url, "fallback").headers["x-turnout-variant"] == "good"
    assert flaky.stats()["requests"] == 4
    assert chat(gateway.url, "fallback").status_code == 200
    assert flaky.stats()["requests"] == 4
    assert metric_value(gateway.url, "turnout_attempts_failed_total", variant="flaky", status="503") == 4
    assert good.stats()["requests"] >= 10


def test_retries_try_the_same_variant_again_then_give_its_error(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    before = servers["flaky_retry"].stats()["requests"]
    reply = chat(gateway.url, "retry")
    assert reply.status_code == 503  # the upstream's 503 is kept, with its Retry-After
    assert reply.headers["retry-after"] == "7"
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "backend_unavailable"
    assert "(attempts: flaky_retry 503, flaky_retry 503, flaky_retry 503)" in error["message"]
    assert servers["flaky_retry"].stats()["requests"] == before + 3


def test_an_upstream_429_falls_back_and_alone_reaches_the_client_with_its_retry_after(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    busy, good = servers["busy"], servers["good"]
    reply = chat(gateway.url, "busy-fallback")
    assert reply.status_code == 200 and reply.headers["x-turnout-variant"] == "good"
    alone = chat(gateway.url, "busy-alone")
    assert alone.status_code == 429 and alone.headers["retry-after"] == "9"
    assert alone.json()["error"]["type"] == "rate_limit_error"
    for _ in range(4):  # an overloaded upstream is not a failing one: its circuit stays closed
        chat(gateway.url, "busy-alone")
    assert metric_value(gateway.url, "turnout_circuit_open", variant="busy") == 0
    assert busy.stats()["requests"] == 6 and good.stats()["requests"] >= 1


def test_when_every_attempt_fails_the_error_names_them_all(gateway: Launched) -> None:
    for _ in range(3):  # flaky's circuit is open now (opened, or a half-open probe failed again)
        chat(gateway.url, "flaky-alone")
    # At once, well within flaky's 1 s cooldown (a metrics scrape first took it past that on a
    # slow host: flaky was probed again, and its 503 was the last attempt).
    reply = chat(gateway.url, "everything-fails")
    refused = chat(gateway.url, "flaky-alone")  # no attempt at all: says when one may go again
    assert reply.status_code == 503 and reply.headers["retry-after"] == "5"  # the last attempt's
    message = reply.json()["error"]["message"]
    assert message.endswith("(attempts: busy 429, unavailable 503; circuit open: flaky)"), message
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "circuit_open"
    assert refused.headers["retry-after"] == "1"  # the rest of the 1 s cooldown, rounded up
    assert metric_value(gateway.url, "turnout_circuit_open", variant="flaky") == 1


def test_the_metrics_time_what_the_client_waited_failed_attempts_and_failures_included(
    gateway: Launched,
) -> None:
    def seconds(name: str, route: str) -> float:
        return metric_value(gateway.url, f"turnout_{name}_seconds_sum", route=route)

    for stream in (False, True):  # slow_fail fails after 0.4 s; good answers at once
        latency, ttft = (
            seconds("request_latency", "slow-fallback"),
            seconds("time_to_first_token", "slow-fallback"),
        )
        reply = chat(gateway.url, "slow-fallback", stream=stream)
        assert reply.status_code == 200 and reply.headers["x-turnout-variant"] == "good"
        assert seconds("request_latency", "slow-fallback") - latency >= 0.4
        if stream:
            assert seconds("time_to_first_token", "slow-fallback") - ttft >= 0.4
    count = metric_value(gateway.url, "turnout_request_latency_seconds_count", route="everything-fails")
    assert chat(gateway.url, "everything-fails").status_code == 503
    assert (
        metric_value(gateway.url, "turnout_request_latency_seconds_count", route="everything-fails")
        == count + 1
    )


def test_requests_in_flight_are_counted_until_their_answer_ends(gateway: Launched) -> None:
    def in_flight() -> float:
        return metric_value(gateway.url, "turnout_requests_in_flight", route="slow")

    for stream in (False, True):  # each answer takes 0.5 s
        assert in_flight() == 0
        asking = threading.Thread(target=chat, args=(gateway.url, "slow"), kwargs={"stream": stream})
        asking.start()
        time.sleep(0.2)
        assert in_flight() == 1
        asking.join()
        assert in_flight() == 0
    for stream in (False, True):  # failures count out too (an upstream 429 leaves breakers be)
        assert chat(gateway.url, "busy-alone", stream=stream).status_code == 429
    assert metric_value(gateway.url, "turnout_requests_in_flight", route="busy-alone") == 0


def test_an_upstream_refusing_the_gateways_own_key_or_model_name_is_a_502_and_falls_back(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    """An upstream 401/403/404/405 says the variant's api_key, model or base_url is wrong (or
    the call does not suit it): not the client's key, nor a model /v1/models does not list.
    Nor is it ill health: no retry, and its circuit stays closed, so one client's calls that
    the upstream refuses cannot take the variant away from everyone else."""
    before = servers["wrong_key"].stats()["requests"]
    for _ in range(5):  # more than the breaker's 3 consecutive failures
        reply = chat(gateway.url, "wrong-key")
        assert reply.status_code == 502
        error = reply.json()["error"]
        assert error["code"] == "upstream_refused" and "answered 401" in error["message"]
        assert "check the variant's api_key" in error["message"]
    assert servers["wrong_key"].stats()["requests"] == before + 5  # the route's 2 retries unused
    assert metric_value(gateway.url, "turnout_circuit_open", variant="wrong_key") == 0
    served = chat(gateway.url, "wrong-model")
    assert served.status_code == 200 and served.headers["x-turnout-variant"] == "good"
    assert (
        metric_value(gateway.url, "turnout_attempts_failed_total", variant="wrong_model", status="502") == 1
    )


def test_a_client_error_is_not_retried_or_failed_over(
    gateway: Launched, servers: dict[str, FaultServer]
) -> None:
    before = servers["good"].stats()["requests"]
    reply = chat(gateway.url, "client-error", x_fault="error=400")
    assert reply.status_code == 400 and reply.headers["x-turnout-variant"] == "plain"
    assert servers["good"].stats()["requests"] == before


@pytest.mark.parametrize("route", ["cut", "stall", "corrupt"])
def test_a_failure_after_the_first_byte_ends_the_stream_with_an_error_event(
    gateway: Launched, servers: dict[str, FaultServer], route: str
) -> None:
    before = servers["good"].stats()["requests"]
    tokens = metric_value(gateway.url, "turnout_tokens_total", route=route, kind="completion")
    started = time.perf_counter()
    reply = chat(gateway.url, route, stream=True)
    took = time.perf_counter() - started
    assert reply.status_code == 200 and reply.headers["x-turnout-variant"] == route
    events = _events(reply.text)
    assert events[-1] == "[DONE]"
    error = events[-2]["error"]
    assert error["type"] == "upstream_error" and error["code"] in {"bad_gateway", "backend_timeout"}
    said = [
        e for e in events if e != "[DONE]" and e.get("choices") and e["choices"][0]["delta"].get("content")
    ]
    assert said
    # No usage came; the tokens it delivered are counted still, one per text chunk (a lower bound).
    counted = metric_value(gateway.url, "turnout_tokens_total", route=route, kind="completion") - tokens
    assert counted == len(said)
    assert took < 4.0  # the 5 s stall ends at the 1 s read timeout, never a hang
    assert servers["good"].stats()["requests"] == before  # no fallback once bytes reached the client


def test_an_answer_whose_content_is_no_text_is_a_bad_gateway_and_falls_back(gateway: Launched) -> None:
    """``"content": 123`` used to reach the client as given, and mid-stream raise a TypeError
    the gateway did not catch (a 500, no fallback)."""
    whole = chat(gateway.url, "bad-content")
    assert whole.status_code == 200 and _text(whole.text, False) == "good answer"
    assert whole.headers["x-turnout-variant"] == "good"
    streamed = chat(gateway.url, "bad-content", stream=True)
    events = _events(streamed.text)
    assert streamed.status_code == 200 and streamed.headers["x-turnout-variant"] == "bad_content"
    assert events[-2]["error"]["type"] == "upstream_error" and events[-1] == "[DONE]"


def test_a_full_connection_pool_is_a_429_and_not_the_upstreams_failure(gateway: Launched) -> None:
    """The gateway's own max_connections is reached: fallbacks serve, the breaker stays closed."""
    holding = threading.Thread(  # a slow stream holds narrow's only connection for ~1 s
        target=chat, args=(gateway.url, "narrow-alone"), kwargs={"stream": True, "x_fault": "slow_chunks=300"}
    )
    holding.start()
    time.sleep(0.3)
    refused = [chat(gateway.url, "narrow-alone") for _ in range(4)]
    served = chat(gateway.url, "narrow-fallback")
    holding.join(10)
    assert {r.status_code for r in refused} == {429}
    error = refused[0].json()["error"]
    assert error["code"] == "upstream_pool_full" and "max_connections" in error["message"]
    assert refused[0].headers["retry-after"] == "1"
    assert served.status_code == 200 and served.headers["x-turnout-variant"] == "good"
    assert metric_value(gateway.url, "turnout_circuit_open", variant="narrow") == 0  # 3 failures open it
    assert chat(gateway.url, "narrow-alone").status_code == 200


def test_x_turnout_variant_pins_one_of_the_routes_variants_without_fallback(gateway: Launched) -> None:
    """As `turnout loadtest --variant` sends it: that variant alone, or a 400 naming the others;
    only an operator or admin may pin (clients take the route's split)."""
    client = chat(gateway.url, "fallback", headers={"x-turnout-variant": "good"})
    assert client.status_code == 403 and client.json()["error"]["param"] == "x-turnout-variant"
    operator = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    good = chat(gateway.url, "fallback", headers={**operator, "x-turnout-variant": "good"})
    assert good.status_code == 200 and good.headers["x-turnout-variant"] == "good"
    busy = chat(gateway.url, "busy-fallback", headers={**operator, "x-turnout-variant": "busy"})
    assert busy.status_code == 429 and busy.headers["x-turnout-variant"] == "busy"  # no fallback to good
    wrong = chat(gateway.url, "fallback", headers={**operator, "x-turnout-variant": "plain"})
    assert wrong.status_code == 400
    error = wrong.json()["error"]
    assert error["code"] == "unknown_variant" and error["param"] == "x-turnout-variant"
    assert error["message"].endswith("its variants: flaky, good")


def test_a_hung_upstream_behind_a_full_pool_still_opens_its_breaker(gateway: Launched) -> None:
    """Its timeouts count; the 429s of requests that found the pool full must not reset them."""

    def hammer() -> None:
        until = time.monotonic() + 2.5
        while time.monotonic() < until:
            chat(gateway.url, "narrow-hung", x_fault="latency=3000")

    workers = [threading.Thread(target=hammer) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert metric_value(gateway.url, "turnout_circuit_open", variant="narrow-hung") == 1
    # an overloaded variant is not retried for the same request (retries: 2 would try it thrice)
    assert metric_value(gateway.url, "turnout_attempts_failed_total", variant="narrow-hung", status="429") > 0
