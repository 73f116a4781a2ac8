"""The shared rate limiter: asks one counter; when it is unreachable, counts locally at L / replicas."""

from __future__ import annotations

import asyncio
import logging

import pytest

from serving.ratelimit_shared import LocalLimiter, SharedLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingCounter:
    """A shared counter in this process (what the Ray deployment does), optionally down."""

    def __init__(self, clock: Clock) -> None:
        self.local = LocalLimiter(clock)
        self.down = False
        self.slow = False
        self.asked = 0

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        self.asked += 1
        if self.down:
            raise ConnectionError("counter replica gone")
        if self.slow:
            await asyncio.sleep(1.0)
        return self.local.admit_now(key, rpm, tpm)

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        if self.down:
            raise ConnectionError("counter replica gone")
        self.local.charge(key, tokens, tpm)


async def test_replicas_sharing_one_counter_admit_the_limit_once() -> None:
    clock = Clock()
    counter = CountingCounter(clock)
    missed: list[int] = []
    replicas = [SharedLimiter(counter, 3, lambda: missed.append(1), clock=clock) for _ in range(3)]
    admitted = 0
    for i in range(90):
        admitted += await replicas[i % 3].admit("k", 30, None) is None
    assert admitted == 30 and missed == []


async def test_an_unreachable_counter_is_counted_logged_and_falls_back_to_a_share(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    counter = CountingCounter(clock)
    counter.down = True
    missed: list[int] = []
    limiter = SharedLimiter(counter, 3, lambda: missed.append(1), clock=clock)
    with caplog.at_level(logging.WARNING, logger="turnout"):
        admitted = sum([await limiter.admit("k", 30, None) is None for _ in range(20)])
    assert admitted == 10  # 30 / 3 replicas
    assert len(missed) == 20
    warnings = [r for r in caplog.records if "shared rate-limit counter unreachable" in r.message]
    assert len(warnings) == 1  # at most one per LOG_EVERY_S


async def test_a_slow_counter_counts_as_unreachable() -> None:
    clock = Clock()
    counter = CountingCounter(clock)
    counter.slow = True
    missed: list[int] = []
    limiter = SharedLimiter(counter, 2, lambda: missed.append(1), timeout_s=0.05, clock=clock)
    assert await limiter.admit("k", 10, None) is None and missed == [1]


async def test_charges_reach_the_counter() -> None:
    clock = Clock()
    counter = CountingCounter(clock)
    limiter = SharedLimiter(counter, 2, lambda: None, clock=clock)
    assert await limiter.admit("k", None, 100) is None
    limiter.charge("k", 150, 100)
    await asyncio.sleep(0.01)
    assert await limiter.admit("k", None, 100) is not None  # the budget went below zero


async def test_after_a_miss_the_counter_is_left_alone_for_retry_s_then_asked_again() -> None:
    clock = Clock()
    counter = CountingCounter(clock)
    counter.down = True
    missed: list[int] = []
    limiter = SharedLimiter(counter, 2, lambda: missed.append(1), retry_s=2.0, clock=clock)
    for _ in range(5):
        await limiter.admit("k", 100, None)
    assert counter.asked == 1 and len(missed) == 5  # one timeout paid, every local decision counted
    assert limiter.counter_down()
    counter.down = False
    clock.now += 2.0
    assert await limiter.admit("k", 100, None) is None
    assert counter.asked == 2 and len(missed) == 5 and not limiter.counter_down()


async def test_charges_while_the_counter_is_down_go_to_the_local_share() -> None:
    clock = Clock()
    counter = CountingCounter(clock)
    counter.down = True
    limiter = SharedLimiter(counter, 2, lambda: None, clock=clock)
    assert await limiter.admit("k", None, 100) is None  # the miss: local share of 50 tokens
    limiter.charge("k", 60, 100)
    assert await limiter.admit("k", None, 100) is not None  # 50 - 60 < 0: over the local share
