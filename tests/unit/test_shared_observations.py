"""Canary samples shared by gateway replicas (Ray Serve): each judge sees every replica's."""

from __future__ import annotations

import asyncio

from serving.observations import SharedObservationLog
from serving.ray_deployments import TurnoutRateCounter
from serving.routing.canary import Sample


def sample(at: float, ok: bool = True) -> Sample:
    return Sample(at=at, ok=ok, latency_s=0.01, ttft_s=None)


def test_every_replica_judges_on_every_replicas_samples() -> None:
    keeper = TurnoutRateCounter()
    one, two = SharedObservationLog(keeper.observations), SharedObservationLog(keeper.observations)
    for at in range(3):
        one.record("chat", "canary", sample(at))
    two.record("chat", "canary", sample(10, ok=False))
    two.record("chat", "stable", sample(11))

    async def both() -> None:
        await one.sync()
        await two.sync()
        await one.sync()

    asyncio.run(both())
    for replica in (one, two):
        assert len(replica.since("chat", "canary", 0)) == 4
        assert [s.at for s in replica.since("chat", "canary", 2)] == [2, 10]
        assert len(replica.since("chat", "stable", 0)) == 1
    one.forget("chat")  # a verdict acted on: the next step starts from nothing, for everyone
    assert one.since("chat", "canary", 0) == []
    asyncio.run(one.sync())  # the forget reaches the keeper with this replica's next tick
    asyncio.run(two.sync())
    assert two.since("chat", "canary", 0) == [] and one.since("chat", "canary", 0) == []


def test_an_unreachable_keeper_leaves_a_replica_its_own_samples_and_resends_them() -> None:
    keeper = TurnoutRateCounter()
    down = [True]

    async def exchange(
        samples: list[tuple[str, str, Sample]], forgotten: list[str]
    ) -> dict[tuple[str, str], list[Sample]]:
        if down[0]:
            raise ConnectionError("the counter is restarting")
        return await keeper.observations(samples, forgotten)

    replica = SharedObservationLog(exchange)
    replica.record("chat", "canary", sample(1))
    asyncio.run(replica.sync())
    assert len(replica.since("chat", "canary", 0)) == 1  # its own, meanwhile
    down[0] = False
    asyncio.run(replica.sync())
    assert len(replica.since("chat", "canary", 0)) == 1  # sent once it could be: not lost, not twice
    assert len(asyncio.run(keeper.observations([], []))[("chat", "canary")]) == 1
