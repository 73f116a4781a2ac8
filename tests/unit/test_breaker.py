"""The per-variant circuit breaker, driven by simulated ticks."""

from __future__ import annotations

from serving.routing.breaker import BreakerSettings, CircuitBreaker

# Consecutive-failure trip effectively off, so error-rate tests isolate that rule.
RATE_ONLY = BreakerSettings(consecutive_failures=1000, error_rate=0.5, window=10, min_requests=6)


def feed(breaker: CircuitBreaker, outcomes: str, start: float = 0.0) -> float:
    """Record outcomes ('.' = ok, 'x' = failure), one per second; returns the next tick."""
    now = start
    for mark in outcomes:
        breaker.record(mark == ".", now)
        now += 1.0
    return now


def test_starts_closed_and_allows() -> None:
    breaker = CircuitBreaker(BreakerSettings())
    assert breaker.state(0.0) == "closed"
    assert breaker.allow(0.0)
    assert breaker.opened_count == 0
    assert breaker.reason is None


def test_opens_on_consecutive_failures() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=3, min_requests=100))
    now = feed(breaker, "xx")
    assert breaker.state(now) == "closed"
    feed(breaker, "x", now)
    assert breaker.state(now) == "open"
    assert not breaker.allow(now)
    assert breaker.opened_count == 1
    assert breaker.reason == "3 consecutive failures"


def test_success_resets_the_consecutive_count() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=3, min_requests=100))
    now = feed(breaker, "xx.xx.xx.")
    assert breaker.state(now) == "closed"
    assert breaker.allow(now)


def test_error_rate_needs_min_requests() -> None:
    breaker = CircuitBreaker(RATE_ONLY)
    now = feed(breaker, "xxxxx")  # 100% failures, but only 5 of the 6 needed
    assert breaker.state(now) == "closed"
    feed(breaker, "x", now)
    assert breaker.state(now) == "open"
    assert breaker.reason == "error rate 100% over last 6"


def test_opens_when_error_rate_reaches_threshold() -> None:
    breaker = CircuitBreaker(RATE_ONLY)
    now = feed(breaker, "..x.x.x")  # 3/7 = 43%
    assert breaker.state(now) == "closed"
    feed(breaker, "x", now)  # 4/8 = 50%
    assert breaker.state(now) == "open"
    assert breaker.reason == "error rate 50% over last 8"


def test_error_rate_is_over_the_window_only() -> None:
    breaker = CircuitBreaker(RATE_ONLY)
    now = feed(breaker, "." * 20 + "xx.xx")  # window: 4/10 failures
    assert breaker.state(now) == "closed"
    feed(breaker, ".x", now)  # window: 5/10 failures, though only 5/27 overall
    assert breaker.state(now + 2) == "open"
    assert breaker.reason == "error rate 50% over last 10"


def test_stays_closed_below_thresholds() -> None:
    breaker = CircuitBreaker(
        BreakerSettings(consecutive_failures=5, error_rate=0.5, window=20, min_requests=10)
    )
    now = feed(breaker, "x..x..x..xx..x..x..x" * 3)  # 40% failures, at most 2 in a row
    assert breaker.state(now) == "closed"
    assert breaker.opened_count == 0


def test_cooldown_turns_open_into_half_open() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1, cooldown_s=10.0))
    breaker.record(False, 100.0)
    assert breaker.state(100.0) == "open"
    assert not breaker.allow(109.9)
    assert breaker.state(109.9) == "open"
    assert breaker.state(110.0) == "half_open"


def test_allow_moves_open_to_half_open_after_cooldown() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1, cooldown_s=5.0))
    breaker.record(False, 0.0)
    assert not breaker.allow(4.0)
    assert breaker.allow(5.0)
    assert breaker.state(5.0) == "half_open"


def test_half_open_limits_probes_in_flight() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1, cooldown_s=1.0, half_open_probes=2))
    breaker.record(False, 0.0)
    assert breaker.allow(1.0)
    assert breaker.allow(1.1)
    assert not breaker.allow(1.2)
    assert not breaker.allow(50.0)  # still two probes in flight, however long it waits
    assert breaker.state(50.0) == "half_open"


def test_single_probe_by_default() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1, cooldown_s=1.0))
    breaker.record(False, 0.0)
    assert breaker.allow(2.0)
    assert not breaker.allow(2.0)


def test_probe_success_closes_with_a_fresh_window() -> None:
    breaker = CircuitBreaker(RATE_ONLY)
    now = feed(breaker, "xxxxxx")
    assert breaker.state(now) == "open"
    now += RATE_ONLY.cooldown_s
    assert breaker.allow(now)
    breaker.record(True, now)
    assert breaker.state(now) == "closed"
    # The six old failures are gone: one more failure does not reopen it.
    breaker.record(False, now + 1)
    assert breaker.state(now + 1) == "closed"
    assert breaker.opened_count == 1


def test_probe_failure_reopens_with_a_fresh_cooldown() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1, cooldown_s=10.0))
    breaker.record(False, 0.0)
    assert breaker.allow(10.0)
    breaker.record(False, 12.0)
    assert breaker.state(12.0) == "open"
    assert breaker.opened_count == 2
    assert breaker.reason == "probe failed while half-open"
    assert not breaker.allow(21.9)  # the cooldown runs from 12.0, not from 0.0
    assert breaker.allow(22.0)


def test_release_frees_a_probe_slot_without_changing_state() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1, cooldown_s=1.0))
    breaker.record(False, 0.0)
    assert breaker.allow(1.0)
    assert not breaker.allow(1.0)
    breaker.release(1.5)  # the probe was cancelled: no outcome
    assert breaker.state(1.5) == "half_open"
    assert breaker.opened_count == 1
    assert breaker.allow(1.5)
    breaker.release(2.0)
    breaker.release(2.0)  # extra releases do not create extra slots
    assert breaker.allow(2.0)
    assert not breaker.allow(2.0)


def test_release_while_closed_is_a_no_op() -> None:
    breaker = CircuitBreaker(BreakerSettings())
    breaker.release(0.0)
    assert breaker.state(0.0) == "closed"
    assert breaker.allow(0.0)


def test_outcomes_recorded_while_open_are_ignored() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=2, cooldown_s=10.0))
    feed(breaker, "xx")
    breaker.record(True, 3.0)  # a request started before it opened
    breaker.record(False, 4.0)
    assert breaker.state(5.0) == "open"
    assert breaker.opened_count == 1
    assert breaker.state(12.0) == "half_open"  # cooldown still runs from the first opening at 1.0


def test_full_cycle_counts_openings() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=2, cooldown_s=5.0))
    now = 0.0
    for _ in range(3):
        now = feed(breaker, "xx", now)
        assert breaker.state(now) == "open"
        now += 5.0
        assert breaker.allow(now)
        breaker.record(True, now)
        assert breaker.state(now) == "closed"
    assert breaker.opened_count == 3


def test_retry_in_is_the_rest_of_the_cooldown_then_the_probes() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1, cooldown_s=10.0))
    assert breaker.retry_in(0.0) == 0.0
    breaker.record(False, 5.0)  # opens at 5
    assert breaker.retry_in(7.5) == 7.5
    assert breaker.allow(15.0)  # half-open: the probe is taken
    assert breaker.retry_in(15.0) == 1.0  # its answer decides
    breaker.record(True, 15.2)
    assert breaker.retry_in(15.2) == 0.0


def test_a_slow_attempt_from_before_the_opening_is_not_a_probe_answer() -> None:
    # Sent at 0.5 to the backend that then failed; it answers (well) only once the breaker is
    # half-open: the probe in flight, not this, decides, and its slot stays taken.
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=2, cooldown_s=10.0))
    feed(breaker, "xx")  # opens at 1.0
    assert breaker.allow(11.0)  # the probe
    breaker.record(True, 11.5, started=0.5)
    assert breaker.state(11.5) == "half_open"
    assert not breaker.allow(11.5)  # the probe's slot is still the probe's
    breaker.release(11.6, started=0.5)  # nor does a stale cancellation free it
    assert not breaker.allow(11.6)
    breaker.record(False, 12.0, started=11.0)  # the probe's own answer counts
    assert breaker.state(12.0) == "open"


def test_stale_failures_do_not_count_after_the_breaker_closed_again() -> None:
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=2, cooldown_s=10.0))
    feed(breaker, "xx")  # opens at 1.0
    assert breaker.allow(11.0)
    breaker.record(True, 11.2, started=11.0)  # closed again
    for t in (11.3, 11.4, 11.5):  # three slow requests from before the opening time out now
        breaker.record(False, t, started=0.2)
    assert breaker.state(12.0) == "closed"
    breaker.record(False, 12.1, started=12.0)  # fresh failures still count
    breaker.record(False, 12.2, started=12.1)
    assert breaker.state(12.2) == "open"
