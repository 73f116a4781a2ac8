"""Shadow answer comparison: how a shadow variant's answer differs from the primary's.

Sits off the request path, after it: the gateway's shadow tee calls :func:`compare` once a
shadow's answer and the primary's answer are both known (the client already has the primary's),
and hands the :class:`Comparison` to the comparison recorder. Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

__all__ = ["Answer", "Comparison", "compare", "normalize"]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    text: str
    latency_s: float


@dataclass(frozen=True, slots=True)
class Comparison:
    exact_match: bool  # same status and identical text
    similarity: float  # normalized Levenshtein similarity in [0, 1] of the normalized texts
    length_ratio: float  # len(shadow.text) / max(len(primary.text), 1); 1.0 when both are empty
    latency_delta_s: float  # shadow - primary
    status_mismatch: bool

    @property
    def differs(self) -> bool:
        return not self.exact_match


def normalize(text: str) -> str:
    """Strip, collapse runs of whitespace to one space, and casefold."""
    return " ".join(text.split()).casefold()


def compare(primary: Answer, shadow: Answer) -> Comparison:
    """Compare ``shadow``'s answer with ``primary``'s."""
    a, b = normalize(primary.text), normalize(shadow.text)
    similarity = 1.0 if a == b else float(Levenshtein.normalized_similarity(a, b))
    both_empty = not primary.text and not shadow.text
    length_ratio = 1.0 if both_empty else len(shadow.text) / max(len(primary.text), 1)
    return Comparison(
        exact_match=primary.status == shadow.status and primary.text == shadow.text,
        similarity=similarity,
        length_ratio=length_ratio,
        latency_delta_s=shadow.latency_s - primary.latency_s,
        status_mismatch=primary.status != shadow.status,
    )
