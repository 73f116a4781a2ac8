"""Canary eval gate runs shared by the gateways on one store: one claims a plan's eval and runs
it, every other reads its result.

Where it sits: :attr:`serving.store.RouteStore.eval_claims`, called from a worker thread by
``serving.canary_eval.CanaryEvals`` on each canary tick. A plan's eval is keyed by its route,
the version its canary started at, its variants and its gate, so a canary started again is
evaluated again. The gateway that claims it writes a heartbeat every tick while it runs and the
result (the scores, or why it could not run) at the end; a claim whose heartbeat is ``stale_s``
old without a result (its gateway went away) is taken over by the next gateway to ask. Claims
older than a week are deleted by the next claim. Nothing here touches the audit log.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from serving.store.tables import canary_evals

_Session = Callable[[], AbstractContextManager[Connection]]
_KEPT_S = 7 * 86400.0


class EvalClaims:
    def __init__(self, reading: _Session, writing: _Session, clock: Callable[[], float]) -> None:
        self._reading, self._writing, self._clock = reading, writing, clock

    def claim(self, key: str, route: str, claimant: str, stale_s: float) -> bool:
        """True when ``claimant`` is to run the eval now: nobody had claimed it, or its claimant
        went quiet for ``stale_s`` without a result."""
        now = self._clock()
        try:
            with self._writing() as conn:
                conn.execute(delete(canary_evals).where(canary_evals.c.claimed_at < now - _KEPT_S))
                row = conn.execute(select(canary_evals).where(canary_evals.c.key == key)).first()
                if row is None:
                    values = {"key": key, "route": route, "claimant": claimant, "claimed_at": now}
                    conn.execute(insert(canary_evals).values(**values, heartbeat_at=now, result=None))
                    return True
                if row.result is not None or now - row.heartbeat_at < stale_s:
                    return False
                taken = conn.execute(  # only if nobody took it over meanwhile (PostgreSQL)
                    update(canary_evals)
                    .where(canary_evals.c.key == key, canary_evals.c.heartbeat_at == row.heartbeat_at)
                    .values(claimant=claimant, claimed_at=now, heartbeat_at=now)
                )
                return bool(taken.rowcount)
        except IntegrityError:  # another gateway claimed it first (PostgreSQL)
            return False

    def beat(self, key: str, claimant: str) -> None:
        with self._writing() as conn:
            conn.execute(
                update(canary_evals)
                .where(canary_evals.c.key == key, canary_evals.c.claimant == claimant)
                .values(heartbeat_at=self._clock())
            )

    def finish(self, key: str, result: str) -> None:
        """Write the result (JSON); a result already there stays (the first one written wins)."""
        with self._writing() as conn:
            conn.execute(
                update(canary_evals)
                .where(canary_evals.c.key == key, canary_evals.c.result.is_(None))
                .values(result=result, heartbeat_at=self._clock())
            )

    def result(self, key: str) -> str | None:
        with self._reading() as conn:
            row = conn.execute(select(canary_evals.c.result).where(canary_evals.c.key == key)).first()
            return None if row is None else row.result
