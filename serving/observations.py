"""Recent per-request outcomes per (route, variant), kept for the canary controller.

``serving.gateway`` records one :class:`~serving.routing.canary.Sample` per attempt on a
route that has a canary running; ``serving.canary_controller`` reads the samples since the
current step began and hands them to the pure judge. Bounded: old samples fall off.
"""

from __future__ import annotations

from collections import deque

from serving.routing.canary import Sample


def counts_as_error(status: int) -> bool:
    """For SLOs: server-side failures and overload count; client mistakes do not."""
    return status >= 500 or status == 429


class ObservationLog:
    def __init__(self, max_per_variant: int = 20_000) -> None:
        self._max = max_per_variant
        self._samples: dict[tuple[str, str], deque[Sample]] = {}

    def record(self, route: str, variant: str, sample: Sample) -> None:
        window = self._samples.get((route, variant))
        if window is None:
            window = self._samples[(route, variant)] = deque(maxlen=self._max)
        window.append(sample)

    def since(self, route: str, variant: str, start: float) -> list[Sample]:
        window = self._samples.get((route, variant))
        if not window:
            return []
        return [s for s in window if s.at >= start]

    def forget(self, route: str) -> None:
        for key in [k for k in self._samples if k[0] == route]:
            del self._samples[key]
