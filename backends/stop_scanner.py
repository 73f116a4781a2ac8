"""Incremental stop-sequence detection for streamed text (pure, no I/O).

Used by the embedded engine's decode loop on each token's text: text that might be the
start of a stop sequence is held back until it is known not to be, so a client never
receives part of a stop sequence, and the stop sequence itself is never emitted.
"""

from __future__ import annotations


class StopScanner:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop sequence that ended it (vLLM's ``stop_reason``)

    def feed(self, piece: str) -> str:
        """Add decoded text; return the part that is safe to emit. Sets ``stopped`` on a match."""
        if self.stopped:
            return ""
        if not self._stops:
            return piece
        buffer = self._held + piece
        # The earliest in the text; at one place, the first given (as vLLM checks them in order).
        found = [(buffer.find(s), order, s) for order, s in enumerate(self._stops) if s in buffer]
        cut, _, matched = min(found, default=(-1, 0, None))
        if matched is not None:
            self._held = ""
            self.stopped = True
            self.matched = matched
            return buffer[:cut]
        keep = self._longest_pending_prefix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """At the end of generation: whatever was held back is plain text after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_pending_prefix(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that is a proper prefix of a stop sequence."""
        best = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:size]):
                    best = size
                    break
        return best
