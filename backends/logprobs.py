"""Log-probabilities in the OpenAI shapes: scoring logits and writing ``choices[0].logprobs``.

On the request path of the embedded engine (``backends/embedded.py``) when a request asks for
logprobs: ``/v1/completions`` with ``logprobs: N`` (and ``echo`` for the prompt's tokens, the
request lm-evaluation-harness and ``turnout eval`` send to score a text) or
``/v1/chat/completions`` with ``logprobs: true, top_logprobs: N``. The runner's worker thread
turns logits into :class:`TokenScore` rows (:func:`score_rows`, :func:`prompt_scores`); the
adapter turns rows into the legacy block (:class:`CompletionLogprobs`) or the chat ``content``
list (:func:`chat_content`). ``openai_http`` uses :func:`merge_logprobs` to join streamed
pieces. Pure: numpy and dicts in, dicts out.

A logprob is the log-softmax of the model's raw logits at the position before the token:
sampling settings (temperature, top_p, top_k) do not change it, as in vLLM's default
``raw_logprobs`` mode and the OpenAI API. The first prompt token has none (``null``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.token_text import byte_level_pieces

MAX_COMPLETION_LOGPROBS = 5  # /v1/completions ``logprobs`` (OpenAI's limit)
MAX_TOP_LOGPROBS = 20  # /v1/chat/completions ``top_logprobs`` (OpenAI's limit)
_FLOOR = -9999.0  # JSON has no -inf; vLLM clamps to the same value


@dataclass(frozen=True, slots=True)
class TokenScore:
    """One position: its token, the token's logprob (None: not scored) and the best alternatives."""

    token: int
    logprob: float | None
    top: tuple[tuple[int, float], ...] = ()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (stable: the row max is subtracted first)."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return result


def score_rows(logits: np.ndarray, tokens: Sequence[int], top: int) -> list[TokenScore]:
    """``tokens[j]`` scored by ``logits[j]`` (shape ``(len(tokens), vocab)``), with ``top`` alternatives."""
    if len(tokens) == 0:
        return []
    scores = np.maximum(log_softmax(logits), _FLOOR)
    rows = np.arange(len(tokens))
    chosen = scores[rows, np.asarray(tokens)].tolist()
    top = min(top, scores.shape[-1])
    if top <= 0:
        return [TokenScore(int(t), lp) for t, lp in zip(tokens, chosen, strict=True)]
    best = np.argpartition(-scores, top - 1, axis=-1)[:, :top]
    best_scores = np.take_along_axis(scores, best, axis=-1)
    order = np.argsort(-best_scores, axis=-1, kind="stable")
    best = np.take_along_axis(best, order, axis=-1).tolist()
    best_scores = np.take_along_axis(best_scores, order, axis=-1).tolist()
    return [
        TokenScore(int(t), lp, tuple(zip(ids, lps, strict=True)))
        for t, lp, ids, lps in zip(tokens, chosen, best, best_scores, strict=True)
    ]


def prompt_scores(logits: np.ndarray, ids: Sequence[int], top: int) -> list[TokenScore]:
    """Every prompt token scored: ``logits[j]`` is the model's output at ``ids[j]`` (shape
    ``(len(ids), vocab)`` or longer); the first token has no score (nothing precedes it)."""
    if len(ids) == 0:
        return []
    return [TokenScore(int(ids[0]), None), *score_rows(logits[: len(ids) - 1], ids[1:], top)]


def without_leading(scores: list[TokenScore]) -> list[TokenScore]:
    """Drop a prefix token the client did not send (the BOS the engine adds to a text prompt):
    the next token becomes the first, unscored, as the OpenAI API reports a prompt."""
    if len(scores) < 2:
        return []
    return [TokenScore(scores[1].token, None), *scores[2:]]


# ---- token strings ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenTable:
    """Per token id: the string the API shows (``token``) and its raw bytes (chat's ``bytes``).

    A byte-level BPE token may hold part of a UTF-8 character: its string is then U+FFFD (what
    the tokenizer decodes for that token alone, as in vLLM), while its bytes are the true ones,
    so a client can join consecutive tokens' bytes back into the character.
    """

    strings: tuple[str, ...]
    raw: tuple[bytes, ...]

    def text(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` joined (special tokens spelled out), as ``tokenizer.decode`` gives it."""
        return b"".join(self.raw[i] for i in ids).decode("utf-8", errors="replace")


def token_table(tokenizer_json: dict[str, Any], vocab_size: int, decode: Callable[[int], str]) -> TokenTable:
    """Build the table from a ``tokenizer.json``; ``decode`` (one id → text) covers tokenizers that
    are not byte-level. Added tokens (``<s>``, ``</s>``…) are spelled as their content."""
    pieces = byte_level_pieces(tokenizer_json)
    added = {int(t["id"]): str(t["content"]) for t in tokenizer_json.get("added_tokens") or []}
    raw: list[bytes] = []
    for index in range(vocab_size):
        if index in added:
            raw.append(added[index].encode())
        elif index in pieces:
            raw.append(pieces[index])
        else:
            raw.append(decode(index).encode())
    strings = tuple(piece.decode("utf-8", errors="replace") for piece in raw)
    return TokenTable(strings, tuple(raw))


# ---- the OpenAI shapes -----------------------------------------------------------------------


class CompletionLogprobs:
    """Writes the legacy ``/v1/completions`` block, one piece per response or stream chunk.

    ``top_logprobs`` maps the token itself and the ``top`` likeliest ones to their logprobs (so
    up to top+1 entries, as the OpenAI API and vLLM return); ``text_offset`` counts characters
    of the token strings from the start of the choice's text, across a stream's chunks.
    """

    def __init__(self, table: TokenTable, offset: int = 0) -> None:
        self._table = table
        self.offset = offset

    def block(self, scores: Sequence[TokenScore]) -> dict[str, Any]:
        strings = self._table.strings
        tokens: list[str] = []
        token_logprobs: list[float | None] = []
        top_logprobs: list[dict[str, float] | None] = []
        offsets: list[int] = []
        for score in scores:
            token = strings[score.token]
            tokens.append(token)
            token_logprobs.append(score.logprob)
            if score.logprob is None:
                top_logprobs.append(None)
            else:
                alternatives = {token: score.logprob}
                for alternative, logprob in score.top:
                    alternatives.setdefault(strings[alternative], logprob)
                top_logprobs.append(alternatives)
            offsets.append(self.offset)
            self.offset += len(token)
        return {
            "tokens": tokens,
            "token_logprobs": token_logprobs,
            "top_logprobs": top_logprobs,
            "text_offset": offsets,
        }


def chat_content(scores: Sequence[TokenScore], table: TokenTable, top: int) -> dict[str, Any]:
    """The chat block ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}``."""

    def entry(token: int, logprob: float) -> dict[str, Any]:
        return {"token": table.strings[token], "logprob": logprob, "bytes": list(table.raw[token])}

    content = []
    for score in scores:
        if score.logprob is None:
            continue
        item = entry(score.token, score.logprob)
        item["top_logprobs"] = [entry(t, lp) for t, lp in score.top[:top]]
        content.append(item)
    return {"content": content}


def merge_logprobs(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """Join two consecutive logprobs blocks of one choice (legacy lists or chat ``content``)."""
    if first is None or second is None:
        return first if second is None else second
    merged: dict[str, Any] = {}
    for key in [*first, *(k for k in second if k not in first)]:
        a, b = first.get(key), second.get(key)
        if isinstance(a, list) and isinstance(b, list):
            merged[key] = a + b
        else:
            merged[key] = b if a is None else a
    return merged
