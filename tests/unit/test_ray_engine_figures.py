"""Engine figures under Ray, as values: the counter keeps fresh reports, gateways turn reads into metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from backends.ray_engine import FORGET_S, EngineFigures, new_batches
from serving.ray_deployments import STALE_S, TurnoutRateCounter


def figures(queue: float, tokens: float, batches: dict[int, int]) -> dict[str, Any]:
    return {"queue_depth": queue, "generated_tokens": tokens, "batches": batches}


def test_the_counter_keeps_each_replicas_latest_report_until_it_goes_stale() -> None:
    now = [100.0]
    board = TurnoutRateCounter(clock=lambda: now[0])
    asyncio.run(board.report("tiny", "r1", figures(1, 10, {4: 1})))
    asyncio.run(board.report("tiny", "r1", figures(2, 20, {4: 2})))
    now[0] += 2
    asyncio.run(board.report("tiny", "r2", figures(3, 5, {1: 1})))
    assert asyncio.run(board.engine_figures()) == {
        "tiny": {"r1": figures(2, 20, {4: 2}), "r2": figures(3, 5, {1: 1})}
    }
    now[0] += STALE_S - 1  # r1 last reported STALE_S + 1 s ago: gone
    assert asyncio.run(board.engine_figures()) == {"tiny": {"r2": figures(3, 5, {1: 1})}}


def test_batches_formed_between_reads_and_a_restarted_replica_counts_from_zero() -> None:
    before = {"r1": figures(0, 0, {4: 2, 8: 1})}
    assert new_batches(before, {"r1": figures(0, 0, {4: 5, 8: 1})}) == {4: 3}
    assert new_batches(before, {"r1": figures(0, 0, {4: 1})}) == {4: 1}  # restarted
    assert new_batches(before, {"r1": figures(0, 0, {4: 2, 8: 1}), "r2": figures(0, 0, {2: 2})}) == {2: 2}


def test_a_read_sums_the_replicas_and_feeds_the_batch_histogram() -> None:
    seen: list[int] = []
    reader = EngineFigures(board=None)
    reader.observers["tiny"] = seen.append
    reader.apply({"tiny": {"r1": figures(1, 10, {4: 1}), "r2": figures(2, 5, {8: 2})}})
    reader.apply({"tiny": {"r1": figures(0, 14, {4: 2}), "r2": figures(3, 9, {8: 2})}})
    assert sorted(seen) == [4, 4, 8, 8]
    assert reader.stats("tiny") == {"queue_depth": 3.0, "generated_tokens": 23.0}
    assert reader.stats("other") == {"queue_depth": 0.0, "generated_tokens": 0.0}


def test_a_read_without_a_replica_does_not_make_its_history_count_again() -> None:
    """The rate counter restarted: its first reads miss every replica, then they report again
    with their cumulative counts, which were fed to the histogram already."""
    seen: list[int] = []
    reader = EngineFigures(board=None)
    reader.observers["tiny"] = seen.append
    reader.apply({"tiny": {"r1": figures(0, 10, {4: 2})}})
    reader.apply({})  # the restarted counter knows nothing yet
    reader.apply({"tiny": {}})
    reader.apply({"tiny": {"r1": figures(0, 12, {4: 3})}})
    assert seen == [4, 4, 4]  # two, then the one formed since: not the two again


def test_a_replica_gone_for_long_is_forgotten_and_one_back_soon_is_not() -> None:
    seen: list[int] = []
    reader = EngineFigures(board=None)
    reader.observers["tiny"] = seen.append
    reader.apply({"tiny": {"r1": figures(0, 1, {4: 1}), "r2": figures(0, 1, {4: 1})}}, now=0.0)
    reader.apply({"tiny": {"r2": figures(0, 1, {4: 1})}}, now=FORGET_S + 1)  # r1 autoscaled away
    assert set(reader._counted["tiny"]) == {"r2"}
    reader.apply({"tiny": {"r2": figures(0, 2, {4: 2})}}, now=FORGET_S + 2)
    assert seen == [4, 4, 4]
