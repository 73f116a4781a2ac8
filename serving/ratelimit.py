"""Per-key rate limits: requests per minute and tokens per minute, as token buckets.

Sits at the client API edge right after ``serving.auth``: :meth:`RateLimiter.admit`
decides whether a key's request may start (else the handler raises ``RateLimited``
with the returned wait as ``Retry-After``), and once the answer is done
:meth:`RateLimiter.charge_tokens` takes its prompt + completion tokens from the key's
token budget. Pure: the current time is passed in, nothing here reads a clock.

Each bucket holds up to ``limit`` and refills ``limit / 60`` per second, starting full.
A token bucket may go below zero (one long answer can spend more than is left); the key's
later requests then wait until it is positive again. A ``None`` limit means unlimited.
"""

from __future__ import annotations

from dataclasses import dataclass

IDLE_S = 120.0  # buckets untouched this long and full again are forgotten
PRUNE_EVERY_S = 60.0
_REFUSED_WAIT_S = 60.0  # the wait reported for a limit of 0 (never admitted)


@dataclass(slots=True)
class _Bucket:
    capacity: float
    level: float
    updated: float

    def refill(self, capacity: float, now: float) -> None:
        # A changed limit (the key was edited) takes effect at once; the level never exceeds it.
        self.capacity = capacity
        if now > self.updated:
            self.level = min(capacity, self.level + (now - self.updated) * capacity / 60.0)
            self.updated = now
        else:
            self.level = min(capacity, self.level)

    def wait_for(self, amount: float) -> float:
        """Seconds until the level reaches ``amount`` (0 when it already has)."""
        missing = amount - self.level
        if missing <= 0:
            return 0.0
        if self.capacity <= 0:
            return _REFUSED_WAIT_S
        return missing * 60.0 / self.capacity


class RateLimiter:
    """Token buckets per key: ``admit`` before a request, ``charge_tokens`` after it."""

    def __init__(self) -> None:
        self._requests: dict[str, _Bucket] = {}
        self._tokens: dict[str, _Bucket] = {}
        self._last_prune = float("-inf")

    def __len__(self) -> int:
        """Buckets held (requests and tokens together)."""
        return len(self._requests) + len(self._tokens)

    def admit(self, key: str, rpm: int | None, tpm: int | None, now: float) -> float | None:
        """None when admitted (one request taken); else the seconds until it would be."""
        self._maybe_prune(now)
        wait = 0.0
        requests = None
        if rpm is not None:
            requests = self._bucket(self._requests, key, rpm, now)
            wait = requests.wait_for(1.0)
        if tpm is not None:
            tokens = self._bucket(self._tokens, key, tpm, now)
            if tokens.level <= 0:
                # Admit again as soon as the budget is positive: a whole token back.
                wait = max(wait, tokens.wait_for(1.0))
        if wait > 0:
            return wait
        if requests is not None:
            requests.level -= 1.0
        return None

    def charge_tokens(self, key: str, tokens: int, tpm: int | None, now: float) -> None:
        """Take a finished request's prompt + completion tokens from the key's budget."""
        if tpm is None or tokens <= 0:
            return
        bucket = self._bucket(self._tokens, key, tpm, now)
        bucket.level -= tokens

    def forget(self, key: str) -> None:
        """Drop a key's buckets (e.g. when it is revoked)."""
        self._requests.pop(key, None)
        self._tokens.pop(key, None)

    @staticmethod
    def _bucket(buckets: dict[str, _Bucket], key: str, limit: int, now: float) -> _Bucket:
        capacity = float(max(0, limit))
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = _Bucket(capacity=capacity, level=capacity, updated=now)
        else:
            bucket.refill(capacity, now)
        return bucket

    def _maybe_prune(self, now: float) -> None:
        if now - self._last_prune < PRUNE_EVERY_S:
            return
        self._last_prune = now
        for buckets in (self._requests, self._tokens):
            for key in [k for k, b in buckets.items() if now - b.updated > IDLE_S]:
                bucket = buckets[key]
                bucket.refill(bucket.capacity, now)
                if bucket.level >= bucket.capacity:
                    del buckets[key]
