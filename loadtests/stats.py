"""Load-test figures from per-request records: percentiles, per-variant stats, the knee.

Pure: the locustfile writes one record per request (``records.jsonl``); the runner and the
ramp shape turn them into the ``summary.json`` figures here (contract
``turnout.loadtest/1``). Percentiles are nearest-rank on the sorted values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any


@dataclass(frozen=True, slots=True)
class Record:
    """One request as the simulated user saw it (times in ms, ``t`` in s since the run began)."""

    t: float
    variant: str
    status: int
    error: str | None  # None, "http_<status>", "stream_error", "timeout", "connection", "bad_response"
    latency_ms: float
    ttft_ms: float | None
    itl_ms: float | None
    output_tokens: int
    tokens_estimated: bool = False  # a stream without usage: its content chunks counted instead
    detail: str | None = None  # what the failure said: the error body's message, the exception
    prompt_tokens: int | None = None  # as the server counted them (its usage): BOS, chat template included

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Record:
        return cls(
            t=float(row["t"]),
            variant=str(row.get("variant") or "?"),
            status=int(row["status"]),
            error=row.get("error"),
            latency_ms=float(row["latency_ms"]),
            ttft_ms=None if row.get("ttft_ms") is None else float(row["ttft_ms"]),
            itl_ms=None if row.get("itl_ms") is None else float(row["itl_ms"]),
            output_tokens=int(row.get("output_tokens") or 0),
            tokens_estimated=bool(row.get("tokens_estimated")),
            detail=None if row.get("detail") is None else str(row["detail"]),
            prompt_tokens=None if row.get("prompt_tokens") is None else int(row["prompt_tokens"]),
        )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank: the smallest value with at least ``q`` of the values at or below it, the
    ``ceil(q * n)``-th (0.07 * 100 is 7.000000000000001 in floating point: that is rank 7)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered) - 1e-9)
    return ordered[min(len(ordered), max(1, rank)) - 1]


def pct(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 0.50),
        "p90": percentile(values, 0.90),
        "p95": percentile(values, 0.95),
        "p99": percentile(values, 0.99),
        "mean": sum(values) / len(values) if values else None,
    }


def stats(records: Sequence[Record], seconds: float) -> dict[str, Any]:
    """The STATS block of summary.json for ``records`` over ``seconds`` of load."""
    ok = [r for r in records if r.error is None]
    kinds: dict[str, int] = {}
    examples: dict[str, str] = {}  # each kind's first detail: why a run's 400s were 400s
    for record in records:
        if record.error is not None:
            kinds[record.error] = kinds.get(record.error, 0) + 1
            if record.detail and record.error not in examples:
                examples[record.error] = record.detail
    tokens = sum(r.output_tokens for r in ok)
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    per_request = [
        r.output_tokens / (r.latency_ms / 1000) for r in ok if r.output_tokens and r.latency_ms > 0
    ]
    return {
        "requests": len(records),
        "errors": len(records) - len(ok),
        "errors_by_kind": kinds,
        "error_examples": examples,
        "req_per_s": len(ok) / seconds if seconds > 0 else 0.0,
        "output_tokens": tokens,
        # mean prompt tokens of the answers that said (usage), None when none did
        "prompt_tokens_mean": sum(prompts) / len(prompts) if prompts else None,
        # successful requests whose tokens were counted as content chunks (the stream had no usage)
        "output_tokens_estimated": sum(r.tokens_estimated for r in ok),
        "output_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        # the prompt tokens the server counted, per second: an embeddings run's throughput
        "prompt_tokens_per_s": sum(prompts) / seconds if seconds > 0 else 0.0,
        "ttft_ms": pct([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        "itl_ms": pct([r.itl_ms for r in ok if r.itl_ms is not None]),
        "latency_ms": pct([r.latency_ms for r in ok]),
        "request_tokens_per_s": pct(per_request),
    }


def per_variant(records: Sequence[Record], seconds: float) -> dict[str, dict[str, Any]]:
    variants = sorted({r.variant for r in records})
    return {name: stats([r for r in records if r.variant == name], seconds) for name in variants}


@dataclass(frozen=True, slots=True)
class Slo:
    p95_ttft_ms: float
    max_error_rate: float


def step_figures(records: Iterable[Record], users: int, seconds: float, slo: Slo) -> dict[str, Any]:
    """One ramp step: its rate, p95 TTFT (latency when not streaming), error rate and verdict."""
    chosen = list(records)
    ok = [r for r in chosen if r.error is None]
    first = [r.ttft_ms if r.ttft_ms is not None else r.latency_ms for r in ok]
    p95 = percentile(first, 0.95)
    error_rate = (len(chosen) - len(ok)) / len(chosen) if chosen else 1.0
    holds = bool(chosen) and p95 is not None and p95 <= slo.p95_ttft_ms and error_rate <= slo.max_error_rate
    return {
        "users": users,
        "req_per_s": len(ok) / seconds if seconds > 0 else 0.0,
        "p95_ttft_ms": p95,
        "error_rate": error_rate,
        "ok": holds,
    }


def knee(steps: Sequence[dict[str, Any]], slo: Slo) -> dict[str, Any]:
    """The highest rate of a step that held the SLO, with every step measured before it broke."""
    best = max((step["req_per_s"] for step in steps if step["ok"]), default=0.0)
    return {
        "max_sustainable_rps": best,
        "slo": {"p95_ttft_ms": slo.p95_ttft_ms, "max_error_rate": slo.max_error_rate},
        "steps": list(steps),
    }


def failure_kind(error: object) -> str:
    """What went wrong with a request that got no usable answer: "timeout" when it waited out
    --timeout (a slow gateway must not read as a down one), "connection" when the connection was
    refused, reset or closed (the gateway went away: users back off, the run fails), else
    "bad_response" (an answer that is not the JSON or SSE it should be)."""
    timed_out = "timeout" in type(error).__name__.lower() or "timed out" in str(error).lower()
    if timed_out:
        return "timeout"
    if isinstance(error, OSError | HTTPException):  # refused, reset, closed mid-answer
        return "connection"
    return "bad_response"


def error_detail(answer: object, limit: int = 300) -> str | None:
    """What an error answer said: the OpenAI error body's (or SSE error event's) message, else the
    start of the body as text; None when it said nothing."""
    if isinstance(answer, bytes | bytearray):
        text = bytes(answer).decode("utf-8", "replace")
        try:
            answer = json.loads(text)
        except ValueError:
            answer = text
    if isinstance(answer, dict):
        error = answer.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        answer = message if isinstance(message, str) else json.dumps(answer)
    text = " ".join(str(answer or "").split())
    return text[:limit] or None


def truncated(received: int, content_length: str | None) -> bool:
    """A whole answer shorter than its Content-Length: the connection closed mid-answer (the
    client library hands back what arrived, no error), a ``connection`` failure, not a malformed
    answer."""
    return content_length is not None and content_length.isdigit() and received < int(content_length)
