"""One shadow comparison from one gateway's record or every gateway replica's (``serving.shadow_merge``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from serving.ray_deployments import PAGE_STALE_S, TurnoutRateCounter
from serving.routing.compare import Answer, compare
from serving.shadow_merge import LOCAL, shadow_summary
from serving.shadow_recorder import ShadowRecorder


def _recorded(pairs: list[tuple[str, str, float]], cap: int = 50, route: str = "chat") -> ShadowRecorder:
    """A recorder that compared each (primary text, shadow text, shadow latency) pair of ``route``."""
    recorder = ShadowRecorder(cap)
    for number, (primary_text, shadow_text, latency) in enumerate(pairs):
        primary, answer = Answer(200, primary_text, 0.1), Answer(200, shadow_text, latency)
        recorder.tally(route, "int8").sent += 1
        recorder.compared(route, "int8", f"req-{number}", primary, answer, compare(primary, answer))
    return recorder


def test_one_gateways_summary_names_no_replica() -> None:
    recorder = _recorded([("4", "4", 0.2), ("5", "6", 0.3)])
    summary = shadow_summary("chat", {LOCAL: {**recorder.state(), "in_flight": 1}}, recorder.recent_cap)
    int8 = summary["shadows"]["int8"]
    assert (int8["sent"], int8["compared"], int8["exact_matches"], int8["exact_match_rate"]) == (2, 2, 1, 0.5)
    assert int8["latency_delta_ms_p50"] == pytest.approx(150.0)
    assert summary["in_flight"] == 1 and "gateway_replicas" not in summary
    [difference] = summary["recent_differences"]
    assert difference["request_id"] == "req-1" and "gateway_replica" not in difference


def test_replicas_records_add_up_and_their_latencies_are_pooled() -> None:
    first = _recorded([("4", "4", 0.2), ("5", "5", 0.2), ("6", "7", 0.2)])
    second = _recorded([("8", "8", 1.1)])
    states = {"r1": {**first.state(), "in_flight": 2}, "r2": {**second.state(), "in_flight": 1}}
    summary = shadow_summary("chat", states, 50)
    int8 = summary["shadows"]["int8"]
    assert (int8["sent"], int8["compared"], int8["answered"], int8["exact_matches"]) == (4, 4, 4, 3)
    assert int8["exact_match_rate"] == 0.75 and int8["mean_similarity"] == pytest.approx(0.75)
    # the median of all four deltas (100, 100, 100, 1000 ms), not a median of medians (550)
    assert int8["latency_delta_ms_p50"] == pytest.approx(100.0)
    assert summary["in_flight"] == 3
    assert summary["gateway_replicas"] == {"r1": {"sent": 3, "compared": 3}, "r2": {"sent": 1, "compared": 1}}


def test_the_newest_differences_of_all_replicas_come_first_each_naming_its_replica() -> None:
    first, second = _recorded([("1", "x", 0.1)] * 3, cap=3), _recorded([("2", "y", 0.1)] * 3, cap=3)
    states: dict[str, dict[str, Any]] = {"r1": first.state(), "r2": second.state()}
    for at, difference in enumerate(states["r1"]["recent"]["chat"]):
        difference["at"] = 10.0 + 2 * at  # 10, 12, 14
    for at, difference in enumerate(states["r2"]["recent"]["chat"]):
        difference["at"] = 11.0 + 2 * at  # 11, 13, 15
    recent = shadow_summary("chat", states, 4)["recent_differences"]
    newest = [(15, "r2"), (14, "r1"), (13, "r2"), (12, "r1")]
    assert [(d["at"], d["gateway_replica"]) for d in recent] == newest


def test_another_routes_record_and_a_replica_that_mirrored_nothing_add_nothing() -> None:
    other = _recorded([("1", "2", 0.1)], route="other")
    summary = shadow_summary("chat", {"r1": other.state(), "r2": ShadowRecorder(5).state()}, 5)
    assert summary["shadows"] == {} and summary["recent_differences"] == []
    assert summary["gateway_replicas"] == {"r1": {"sent": 0, "compared": 0}, "r2": {"sent": 0, "compared": 0}}


def test_the_fingerprint_moves_with_every_copy_and_only_then() -> None:
    recorder = ShadowRecorder(5)
    assert recorder.fingerprint() == 0
    recorder.tally("chat", "int8").sent += 1
    started = recorder.fingerprint()
    recorder.state()
    assert recorder.fingerprint() == started
    primary = Answer(200, "4", 0.1)
    recorder.compared("chat", "int8", "req", primary, primary, compare(primary, primary))
    assert recorder.fingerprint() > started


def test_the_counter_keeps_each_replicas_record_and_an_unchanged_one_is_not_resent() -> None:
    now = [0.0]
    counter = TurnoutRateCounter(clock=lambda: now[0])
    first, second = _recorded([("4", "5", 0.1)]).state(), _recorded([("4", "4", 0.1)]).state()

    async def scenario() -> None:
        # an "unchanged" publish with nothing to keep asks for the record in full
        assert await counter.publish_shadows("r1", None, 0) is False
        assert await counter.publish_shadows("r1", first, 2) is True
        now[0] = PAGE_STALE_S - 1
        assert await counter.publish_shadows("r1", None, 1) is True  # kept, in flight updated
        states = await counter.shadow_states("r2", {**second, "in_flight": 0})
        assert set(states) == {"r1", "r2"} and states["r1"]["in_flight"] == 1
        assert states["r1"]["tallies"] == first["tallies"]
        now[0] += PAGE_STALE_S + 1  # r1 silent since: gone, as on the merged /metrics page
        states = await counter.shadow_states("r2", {**second, "in_flight": 0})
        assert set(states) == {"r2"}
        assert await counter.publish_shadows("r1", None, 0) is False

    asyncio.run(scenario())
