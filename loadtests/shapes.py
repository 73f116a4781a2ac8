"""Request shapes for load tests: prompt and output lengths drawn from a distribution.

Pure (randomness passed in); used by the locustfile on every simulated request. A shape is
``fixed`` (always the same), ``uniform`` (each length drawn between bounds) or ``trace`` (the
(prompt_tokens, max_tokens) pairs of a JSONL file of real request shapes, drawn at random).
Prompts are built from words that are one token each to the project's model (and to common
tokenizers: short English words after a space), so ``--prompt-tokens 8`` sends 8 tokens of
text; the chat template and BOS come on top. The server's own count is in each run's summary.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# Each one token after a space (" runs" was four: r-u-n-s, so 500 words were ~620 tokens).
WORDS = ("the", "red", "cat", "sees", "a", "big", "dog", "and", "the", "small", "bird", "walks")
FIRST_WORDS = ("the", "a")  # one token with no space before them too


class ShapeError(ValueError):
    """A shape specification or trace file that cannot be used; the message says where."""


@dataclass(frozen=True, slots=True)
class RequestShape:
    kind: Literal["fixed", "uniform", "trace"] = "fixed"
    prompt_tokens: tuple[int, int] = (8, 8)  # fixed uses the first; uniform draws in [lo, hi]
    max_tokens: tuple[int, int] = (16, 16)
    trace: tuple[tuple[int, int], ...] = ()

    def draw(self, rng: random.Random) -> tuple[int, int]:
        """(prompt length in words, max_tokens) for one request."""
        if self.kind == "trace":
            return rng.choice(self.trace)
        if self.kind == "uniform":
            return rng.randint(*self.prompt_tokens), rng.randint(*self.max_tokens)
        return self.prompt_tokens[0], self.max_tokens[0]


def prompt_of(words: int, rng: random.Random) -> str:
    return " ".join([rng.choice(FIRST_WORDS), *(rng.choice(WORDS) for _ in range(max(1, words) - 1))])


def _bounds(text: str, what: str, least: int) -> tuple[int, int]:
    try:
        parts = [int(part) for part in text.split("-")]
    except ValueError:
        raise ShapeError(f"{what}: expected N or LO-HI, got {text!r}") from None
    if len(parts) not in (1, 2) or min(parts) < least or parts[0] > parts[-1]:
        raise ShapeError(f"{what}: expected N or LO-HI with {least} <= LO <= HI, got {text!r}")
    return parts[0], parts[-1]


def load_trace(path: Path) -> tuple[tuple[int, int], ...]:
    """JSONL lines ``{"prompt_tokens": int, "max_tokens": int}``, held to the flags' rules
    (``prompt_tokens`` >= 0, ``max_tokens`` >= 1, whole numbers); errors name the line."""
    try:
        # "\n" alone ends a line: str.splitlines also cuts at U+2028 and the like, which a JSON
        # string in a recorded trace (a prompt's text, say) may hold as they are.
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ShapeError(f"--trace {path}: cannot read it ({exc})") from None
    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt, output = row["prompt_tokens"], row["max_tokens"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ShapeError(f"{path}:{number}: expected prompt_tokens and max_tokens ({exc})") from None
        whole = []
        for what, value, least in (("prompt_tokens", prompt, 0), ("max_tokens", output, 1)):
            # max_tokens 0 was a 400 on every request of the run, as the flag refuses it up front;
            # 128.0 is whole (pandas writes a column with a gap in it so), 2.5 and true are not
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ShapeError(f"{path}:{number}: {what} must be a whole number >= {least}, got {value!r}")
            whole.append(value)
        pairs.append((whole[0], whole[1]))
    if not pairs:
        raise ShapeError(f"{path}: no request shapes")
    return tuple(pairs)


def parse_shape(prompt: str, output: str, trace: Path | None = None) -> RequestShape:
    """``--prompt-tokens 8`` / ``4-32``, ``--max-tokens 16`` / ``8-64``, or ``--trace FILE``."""
    if trace is not None:
        return RequestShape(kind="trace", trace=load_trace(trace))
    # An empty prompt is a shape; max_tokens 0 is a 400 on every request, not a load test.
    prompt_bounds, output_bounds = _bounds(prompt, "prompt tokens", 0), _bounds(output, "max tokens", 1)
    uniform = prompt_bounds[0] != prompt_bounds[1] or output_bounds[0] != output_bounds[1]
    return RequestShape("uniform" if uniform else "fixed", prompt_bounds, output_bounds)
