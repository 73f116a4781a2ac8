"""Shadow traffic through a real gateway: mirrored copies never touch the primary answer.

Variants are fault servers: ``a`` (the primary), ``twin`` (same answer), ``other`` (a
different answer), ``slow`` (same answer after 5 s) and ``down`` (nothing listens).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.fault import FaultServer
from tests.integration.control_plane import (
    admin,
    chat,
    eventually,
    fault_variant,
    metric_value,
    running_gateway,
    write_config,
)

REPLY = "answer from a"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def variants() -> Iterator[dict[str, Any]]:
    with (
        FaultServer(reply=REPLY) as a,
        FaultServer(reply=REPLY) as twin,
        FaultServer(reply="a different answer") as other,
        FaultServer(reply=REPLY, default="latency=5000") as slow,
        FaultServer(reply=REPLY, default="error=400") as refusing,
    ):
        down = fault_variant(a)
        down["base_url"] = f"http://127.0.0.1:{_closed_port()}/v1"
        yield {
            "a": fault_variant(a),
            "twin": fault_variant(twin),
            "other": fault_variant(other),
            "slow": fault_variant(slow),
            "refusing": fault_variant(refusing),
            "down": down,
        }


def _gateway(
    tmp_path: Path, variants: dict[str, Any], shadows: list[dict[str, Any]], **sections: Any
) -> Path:
    route = {"targets": [{"variant": "a"}], "shadows": shadows}
    return write_config(tmp_path / "gateway.yaml", variants, {"chat": route}, **sections)


def _summary(base: str) -> dict[str, Any]:
    reply = httpx.get(f"{base}/admin/routes/chat/shadow", headers=admin())
    assert reply.status_code == 200
    return dict(reply.json())


def test_a_dead_shadow_and_a_five_second_shadow_never_touch_the_primary(
    tmp_path: Path, variants: dict[str, Any]
) -> None:
    shadows = [{"variant": "down", "timeout_s": 10}, {"variant": "slow", "timeout_s": 10}]
    with running_gateway(_gateway(tmp_path, variants, shadows)) as gateway:
        for stream in (False, True, False, True):
            started = time.perf_counter()
            reply = chat(gateway.url, stream=stream)
            took = time.perf_counter() - started
            assert reply.status_code == 200 and reply.headers["x-turnout-variant"] == "a"
            assert took < 2.5, f"primary took {took:.2f}s with shadows running"  # the slow one: 5 s
            if stream:
                assert reply.text.rstrip().endswith("data: [DONE]") and '"error"' not in reply.text
            else:
                assert reply.json()["choices"][0]["message"]["content"] == REPLY

        def all_compared() -> bool:
            found = _summary(gateway.url)["shadows"]
            return found["slow"]["compared"] == 4 and found["down"]["compared"] == 4

        eventually(all_compared, timeout=9)
        summary = _summary(gateway.url)
        down, slow = summary["shadows"]["down"], summary["shadows"]["slow"]
        assert down["errors"] == 4 and down["status_mismatches"] == 4
        # failures are errors, not a similarity of 0 (nothing answered to compare)
        assert down["answered"] == 0 and down["exact_match_rate"] is None and down["mean_similarity"] is None
        assert down["latency_delta_ms_p50"] is None
        assert slow["exact_matches"] == 4 and slow["latency_delta_ms_p50"] > 4_000
        assert summary["in_flight"] == 0
        assert metric_value(gateway.url, "turnout_shadow_requests_total", shadow="down", outcome="error") == 4
        # one outcome per copy: a copy that failed is not also a "differ" (nor a similarity of 0)
        assert metric_value(gateway.url, "turnout_shadow_requests_total", shadow="down") == 4
        assert metric_value(gateway.url, "turnout_shadow_similarity_count", shadow="down") == 0


def test_shadow_overflow_is_dropped_and_counted(tmp_path: Path, variants: dict[str, Any]) -> None:
    config = _gateway(tmp_path, variants, [{"variant": "slow"}], shadow={"max_in_flight": 2})
    with running_gateway(config) as gateway:
        for _ in range(5):
            started = time.perf_counter()
            assert chat(gateway.url).status_code == 200
            assert time.perf_counter() - started < 2.5  # never waits for the 5 s shadow
        slow = _summary(gateway.url)["shadows"]["slow"]
        assert slow["sent"] == 2 and slow["dropped"] == 3
        assert metric_value(gateway.url, "turnout_shadow_requests_total", outcome="dropped") == 3


def test_answers_are_compared_and_recent_differences_kept(tmp_path: Path, variants: dict[str, Any]) -> None:
    shadows = [{"variant": "twin"}, {"variant": "other"}]
    with running_gateway(_gateway(tmp_path, variants, shadows)) as gateway:
        for i in range(10):
            assert chat(gateway.url, stream=i % 2 == 1).status_code == 200
        eventually(lambda: _summary(gateway.url)["shadows"]["other"]["compared"] == 10, timeout=5)
        eventually(lambda: _summary(gateway.url)["shadows"]["twin"]["compared"] == 10, timeout=5)
        summary = _summary(gateway.url)
        twin, other = summary["shadows"]["twin"], summary["shadows"]["other"]
        assert twin["exact_match_rate"] == 1.0 and twin["mean_similarity"] == 1.0
        assert other["exact_matches"] == 0 and 0.0 < other["mean_similarity"] < 1.0
        assert other["status_mismatches"] == 0
        assert other["mean_length_ratio"] == pytest.approx(len("a different answer") / len(REPLY))
        recent = summary["recent_differences"]
        assert len(recent) == 10 and all(d["shadow"] == "other" for d in recent)
        assert recent[0]["primary"]["text"] == REPLY
        assert recent[0]["shadow_answer"]["text"] == "a different answer"
        assert summary["configured"][0]["variant"] == "twin"
        assert (
            metric_value(gateway.url, "turnout_shadow_requests_total", shadow="twin", outcome="match") == 10
        )


def test_a_request_the_primary_refuses_as_bad_is_not_mirrored(
    tmp_path: Path, variants: dict[str, Any]
) -> None:
    """The shadow would refuse it too, and its summary showed those as shadow errors (QA)."""
    route = {"targets": [{"variant": "refusing"}], "shadows": [{"variant": "twin"}]}
    config = write_config(tmp_path / "gateway.yaml", variants, {"chat": route})
    with running_gateway(config) as gateway:
        for stream in (False, True, False):
            assert chat(gateway.url, stream=stream).status_code == 400
        eventually(lambda: _summary(gateway.url)["shadows"]["twin"]["skipped"] == 3, timeout=5)
        twin = _summary(gateway.url)["shadows"]["twin"]
        assert (twin["errors"], twin["compared"]) == (0, 0)
        assert (
            metric_value(gateway.url, "turnout_shadow_requests_total", shadow="twin", outcome="skipped") == 3
        )


def test_the_sample_rate_mirrors_a_share_of_requests(tmp_path: Path, variants: dict[str, Any]) -> None:
    with running_gateway(_gateway(tmp_path, variants, [{"variant": "twin", "sample_rate": 0.3}])) as gateway:
        for _ in range(100):
            assert chat(gateway.url).status_code == 200
        sent = _summary(gateway.url)["shadows"]["twin"]["sent"]
        assert 15 <= sent <= 45
