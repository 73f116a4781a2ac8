"""Per-key token buckets with simulated time: requests per minute and tokens per minute."""

from __future__ import annotations

import pytest

from serving.ratelimit import RateLimiter


def test_unlimited_keys_are_always_admitted() -> None:
    limiter = RateLimiter()
    assert all(limiter.admit("k", None, None, 0.0) is None for _ in range(1000))
    assert len(limiter) == 0


def test_burst_of_rpm_then_refused_with_retry_after() -> None:
    limiter = RateLimiter()
    assert all(limiter.admit("k", 60, None, 100.0) is None for _ in range(60))
    wait = limiter.admit("k", 60, None, 100.0)
    assert wait == pytest.approx(1.0)  # 60 rpm refills one request a second
    assert limiter.admit("k", 60, None, 100.5) == pytest.approx(0.5)
    assert limiter.admit("k", 60, None, 101.0) is None
    assert limiter.admit("k", 60, None, 101.0) is not None


def test_refill_over_time_is_capped_at_the_limit() -> None:
    limiter = RateLimiter()
    for _ in range(10):
        assert limiter.admit("k", 10, None, 0.0) is None
    assert limiter.admit("k", 10, None, 0.0) == pytest.approx(6.0)
    # Half a minute refills half the bucket.
    admitted = sum(limiter.admit("k", 10, None, 30.0) is None for _ in range(20))
    assert admitted == 5
    # An hour idle refills it only to its capacity.
    admitted = sum(limiter.admit("k", 10, None, 3630.0) is None for _ in range(20))
    assert admitted == 10


def test_token_budget_blocks_until_positive_again() -> None:
    limiter = RateLimiter()
    assert limiter.admit("k", None, 600, 0.0) is None
    limiter.charge_tokens("k", 500, 600, 0.0)
    assert limiter.admit("k", None, 600, 0.0) is None  # 100 left
    limiter.charge_tokens("k", 400, 600, 0.0)  # overdraws to -300
    wait = limiter.admit("k", None, 600, 0.0)
    assert wait is not None and 30.0 <= wait <= 31.0  # 600 tpm refills 10 tokens a second
    assert limiter.admit("k", None, 600, 15.0) is not None
    assert limiter.admit("k", None, 600, 31.0) is None


def test_refused_by_tokens_does_not_spend_a_request() -> None:
    limiter = RateLimiter()
    limiter.charge_tokens("k", 100, 60, 0.0)
    for _ in range(5):
        assert limiter.admit("k", 2, 60, 0.0) is not None
    limiter.charge_tokens("k", 0, 60, 0.0)
    assert limiter.admit("k", 2, 60, 200.0) is None
    assert limiter.admit("k", 2, 60, 200.0) is None
    assert limiter.admit("k", 2, 60, 200.0) is not None


def test_keys_are_independent() -> None:
    limiter = RateLimiter()
    assert limiter.admit("a", 1, None, 0.0) is None
    assert limiter.admit("a", 1, None, 0.0) is not None
    assert limiter.admit("b", 1, None, 0.0) is None
    limiter.charge_tokens("a", 10_000, 100, 0.0)
    assert limiter.admit("b", None, 100, 0.0) is None


def test_a_changed_limit_applies_at_once() -> None:
    limiter = RateLimiter()
    for _ in range(100):
        limiter.admit("k", 100, None, 0.0)
    assert limiter.admit("k", 100, None, 0.0) is not None
    assert limiter.admit("k", 6000, None, 1.0) is None  # raised: refills 100 a second now
    assert limiter.admit("k", 0, None, 2.0) == pytest.approx(60.0)  # 0 = never admitted


def test_idle_full_buckets_are_forgotten() -> None:
    limiter = RateLimiter()
    for i in range(1000):
        limiter.admit(f"key-{i}", 60, 1000, 0.0)
    limiter.charge_tokens("key-0", 1_000_000, 1000, 0.0)  # still deep in debt after two minutes
    assert len(limiter) == 2000
    limiter.admit("other", 60, None, 200.0)
    assert len(limiter) == 2  # "other", and key-0's unpaid token bucket
    assert limiter.admit("key-0", 60, 1000, 200.0) is not None
