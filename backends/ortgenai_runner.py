"""The embedded engine's compute: one ONNX Runtime GenAI model and its batch decode loop.

Its decode steps run on the dynamic batcher's worker thread, never on the event loop. It
takes a batch of compatible sequences (same sampling settings), right-pads their prompts and
decodes step by step; each step's tokens go to the sequences' event loop in one call, where
they become text and events (:meth:`GenAIModel.advance_rows`) while the worker computes the
next step. A sequence stops on EOS, a stop sequence, its own ``max_tokens`` or cancellation,
and the batch ends when all have. The library is called through its C API
(:mod:`backends.ortgenai_capi`), which lets the event loop run while a step computes; each
token's text comes from a table of token bytes (:mod:`backends.token_text`) where the
tokenizer is byte-level, the library's stream otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from backends import ortgenai_capi
from backends.base import SamplingParams
from backends.logprobs import TokenScore, TokenTable, prompt_scores, score_rows, token_table
from backends.stop_scanner import StopScanner
from backends.token_text import TextStream, TokenText

Event = tuple[str, str | None, int]
_SEED_RANGE = 2**31  # ONNX Runtime GenAI's random_seed is an int32
# Decode steps the worker may run ahead of an event loop's text work. A lone stream's loop
# (its SSE writes, its wake-ups) is slower than the worker's steps and catches up by handling
# several steps at a wake-up: a bound of 2 cost it ~15% of its tokens/s here, 32 stayed within
# this VM's noise of no bound. Whatever the loop's stalls, a row a stop sequence ended costs at
# most this many extra steps (~2 ms at batch size 1, ~13 ms at 16), not a run to max_tokens.
STEPS_AHEAD = 32
_NAP_S = 50e-6

log = logging.getLogger("turnout.embedded")


class PromptTooLong(ValueError):
    """Text that cannot fit the context, known before it is all encoded."""


@dataclass(slots=True)
class Sequence:
    """One request's decode state inside a batch.

    Once its batch begins, its text and finish change only on ``loop`` (the worker reads
    ``finished`` and ``cancel_requested`` to know when the batch is over)."""

    prompt_ids: np.ndarray
    params: SamplingParams
    max_new_tokens: int
    loop: asyncio.AbstractEventLoop
    # Runs on ``loop`` with each event: (text delta, finish_reason on the last one, tokens so far).
    receive: Callable[[Event], None]
    scanner: StopScanner = field(init=False)
    enqueued_at: float = 0.0
    queued: bool = False  # in the batcher's queue depth (backends.dynamic_batcher)
    generated: int = 0
    finished: bool = False
    cancel_requested: bool = False
    decoder: TextStream | None = None
    # Tokens the worker decoded for it in earlier batches, whose padding cut it short: they are
    # in ``prompt_ids`` now, and it goes on in a batch of its own (see ``run_batch``).
    resumed: int = 0

    def __post_init__(self) -> None:
        self.scanner = StopScanner(self.params.stop)

    @property
    def batch_key(self) -> tuple[Any, ...] | None:
        p = self.params
        if p.greedy:
            return ("greedy", p.ignore_eos)
        if p.seed is not None:
            return None  # a seeded sample must not depend on its batch mates
        return ("sample", p.temperature, p.top_p, p.top_k, p.ignore_eos)

    @property
    def cancelled(self) -> bool:
        return self.cancel_requested

    def emit(self, text: str, finish: str | None, generated: int) -> None:
        """Hand an event to the consumer (on ``loop``)."""
        self.receive((text, finish, generated))

    def fail(self, error: BaseException) -> None:
        """The batch raised (any thread): an error event, after the tokens already sent."""
        self.loop.call_soon_threadsafe(self._fail_unless_finished)

    def _fail_unless_finished(self) -> None:
        if not self.finished:
            self.end_with_error()

    def end_with_error(self) -> None:
        """End with an error event now (on ``loop``), whatever this sequence sent before."""
        self.finished = True
        self.emit("", "error", self.generated)

    def finish(self, reason: str) -> None:
        if not self.finished:
            self.finished = True
            self.emit(self.scanner.flush(), reason, self.generated)


@dataclass(slots=True)
class ScoredSequence(Sequence):
    """A :class:`Sequence` that also scores its tokens (the request asked for logprobs).

    Each emitted event has its list of :class:`TokenScore` (the tokens decoded since the last
    event, EOS included) in ``scores``, in event order: the consumer takes one list per event.
    With ``score_prompt`` the prompt's tokens are scored from the same prompt pass and set in
    ``prompt_scores`` before the first event. Plain sequences pay nothing for this.
    """

    top: int = 0
    score_prompt: bool = False
    pending: list[TokenScore] = field(default_factory=list)
    scores: deque[list[TokenScore]] = field(default_factory=deque)
    prompt_scores: list[TokenScore] | None = None

    def emit(self, text: str, finish: str | None, generated: int) -> None:
        self.scores.append(self.pending)
        self.pending = []
        Sequence.emit(self, text, finish, generated)  # (slots dataclasses cannot use bare super())


Rows = list[tuple[int, Sequence]]  # (row in the batch, sequence) of one event loop


class _Handoff:
    """Keeps the worker at most :data:`STEPS_AHEAD` steps ahead of each of its batch's loops.

    A loop calls ``done(loop)`` once it has handled a step (a count of its own: no wake-up to
    pay on the loop, where a cross-thread wake-up per token cost a lone stream ~15% of its
    tokens/s here); the worker, further ahead than that, sleeps in short naps until it catches
    up, but never waits for a loop that is not running (a script driving ``run_batch``
    itself, or a shutdown)."""

    def __init__(self, loops: list[asyncio.AbstractEventLoop]) -> None:
        self._handled = dict.fromkeys(loops, 0)  # each loop adds to its own count only
        self._posted = 0  # steps posted to every loop

    def done(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handled[loop] += 1

    def wait_for_loops(self) -> None:
        self._posted += 1
        for loop, handled in self._handled.items():
            while self._posted - handled > STEPS_AHEAD and loop.is_running():
                time.sleep(_NAP_S)
                handled = self._handled[loop]


def _rows_by_loop(sequences: list[Sequence]) -> dict[asyncio.AbstractEventLoop, Rows]:
    by_loop: dict[asyncio.AbstractEventLoop, Rows] = {}
    for row, seq in enumerate(sequences):
        by_loop.setdefault(seq.loop, []).append((row, seq))
    return by_loop


def _finish_rows(rows: Rows, reason: str) -> None:
    """Rows still going end with ``reason`` (on their event loop, after their last tokens)."""
    for _, seq in rows:
        seq.finish(reason)


def _post_finish(sequences: list[Sequence], reason: str) -> None:
    for loop, rows in _rows_by_loop(sequences).items():
        loop.call_soon_threadsafe(_finish_rows, rows, reason)


class GenAIModel:
    """A loaded ONNX Runtime GenAI model folder: weights, tokenizer and chat template."""

    def __init__(self, folder: Path, intra_op_threads: int = 1, max_model_len: int | None = None) -> None:
        if not (folder / "genai_config.json").is_file():
            raise FileNotFoundError(f"{folder} has no genai_config.json (run `turnout model build`)")
        self.folder = folder
        genai_config = _read_json(folder / "genai_config.json")
        model_section = genai_config["model"]
        # The longest sequence, prompt and answer: the model's context, or less if the deployment
        # says so (a spec's kv_cache.max_model_len, as vLLM's --max-model-len).
        self.context_length = int(model_section["context_length"])
        if max_model_len is not None:
            self.context_length = min(self.context_length, max_model_len)
        self.bos_id = int(model_section["bos_token_id"])
        self.pad_id = int(model_section["pad_token_id"])
        self.vocab_size = int(model_section["vocab_size"])
        eos = model_section["eos_token_id"]
        self.eos_ids = frozenset(eos if isinstance(eos, list) else [eos])
        search = genai_config.get("search", {})
        # The model's own default when a request sets no temperature (as its generation config says).
        self.default_temperature = float(search.get("temperature", 1.0)) if search.get("do_sample") else 0.0
        overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": intra_op_threads}}}}
        self.model = ortgenai_capi.Model(folder, overlay if intra_op_threads else None)
        self.generated_tokens = 0  # written by the worker thread only
        tokenizer_config = _read_json(folder / "tokenizer_config.json")
        self.chat_template: str | None = tokenizer_config.get("chat_template")
        self.bos_token: str = tokenizer_config.get("bos_token", "")
        self.eos_token: str = tokenizer_config.get("eos_token", "")
        self._token_table: TokenTable | None = None
        tokenizer_path = folder / "tokenizer.json"
        self._tokenizer_json = _read_json(tokenizer_path) if tokenizer_path.is_file() else {}
        # Each token's text from a table where the tokenizer allows it (backends.token_text).
        self._token_text = TokenText.from_tokenizer_json(self._tokenizer_json, self.vocab_size)
        # The library takes text as a C string, which ends at a NUL: text after one was dropped
        # (in chat, the template's own turn markers and every later message with it).
        pieces = self._token_text.pieces if self._token_text is not None else ()
        self._nul_id = next((i for i, piece in enumerate(pieces) if piece == b"\x00"), None)

    def prompt_ids(self, given: str | list[int] | tuple[int, ...]) -> np.ndarray:
        """The ids the model reads for a prompt (a completion's, an embedding input's): a text gets
        BOS first; token ids are taken as sent (no BOS, as vLLM takes them), each checked against
        the vocabulary. ValueError (:class:`PromptTooLong` among them) when it cannot be read."""
        if isinstance(given, str):
            return np.concatenate([np.array([self.bos_id], dtype=np.int32), self.encode(given)])
        if not given or min(given) < 0 or max(given) >= self.vocab_size:
            raise ValueError(f"token ids need at least one id, each from 0 to {self.vocab_size - 1}")
        return np.asarray(given, dtype=np.int32)

    def encode(self, text: str) -> np.ndarray:
        """The token ids of ``text`` (no BOS). A NUL character is its own byte token between the
        encoded parts around it, as a byte-level BPE with no merge across it reads the text
        whole; a tokenizer without such a token cannot take it (ValueError)."""
        if "\x00" not in text:
            return self.model.encode(text)
        if self._nul_id is None:
            raise ValueError(
                "the text holds a NUL character (U+0000), which this model's tokenizer cannot read"
            )
        nuls = text.count("\x00")
        if nuls >= self.context_length:  # one library call per part: a NUL-strewn megabyte took seconds
            raise PromptTooLong(
                f"This model's maximum context length is {self.context_length} tokens; the text holds "
                f"{nuls} NUL characters, a token each, so it cannot fit."
            )
        nul = np.array([self._nul_id], dtype=np.int32)
        parts: list[np.ndarray] = []
        for index, part in enumerate(text.split("\x00")):
            if index:
                parts.append(nul)
            if part:
                parts.append(self.model.encode(part))
        return np.concatenate(parts)

    def decode(self, ids: np.ndarray) -> str:
        return self.model.decode(ids)

    def decode_token(self, token: int) -> str:
        return self.model.decode(np.array([token], dtype=np.int32))

    def text_stream(self) -> TextStream:
        """A new sequence's detokenizer: the token table's, else the library's own stream."""
        return self._token_text.stream() if self._token_text is not None else self.model.stream()

    @property
    def token_table(self) -> TokenTable:
        """Each token's string and bytes for logprobs (built on first use, on the event loop)."""
        if self._token_table is None:
            self._token_table = token_table(self._tokenizer_json, self.vocab_size, self.decode_token)
        return self._token_table

    def prompt_logits(self, ids: np.ndarray) -> np.ndarray:
        """Raw logits at every position of ``ids`` (BOS first): shape (len(ids), vocab).

        One forward pass on a generator of its own (any thread; ONNX Runtime sessions run
        concurrently), outside the batcher: scoring generates nothing.
        """
        length = min(self.context_length, len(ids) + 1)
        generator = ortgenai_capi.Generator(self.model, {"max_length": length})
        try:
            generator.append_tokens(ids.reshape(1, -1))
            logits: np.ndarray = generator.output("logits")[0]
        finally:
            generator.close()
        return logits

    def run_batch(self, batch: list[Sequence]) -> None:
        """Decode ``batch`` to completion (worker thread).

        Prompts are right-padded to the longest, so a row shares the batch's room in the
        context: a short prompt with a long ``max_tokens`` beside a long prompt would end at
        the context before it could alone. Such rows go on, once the batch ends, in a batch of
        their own with their tokens so far as prompt, so they get as many tokens as alone. (The
        text goes on from the same tokens; int8's prompt pass rounds unlike its decode steps, so
        a greedy int8 answer can drift a little after the cut: at char 1,669 of 2,009 once.)"""
        live = [s for s in batch if not s.cancel_requested]
        if len(live) < len(batch):
            _post_finish([s for s in batch if s.cancel_requested], "cancelled")
        while live:
            live = self._run_rows(live)

    def _run_rows(self, live: list[Sequence]) -> list[Sequence]:
        """One batch of ``live``; returns the rows its padding cut short (they go on)."""
        padded_len = max(len(s.prompt_ids) for s in live)
        budget = max(s.max_new_tokens - s.resumed for s in live)
        options: dict[str, float | bool] = {
            "max_length": min(self.context_length, padded_len + budget),
            "batch_size": len(live),
        }
        first = live[0].params
        if first.greedy:
            options["do_sample"] = False
        else:
            options.update(do_sample=True, temperature=float(first.temperature or 1.0))
            if first.top_p is not None:
                options["top_p"] = float(first.top_p)
            # Past the vocabulary, or unset (the library's default is 50), means every token, as
            # vLLM and OpenAI read it.
            top_k = self.vocab_size if first.top_k is None else min(int(first.top_k), self.vocab_size)
            options["top_k"] = top_k
            # The library's seed is an int32: a 64-bit one is folded in (seeds below 2**31 unchanged).
            # Unseeded, the binding draws one (backends.ortgenai_capi.Generator).
            if first.seed is not None:
                options["random_seed"] = first.seed % _SEED_RANGE
        if first.ignore_eos:
            options["min_length"] = options["max_length"]
        generator = ortgenai_capi.Generator(self.model, options)
        try:
            cut = self._decode(generator, live, padded_len, int(options["max_length"]))
        finally:
            generator.close()
        # The rest end: the context length or the library's EOS stopped them.
        _post_finish([s for s in live if not any(s is c for c in cut)], "length")
        return cut

    def _decode(
        self, generator: ortgenai_capi.Generator, live: list[Sequence], padded_len: int, max_length: int
    ) -> list[Sequence]:
        """The decode steps (worker thread). Each step's tokens go to the sequences' event loop
        in one call, where :meth:`advance_rows` turns them into text and events while this
        thread computes the next step, so a batch's text work does not wait in line with its
        compute. The batch ends once every row is known to be over: EOS and ``max_tokens`` the
        worker sees itself, a cancellation at once, a stop sequence once its loop has seen it
        (a step or so later; the extra tokens are dropped). Returns the rows the batch's padding
        cut short, their tokens so far appended to their prompts."""
        tokens = np.full((len(live), padded_len), self.pad_id, dtype=np.int32)
        for row, seq in enumerate(live):
            tokens[row, : len(seq.prompt_ids)] = seq.prompt_ids
            if seq.decoder is None:
                seq.decoder = self.text_stream()
        generator.append_tokens(tokens)
        # Rows that alone would have more room than beside the longest prompt: their tokens are
        # kept, in case the batch's end cuts them short.
        made: dict[int, list[int]] = {
            row: []
            for row, seq in enumerate(live)
            if padded_len + seq.max_new_tokens - seq.resumed > max_length
        }
        scored = [(row, seq) for row, seq in enumerate(live) if isinstance(seq, ScoredSequence)]
        by_loop = _rows_by_loop(live)
        handed = _Handoff(list(by_loop))
        done = {loop: partial(handed.done, loop) for loop in by_loop}
        going = list(enumerate(live))
        eos_ids = self.eos_ids
        step = 0
        while going and not generator.is_done():
            generator.generate_next_token()
            next_tokens = generator.next_tokens()
            scores = None
            if scored:  # only batches with a logprobs request look at the logits
                scores = _score_step(generator.output("logits"), scored, next_tokens, step == 0)
            step += 1
            for loop, rows in by_loop.items():
                loop.call_soon_threadsafe(self.advance_rows, rows, next_tokens, scores, done[loop])
            handed.wait_for_loops()
            for row, kept in made.items():
                kept.append(next_tokens[row])
            going = [
                (row, seq)
                for row, seq in going
                if not (
                    seq.finished
                    or seq.cancel_requested
                    or seq.resumed + step >= seq.max_new_tokens
                    or (next_tokens[row] in eos_ids and not seq.params.ignore_eos)
                )
            ]
        cut = []
        for row, seq in going:
            if row in made and len(seq.prompt_ids) + step < self.context_length:
                seq.prompt_ids = np.concatenate([seq.prompt_ids, np.asarray(made[row], dtype=np.int32)])
                seq.resumed += step
                cut.append(seq)
        return cut

    def advance_rows(
        self,
        rows: Rows,
        tokens: list[int],
        scores: dict[int, TokenScore] | None,
        done: Callable[[], None] = lambda: None,
    ) -> None:
        """One decode step's tokens into each row's text and events (on the rows' event loop);
        ``done`` tells the worker this step is handled. A row whose text or consumer raises
        ends with an error event; the others go on."""
        try:
            for row, seq in rows:
                if seq.finished:
                    continue
                try:
                    if scores is not None and isinstance(seq, ScoredSequence) and row in scores:
                        seq.pending.append(scores[row])
                    if seq.cancel_requested:
                        seq.finish("cancelled")
                    else:
                        self._advance(seq, tokens[row])
                except Exception:
                    log.exception("row %d of a batch failed while its token became text", row)
                    with contextlib.suppress(Exception):  # if its consumer raised, it hears nothing more
                        seq.end_with_error()
        finally:
            done()

    def _advance(self, seq: Sequence, token: int) -> None:
        seq.generated += 1  # the end token too: vLLM counts it in usage, and logprobs list it
        self.generated_tokens += 1
        if token in self.eos_ids and not seq.params.ignore_eos:
            seq.finish("stop")
            return
        assert seq.decoder is not None  # set when the batch starts
        text = seq.scanner.feed(seq.decoder.decode(token))
        if text:
            seq.emit(text, None, seq.generated)
        if seq.scanner.stopped:
            seq.finish("stop")
        elif seq.generated >= seq.max_new_tokens:
            seq.finish("length")


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON file read as UTF-8 bytes, whatever the locale (Triton's Python stub runs in ASCII)."""
    data: dict[str, Any] = json.loads(path.read_bytes())
    return data


def _score_step(
    logits: np.ndarray, scored: list[tuple[int, ScoredSequence]], next_tokens: list[int], first_step: bool
) -> dict[int, TokenScore]:
    """Score this step's tokens of the rows that asked (worker thread), all rows at once; the
    event loop adds each row's score to its sequence with the step's token.

    ``logits`` is what the generator sampled from: on the first step the prompt pass, shape
    (batch, padded prompt, vocab), each row's distribution at its last prompt token (prompts
    are right-padded, so a row's positions before its own length are exact); afterwards
    (batch, 1, vocab).
    """
    live = [(row, seq) for row, seq in scored if not seq.finished]
    if not live:
        return {}
    positions = [min(len(seq.prompt_ids), logits.shape[1]) - 1 for _, seq in live]
    rows = [row for row, _ in live]
    top = max(seq.top for _, seq in live)
    step = score_rows(logits[rows, positions], [next_tokens[row] for row in rows], top)
    found: dict[int, TokenScore] = {}
    for (row, seq), score in zip(live, step, strict=True):
        if first_step and seq.score_prompt and not seq.resumed:
            prompt = seq.prompt_ids.tolist()
            seq.prompt_scores = prompt_scores(logits[row, : len(prompt)], prompt, seq.top)
        found[row] = score if seq.top == top else TokenScore(score.token, score.logprob, score.top[: seq.top])
    return found
