"""Batch API objects and rules (pure): a batch's request, its input lines, its object and its
output lines, as OpenAI shapes them.

Where it sits: ``serving.api.batches_route`` checks a ``POST /v1/batches`` (:class:`NewBatch`)
and its input file (:func:`read_input`) and keeps the batch; ``serving.batch_runner`` sends each
line through the gateway as its own request and writes :func:`output_line` /
:func:`unrun_line` into the batch's output and error files; every read shapes
:meth:`BatchRecord.as_dict`. A line's body is checked when it runs, as the same request sent
alone would be: its refusal is that line's answer in the error file, not the batch's failure.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from serving.errors import ClientError, NotFound

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
WINDOWS = {"24h": 86400.0}  # OpenAI's one completion window

VALIDATING, IN_PROGRESS, FINALIZING = "validating", "in_progress", "finalizing"
COMPLETED, FAILED, EXPIRED = "completed", "failed", "expired"
CANCELLING, CANCELLED = "cancelling", "cancelled"
ENDED = frozenset({COMPLETED, FAILED, EXPIRED, CANCELLED})
# The timestamps a batch's object carries, each set when it enters that state.
STATE_TIMES = {
    IN_PROGRESS: "in_progress_at",
    FINALIZING: "finalizing_at",
    COMPLETED: "completed_at",
    FAILED: "failed_at",
    EXPIRED: "expired_at",
    CANCELLING: "cancelling_at",
    CANCELLED: "cancelled_at",
}
STATUSES = (VALIDATING, *STATE_TIMES)  # every status a batch can be in
_MAX_ERRORS = 100  # a failed validation lists at most this many lines' errors
_MAX_RETRY_WAIT_S = 30.0
UNAVAILABLE_TRIES = 8  # sends of a line answered 503 (about 90 s of backoff in all)


class NewBatch(BaseModel):
    """``POST /v1/batches``'s body."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1)
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None

    def check(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise ClientError(
                f"endpoint: {self.endpoint!r} is not supported; a batch sends one of {', '.join(ENDPOINTS)}",
                param="endpoint",
                code="unsupported_value",
            )
        if self.completion_window not in WINDOWS:
            raise ClientError(
                f"completion_window: {self.completion_window!r} is not supported; it must be 24h",
                param="completion_window",
                code="unsupported_value",
            )
        metadata = self.metadata or {}
        if len(metadata) > 16 or any(len(k) > 64 or len(v) > 512 for k, v in metadata.items()):
            raise ClientError(
                "metadata: at most 16 pairs, keys up to 64 characters, values up to 512",
                param="metadata",
            )


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One request of a batch: its place in the input file (from 0), its id and its body (JSON)."""

    index: int
    custom_id: str
    body: str


def read_input(
    content: bytes, endpoint: str, *, max_requests: int, max_body_bytes: int
) -> tuple[list[BatchLine], list[dict[str, Any]]]:
    """The input file's requests, or (when any line is wrong) the errors that fail the batch,
    each naming its line (from 1), as OpenAI's batch ``errors`` list them."""
    lines: list[BatchLine] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()

    def wrong(number: int, code: str, message: str, param: str | None = None) -> None:
        if len(errors) < _MAX_ERRORS:
            errors.append({"code": code, "message": message, "param": param, "line": number})

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return [], [_error("invalid_file", "the input file is not UTF-8 text (JSONL)")]
    # Lines end at "\n" alone: str.splitlines would also cut at U+2028 and the like, which JSON
    # strings may hold as they are.
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            wrong(number, "invalid_json_line", "this line is not a JSON object")
            continue
        if not isinstance(line, dict):
            wrong(number, "invalid_json_line", "this line is not a JSON object")
            continue
        custom_id, method, url, body = (line.get(k) for k in ("custom_id", "method", "url", "body"))
        unknown = sorted(set(line) - {"custom_id", "method", "url", "body"})
        if unknown:
            wrong(number, "invalid_request", f"unknown field {unknown[0]!r}", unknown[0])
        elif not isinstance(custom_id, str) or not custom_id:
            wrong(
                number, "missing_required_parameter", "custom_id: a non-empty string is required", "custom_id"
            )
        elif custom_id in seen:
            wrong(
                number,
                "duplicate_custom_id",
                f"custom_id {custom_id!r} is used by an earlier line",
                "custom_id",
            )
        elif method != "POST":
            wrong(number, "invalid_method", f"method: must be POST, not {method!r}", "method")
        elif url != endpoint:
            wrong(
                number, "mismatched_endpoint", f"url: {url!r} is not this batch's endpoint {endpoint}", "url"
            )
        elif not isinstance(body, dict):
            wrong(number, "missing_required_parameter", "body: a JSON object is required", "body")
        else:
            encoded = orjson.dumps(body)
            if len(encoded) > max_body_bytes:
                wrong(number, "request_too_large", f"body: larger than {max_body_bytes} bytes", "body")
                continue
            seen.add(custom_id)
            lines.append(BatchLine(len(lines), custom_id, encoded.decode()))
    if not errors and not lines:
        errors.append(_error("empty_file", "the input file holds no requests"))
    if not errors and len(lines) > max_requests:
        errors.append(
            _error(
                "too_many_requests",
                f"the input file holds {len(lines)} requests; a batch takes {max_requests}",
            )
        )
    return ([], errors) if errors else (lines, [])


def _error(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "param": None, "line": None}


def model_of(lines: list[BatchLine]) -> str | None:
    """The one model every line names, else None."""
    models = {orjson.loads(line.body).get("model") for line in lines}
    only = models.pop() if len(models) == 1 else None
    return only if isinstance(only, str) else None


@dataclass(frozen=True, slots=True)
class RequestCounts:
    total: int = 0
    completed: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A kept batch as its object shows it (the request counts are read beside it)."""

    batch_id: str
    owner: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: float
    expires_at: float
    metadata: dict[str, str] | None = None
    model: str | None = None
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    times: dict[str, float] = field(default_factory=dict)  # STATE_TIMES' names → when

    def as_dict(self, counts: RequestCounts) -> dict[str, Any]:
        stamps = {name: _seconds(self.times.get(name)) for name in STATE_TIMES.values()}
        return {
            "id": self.batch_id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created_at),
            "expires_at": int(self.expires_at),
            **stamps,
            "request_counts": {"total": counts.total, "completed": counts.completed, "failed": counts.failed},
            "usage": {
                "input_tokens": counts.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": counts.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": counts.input_tokens + counts.output_tokens,
            },
            "metadata": self.metadata,
        }


def _seconds(at: float | None) -> int | None:
    return None if at is None else int(at)


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


def batch_missing(batch_id: str) -> NotFound:
    return NotFound(f"No such Batch object: {batch_id}", param="batch_id", code="batch_not_found")


def is_success(status: int) -> bool:
    return 200 <= status < 300


def usage_of(body: Any) -> tuple[int, int]:
    """A line's answer's (input, output) tokens: chat and completions' prompt and completion
    tokens, the Responses API's input and output ones, embeddings' prompt tokens."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    taken = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    given = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return (taken if isinstance(taken, int) else 0), (given if isinstance(given, int) else 0)


def retry_wait(status: int, retry_after: str | None, attempt: int) -> float | None:
    """How long to wait before sending a line again, or None when its answer is final. A 429
    (a key's rate limit, a full queue) or a 503 (no variant up, the gateway going down) is the
    gateway's state, not the request's fault: the line waits the ``Retry-After`` it was given,
    else a backoff doubling from 0.5 s, at most 30 s. A 429 is sent again until the batch
    expires (a key's limit paces its batch); a 503 ``UNAVAILABLE_TRIES`` times in all, so that
    a variant that stays down fails its lines in minutes rather than holding the batch a day."""
    if status not in (429, 503) or (status == 503 and attempt + 1 >= UNAVAILABLE_TRIES):
        return None
    if retry_after is not None:
        try:
            given = float(retry_after)
        except ValueError:
            given = math.nan
        if math.isfinite(given) and given >= 0:
            return float(min(given, _MAX_RETRY_WAIT_S))
    return min(0.5 * 2.0 ** min(attempt, 16), _MAX_RETRY_WAIT_S)


def output_line(custom_id: str, status: int, request_id: str, body: Any) -> dict[str, Any]:
    """A line of the output file (a 2xx answer) or the error file (any other), named after its
    request's id (unique: ``serving.api.openai_routes._RequestIds``)."""
    return {
        "id": f"batch_req_{request_id or secrets.token_hex(16)}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }


def unrun_line(custom_id: str, code: str, message: str) -> dict[str, Any]:
    """A line of the error file for a request the batch never sent (it expired first)."""
    return {
        "id": f"batch_req_{secrets.token_hex(12)}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
