"""Shadow answer comparison: how a shadow variant's answer differs from the primary's.

Sits off the request path, after it: the gateway's shadow tee calls :func:`compare` once a
shadow's answer and the primary's answer are both known (the client already has the primary's),
and hands the :class:`Comparison` to the comparison recorder. Generated answers compare as
texts; embeddings answers as their vectors, whose similarity is the mean cosine of each input's
two vectors. Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from rapidfuzz.distance import Levenshtein

__all__ = ["Answer", "Comparison", "compare", "embeddings_text", "normalize"]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    text: str  # for embeddings, what the recorder shows of them (``embeddings_text``)
    latency_s: float
    vectors: NDArray[np.float32] | None = None  # an embeddings answer's, one row per input


@dataclass(frozen=True, slots=True)
class Comparison:
    exact_match: bool  # same status and identical text
    # normalized Levenshtein similarity in [0, 1] of the normalized texts (embeddings: the mean
    # cosine of each input's two vectors, negative ones as 0)
    similarity: float
    # len(shadow.text) / max(len(primary.text), 1); 1.0 when both are empty (embeddings: the
    # shadow's dimensions over the primary's)
    length_ratio: float
    latency_delta_s: float  # shadow - primary
    status_mismatch: bool

    @property
    def differs(self) -> bool:
        return not self.exact_match


def normalize(text: str) -> str:
    """Strip, collapse runs of whitespace to one space, and casefold."""
    return " ".join(text.split()).casefold()


def embeddings_text(vectors: NDArray[np.float32]) -> str:
    """What a person reads of an embeddings answer: how many, how long, and the first numbers."""
    if not len(vectors):
        return "no embeddings"
    head = ", ".join(f"{value:.4f}" for value in vectors[0][:4])
    more = ", …" if vectors.shape[1] > 4 else ""
    return f"{len(vectors)} × {vectors.shape[1]} dimensions: [{head}{more}]"


def _mean_cosine(a: NDArray[np.float32], b: NDArray[np.float32]) -> float:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosines = np.einsum("ij,ij->i", a, b) / np.maximum(norms, 1e-12)
    return float(np.clip(cosines, 0.0, 1.0).mean())


def _compare_vectors(primary: Answer, shadow: Answer) -> Comparison:
    a, b = primary.vectors, shadow.vectors
    assert a is not None and b is not None
    same_shape = a.shape == b.shape
    return Comparison(
        exact_match=primary.status == shadow.status and same_shape and bool(np.array_equal(a, b)),
        similarity=_mean_cosine(a, b) if same_shape and len(a) else 0.0,
        length_ratio=b.shape[-1] / max(a.shape[-1], 1),
        latency_delta_s=shadow.latency_s - primary.latency_s,
        status_mismatch=primary.status != shadow.status,
    )


def compare(primary: Answer, shadow: Answer) -> Comparison:
    """Compare ``shadow``'s answer with ``primary``'s."""
    if primary.vectors is not None and shadow.vectors is not None:
        return _compare_vectors(primary, shadow)
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
