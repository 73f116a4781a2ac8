"""Prompt log-probabilities in the OpenAI legacy completions shape (``echo`` + ``logprobs``).

On the request path of ``/v1/completions`` with ``echo: true, logprobs: N, max_tokens: 0``,
the request lm-evaluation-harness and ``turnout eval`` send to score a text: the embedded
engine runs the prompt once and this module turns the per-position logits into
``choices[0].logprobs``. Pure (numpy in, dicts out). A logprob is the log-softmax of the raw
logits at the position before the token (sampling settings do not change it); the first
token has none (``null``), as in the OpenAI API and vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

MAX_LOGPROBS = 5


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (stable: the row max is subtracted first)."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return result


def prompt_logprobs(
    logits: np.ndarray, ids: Sequence[int], top: int, decode: Callable[[int], str]
) -> dict[str, Any]:
    """The logprobs block of the prompt ``ids`` (the client's tokens, BOS not included).

    ``logits[j]`` is the distribution the model gave for ``ids[j]`` (computed from BOS and
    ``ids[:j]``), so ``len(logits) == len(ids)``; the first token's logprob is therefore known
    but reported as null, as the API does. ``top`` (0..5) alternatives per position.
    """
    scores = log_softmax(logits)
    tokens = [decode(token) for token in ids]
    token_logprobs: list[float | None] = [None]
    top_logprobs: list[dict[str, float] | None] = [None]
    for position in range(1, len(ids)):
        row = scores[position]
        token_logprobs.append(float(row[ids[position]]))
        if top > 0:
            best = np.argpartition(-row, top)[:top]
            best = best[np.argsort(-row[best])]
            top_logprobs.append({decode(int(t)): float(row[t]) for t in best})
        else:
            top_logprobs.append({})
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }
