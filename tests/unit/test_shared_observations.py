"""Canary samples shared by gateway replicas (Ray Serve): each judge sees every replica's."""

from __future__ import annotations

import asyncio

from serving.observations import Key, SharedObservationLog, Tagged
from serving.ray_deployments import SAMPLES_IDLE_S, SampleKeeper
from serving.routing.canary import Sample, WindowStats


def sample(at: float, ok: bool = True) -> Sample:
    return Sample(at=at, ok=ok, latency_s=0.01, ttft_s=None)


JUDGED = {("chat", "canary"): 0.0, ("chat", "stable"): 0.0}


def test_every_replica_judges_on_every_replicas_samples() -> None:
    keeper = SampleKeeper()

    async def exchange(tagged: list[Tagged], judged: dict[Key, float]) -> dict[Key, WindowStats]:
        return keeper.exchange(tagged, judged)

    one, two = SharedObservationLog(exchange), SharedObservationLog(exchange)
    for at in range(3):
        one.record("chat", "canary", sample(at))
    two.record("chat", "canary", sample(10, ok=False))
    two.record("chat", "stable", sample(11))

    async def ticks() -> None:
        await one.sync(JUDGED)
        await two.sync(JUDGED)
        await one.sync(JUDGED)

    asyncio.run(ticks())
    for replica in (one, two):
        canary = replica.stats("chat", "canary", 0.0)
        assert (canary.count, canary.errors) == (4, 1)
        assert replica.stats("chat", "stable", 0.0).count == 1
    # A new step judges from its own start: the summary asked for is since then.
    asyncio.run(one.sync({("chat", "canary"): 2.0}))
    assert one.stats("chat", "canary", 2.0).count == 2
    # Asked with another start than the one exchanged: the replica's own samples, not a stale summary.
    assert one.stats("chat", "canary", 5.0).count == 0


def test_a_resend_after_a_timeout_is_not_counted_twice_and_the_keeper_forgets_idle_routes() -> None:
    now = [100.0]
    keeper = SampleKeeper(clock=lambda: now[0])
    slow = [True]

    async def exchange(tagged: list[Tagged], judged: dict[Key, float]) -> dict[Key, WindowStats]:
        answer = keeper.exchange(tagged, judged)  # stored, but the answer comes too late
        if slow[0]:
            raise TimeoutError
        return answer

    replica = SharedObservationLog(exchange)
    for at in range(10):
        replica.record("chat", "canary", sample(at))
    asyncio.run(replica.sync(JUDGED))
    assert replica.stats("chat", "canary", 0.0).count == 10  # its own, meanwhile
    slow[0] = False
    asyncio.run(replica.sync(JUDGED))  # the same ten again
    assert replica.stats("chat", "canary", 0.0).count == 10
    now[0] += SAMPLES_IDLE_S + 1  # its canary ended: nobody judges it any more
    assert keeper.exchange([], {("other", "v"): 0.0}) == {
        ("other", "v"): WindowStats(0, 0, 0.0, None, None, 0)
    }
    assert keeper.exchange([], {("chat", "canary"): 0.0})[("chat", "canary")].count == 0
