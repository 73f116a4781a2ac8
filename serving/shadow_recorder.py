"""Running comparison summary per (route, shadow) and a capped list of recent differing pairs.

Fed by ``serving.shadow.ShadowTee`` after each primary/shadow pair is compared (the pure
comparison lives in ``serving.routing.compare``); read by ``GET /admin/routes/{name}/shadow``
through :meth:`ShadowRecorder.state`, which ``serving.shadow_merge`` summarises (under Ray Serve,
with every gateway replica's state).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from serving.routing.compare import Answer, Comparison

_TEXT_CAP = 2_000  # characters of each answer kept in a recent difference
TALLY_COUNTS = (
    "sent", "compared", "answered", "exact_matches", "status_mismatches", "errors", "timeouts",
    "dropped", "skipped", "similarity_sum", "length_ratio_sum",
)  # fmt: skip


@dataclass(slots=True)
class ShadowTally:
    """One shadow's counts. ``compared``: copies settled against their primary, failures too;
    ``answered``: those where both answered (200), which alone the quality figures average
    over, so a shadow that errors shows as errors, not as a low similarity."""

    sent: int = 0
    compared: int = 0
    answered: int = 0
    exact_matches: int = 0
    status_mismatches: int = 0
    errors: int = 0
    timeouts: int = 0
    dropped: int = 0
    skipped: int = 0
    similarity_sum: float = 0.0
    length_ratio_sum: float = 0.0
    latency_deltas: deque[float] = field(default_factory=lambda: deque(maxlen=1_000))

    def state(self) -> dict[str, Any]:
        """The raw counts, sums and latency deltas (JSON), which add up across gateway replicas."""
        counts = {name: getattr(self, name) for name in TALLY_COUNTS}
        return {**counts, "latency_deltas": list(self.latency_deltas)}

    def add(self, state: dict[str, Any]) -> None:
        """Another tally's :meth:`state` added to this one."""
        for name in TALLY_COUNTS:
            setattr(self, name, getattr(self, name) + state.get(name, 0))
        self.latency_deltas.extend(state.get("latency_deltas", ()))

    def as_dict(self) -> dict[str, Any]:
        deltas = list(self.latency_deltas)
        answered = self.answered or 1
        return {
            "sent": self.sent,
            "compared": self.compared,
            "answered": self.answered,
            "exact_matches": self.exact_matches,
            "exact_match_rate": self.exact_matches / answered if self.answered else None,
            "mean_similarity": self.similarity_sum / answered if self.answered else None,
            "mean_length_ratio": self.length_ratio_sum / answered if self.answered else None,
            "status_mismatches": self.status_mismatches,
            "latency_delta_ms_p50": statistics.median(deltas) * 1000 if deltas else None,
            "latency_delta_ms_mean": statistics.fmean(deltas) * 1000 if deltas else None,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "dropped": self.dropped,
            "skipped": self.skipped,
        }


def _answer(answer: Answer) -> dict[str, Any]:
    return {
        "status": answer.status,
        "text": answer.text[:_TEXT_CAP],
        "latency_ms": round(answer.latency_s * 1000, 3),
    }


class ShadowRecorder:
    def __init__(self, recent_cap: int) -> None:
        self._tallies: dict[tuple[str, str], ShadowTally] = {}
        self._recent: dict[str, deque[dict[str, Any]]] = {}
        self.recent_cap = recent_cap

    def tally(self, route: str, shadow: str) -> ShadowTally:
        found = self._tallies.get((route, shadow))
        if found is None:
            found = self._tallies[(route, shadow)] = ShadowTally()
        return found

    def compared(
        self,
        route: str,
        shadow: str,
        request_id: str,
        primary: Answer,
        answer: Answer,
        result: Comparison,
    ) -> None:
        tally = self.tally(route, shadow)
        tally.compared += 1
        tally.status_mismatches += result.status_mismatch
        if primary.status == answer.status == 200:
            tally.answered += 1
            tally.exact_matches += result.exact_match
            tally.similarity_sum += result.similarity
            tally.length_ratio_sum += result.length_ratio
            tally.latency_deltas.append(result.latency_delta_s)
        if result.differs and self.recent_cap:
            recent = self._recent.get(route)
            if recent is None:
                recent = self._recent[route] = deque(maxlen=self.recent_cap)
            recent.append(
                {
                    "at": time.time(),
                    "request_id": request_id,
                    "shadow": shadow,
                    "primary": _answer(primary),
                    "shadow_answer": _answer(answer),
                    "similarity": round(result.similarity, 4),
                    "length_ratio": round(result.length_ratio, 4),
                    "latency_delta_ms": round(result.latency_delta_s * 1000, 3),
                    "status_mismatch": result.status_mismatch,
                }
            )

    def fingerprint(self) -> int:
        """Grows with every copy's end (sent or dropped, then skipped or compared): an unchanged
        fingerprint means an unchanged :meth:`state`, which need not be sent again."""
        return sum(t.sent + t.dropped + t.skipped + t.compared for t in self._tallies.values())

    def state(self) -> dict[str, Any]:
        """Everything recorded, as JSON: ``tallies`` (route → shadow → :meth:`ShadowTally.state`)
        and ``recent`` (route → its recent differences, oldest first)."""
        tallies: dict[str, dict[str, Any]] = {}
        for (route, shadow), tally in self._tallies.items():
            tallies.setdefault(route, {})[shadow] = tally.state()
        return {"tallies": tallies, "recent": {route: list(found) for route, found in self._recent.items()}}
