"""The locustfile ``turnout loadtest`` runs: simulated OpenAI clients, LLM timings, the scenario shape.

Runs inside the locust process the runner starts (``loadtests/runner.py``); configured by the
JSON in ``$TURNOUT_LOADTEST``. Each simulated user (``FastHttpUser``: plain ``HttpUser`` tops
out far lower here) sends chat, completion or Responses API requests, streamed or not, or
embeddings requests (one input each), with prompt and output lengths from the configured shape,
its own stickiness key (``x-turnout-key``) so A/B splits behave as in production, and optionally
a pinned variant header. Per request it records to locust custom entries (request types
``TTFT``, ``ITL``, ``E2E`` in ms, ``TOK/S`` with the output tokens per second in the time
column) and one JSON line in the records file, from which the runner computes the summary
(exact percentiles, per variant).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, LoadTestShape, constant, events, task

from loadtests.scenarios import Scenario, spawn_rate, users_at
from loadtests.shapes import RequestShape, prompt_of
from loadtests.stats import Record, Slo, error_detail, failure_kind, step_figures, truncated

CONFIG: dict[str, Any] = json.loads(os.environ.get("TURNOUT_LOADTEST", "{}"))
SHAPE = RequestShape(
    kind=CONFIG.get("shape", {}).get("kind", "fixed"),
    prompt_tokens=tuple(CONFIG.get("shape", {}).get("prompt_tokens", (8, 8))),  # type: ignore[arg-type]
    max_tokens=tuple(CONFIG.get("shape", {}).get("max_tokens", (16, 16))),  # type: ignore[arg-type]
    trace=tuple(tuple(pair) for pair in CONFIG.get("shape", {}).get("trace", ())),  # type: ignore[misc]
)
RECORDS: list[Record] = []
_USER_NUMBERS = itertools.count()
_started = time.monotonic()
_out = open(CONFIG["records"], "a", buffering=1) if CONFIG.get("records") else None  # noqa: SIM115
# A user whose request got no answer at all (refused, reset: the target is down or restarting)
# waits before its next one, doubling from the first to the most, as an SDK's client retries: a
# closed-loop user with no wait would spin thousands of refusals a second, burning the CPU the
# target comes back on and burying the run's records. Any answer, error statuses too, resets it.
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.05, 1.0


@events.test_start.add_listener
def _on_start(**_: Any) -> None:
    global _started
    _started = time.monotonic()


def _record(row: dict[str, Any]) -> None:
    row["t"] = round(time.monotonic() - _started, 4)
    RECORDS.append(Record.from_json(row))
    if _out is not None:
        _out.write(json.dumps(row) + "\n")


def _count(value: object) -> int | None:
    """A usage count as sent, if it is one (an upstream's odd value must not break the summary)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
}
# A Responses API stream's last event (it sends no [DONE]): the whole answer, with its usage.
_RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete"})


def _usage(answer: dict[str, Any]) -> tuple[int, int | None]:
    """(output tokens, prompt tokens) of a chat/completions usage or a Responses API one."""
    if "output_tokens" in answer or "input_tokens" in answer:
        return int(answer.get("output_tokens", 0)), _count(answer.get("input_tokens"))
    return int(answer.get("completion_tokens", 0)), _count(answer.get("prompt_tokens"))


def _content(event: dict[str, Any], chat: bool) -> str:
    if event.get("type") == "response.output_text.delta":  # a Responses API stream's text
        return str(event.get("delta") or "")
    choices = event.get("choices") or []
    if not choices:
        return ""
    if chat:
        return str((choices[0].get("delta") or {}).get("content") or "")
    return str(choices[0].get("text") or "")


class OpenAIUser(FastHttpUser):
    wait_time = constant(0)  # closed loop: each user sends its next request when the last ends
    network_timeout = float(CONFIG.get("timeout_s", 60))
    connection_timeout = 10.0

    def on_start(self) -> None:
        # Users are numbered in start order, so a run's stickiness keys (and with them its A/B
        # assignment) and its request shapes depend only on the seed.
        number = next(_USER_NUMBERS)
        self.rng = random.Random(f"{CONFIG.get('seed', 0)}-{number}")
        self.sticky = f"user-{CONFIG.get('seed', 0)}-{number}"
        self.backoff_s = 0.0

    def _body(self) -> dict[str, Any]:
        words, max_tokens = SHAPE.draw(self.rng)
        prompt = prompt_of(words, self.rng)
        endpoint = CONFIG.get("endpoint", "chat")
        body: dict[str, Any] = {"model": CONFIG["route"], "user": self.sticky}
        if endpoint == "embeddings":  # whole answers only; its usage counts the input's tokens
            return body | {"input": prompt, "encoding_format": "base64"}  # as the SDK asks
        if endpoint == "responses":  # usage always comes in its last event
            body |= {"input": prompt, "max_output_tokens": max_tokens}
        elif endpoint == "chat":
            body |= {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
        else:
            body |= {"prompt": prompt, "max_tokens": max_tokens}
        if CONFIG.get("stream", True):
            body["stream"] = True
            if endpoint != "responses":
                body["stream_options"] = {"include_usage": True}
        if CONFIG.get("temperature") is not None:
            body["temperature"] = CONFIG["temperature"]
        return body

    def _fire(self, kind: str, value: float | None) -> None:
        if value is not None:
            self.environment.events.request.fire(
                request_type=kind,
                name=CONFIG["route"],
                response_time=value,
                response_length=0,
                exception=None,
            )

    @task
    def generate(self) -> None:
        chat = CONFIG.get("endpoint", "chat") == "chat"
        path = _PATHS[CONFIG.get("endpoint", "chat")]
        headers = {"x-turnout-key": self.sticky}
        if CONFIG.get("api_key"):
            headers["authorization"] = f"Bearer {CONFIG['api_key']}"
        if CONFIG.get("variant"):
            headers["x-turnout-variant"] = CONFIG["variant"]
        row: dict[str, Any] = {"status": 0, "error": None, "ttft_ms": None, "itl_ms": None}
        row["output_tokens"] = 0
        start = time.perf_counter()
        stream = bool(CONFIG.get("stream", True))
        try:
            with self.client.post(
                path, json=self._body(), headers=headers, stream=stream, catch_response=True, name=path
            ) as response:
                row["status"] = response.status_code or 0
                row["variant"] = (response.headers or {}).get("x-turnout-variant", "?")
                if row["status"] != 200:  # no status: it failed before one came (FastHttpUser's error)
                    row["error"] = f"http_{row['status']}" if row["status"] else failure_kind(response.error)
                    row["detail"] = error_detail(response.content if row["status"] else str(response.error))
                elif stream:
                    self._read_stream(response, chat, start, row)
                elif truncated(len(response.content or b""), (response.headers or {}).get("content-length")):
                    row["error"] = "connection"  # closed mid-answer (the client hands back what came)
                    row["detail"] = f"closed after {len(response.content or b'')} bytes of its content-length"
                else:
                    usage = (response.json() or {}).get("usage") or {}
                    row["output_tokens"], row["prompt_tokens"] = _usage(usage)
                if row["error"] is None:
                    response.success()
                else:  # the kind alone: locust's failures table makes a row per distinct text
                    response.failure(row["error"])
        except Exception as exc:  # timeouts and dropped connections end up here
            row["error"] = failure_kind(exc)
            row["detail"] = error_detail(f"{type(exc).__name__}: {exc}")
        row["latency_ms"] = (time.perf_counter() - start) * 1000
        if row["error"] is None:
            self._fire("E2E", row["latency_ms"])
            self._fire("TTFT", row["ttft_ms"])
            self._fire("ITL", row["itl_ms"])
            seconds = row["latency_ms"] / 1000
            tokens = row["output_tokens"]
            self._fire("TOK/S", tokens / seconds if seconds > 0 and tokens else None)
        _record(row)
        if row["error"] == "connection":
            self.backoff_s = min(MAX_BACKOFF_S, 2 * self.backoff_s or FIRST_BACKOFF_S)
            gevent.sleep(self.backoff_s)
        else:
            self.backoff_s = 0.0

    def _read_stream(self, response: Any, chat: bool, start: float, row: dict[str, Any]) -> None:
        """Read the SSE answer line by line (a line arrives as soon as the gateway sends it).

        A 200 is not success by itself: the answer must be an event stream (``text/event-stream``)
        with at least one JSON event, else ``bad_response``; one that ends before ``[DONE]`` was
        cut off (``connection``, as a whole answer shorter than its Content-Length). A stream
        without usage has its output tokens counted as its content chunks (``tokens_estimated``).
        A Responses API stream ends with ``response.completed`` (or ``incomplete``), which holds
        the usage, instead of ``[DONE]``; its ``response.failed`` is a ``stream_error``.
        """
        raw = response._response  # geventhttpclient's response: readline() returns what has arrived
        content_type = str((response.headers or {}).get("content-type") or "")
        if not content_type.lower().startswith("text/event-stream"):
            row["error"] = "bad_response"
            row["detail"] = f"a 200 with content-type {content_type or 'none'}, not text/event-stream"
            return
        stamps, events, done, usage = [], 0, False, None
        while True:
            line = raw.readline(b"\n")
            if not line:
                break
            if not line.startswith(b"data:"):
                continue
            data = line[len(b"data:") :].strip()
            if data == b"[DONE]":
                done = True
                continue
            event = json.loads(data)  # not JSON: a bad_response (failure_kind)
            events += 1
            kind = event.get("type")
            if "error" in event or kind == "response.failed":
                row["error"] = "stream_error"
                row["detail"] = row.get("detail") or error_detail(event)
                continue
            if _content(event, chat):
                stamps.append(time.perf_counter())
            if kind in _RESPONSE_ENDS:
                done, usage = True, (event.get("response") or {}).get("usage") or usage
                continue
            usage = event.get("usage") or usage
        if row["error"] is None and not done:
            row["error"] = "connection"  # closed before [DONE]: cut off mid-answer
            row["detail"] = f"the stream ended after {events} events, before [DONE]"
        elif row["error"] is None and not events:
            row["error"] = "bad_response"  # [DONE] and nothing else: no answer at all
            row["detail"] = "[DONE] with no event before it"
        if usage:
            row["output_tokens"], row["prompt_tokens"] = _usage(usage)
        else:
            row["output_tokens"], row["tokens_estimated"] = len(stamps), True
        if stamps:
            row["ttft_ms"] = (stamps[0] - start) * 1000
            if len(stamps) > 1:
                row["itl_ms"] = (stamps[-1] - stamps[0]) * 1000 / (len(stamps) - 1)


SCENARIO = Scenario(
    name=CONFIG.get("scenario", "steady"),
    users=int(CONFIG.get("users", 1)),
    duration_s=float(CONFIG.get("duration_s", 10)),
    step_users=int(CONFIG.get("step_users", 2)),
    step_s=float(CONFIG.get("step_s", 5)),
)
SLO = Slo(float(CONFIG.get("slo_p95_ttft_ms", 1000)), float(CONFIG.get("slo_max_error_rate", 0.01)))
STEPS: list[dict[str, Any]] = []


class ScenarioShape(LoadTestShape):
    """Users over time from ``loadtests.scenarios``; a ramp ends at the first step over its SLO."""

    def tick(self) -> tuple[int, float] | None:
        elapsed = self.get_run_time()
        if SCENARIO.name == "ramp" and not self._judge(elapsed):
            return None
        users = users_at(SCENARIO, elapsed)
        return None if users is None else (users, spawn_rate(SCENARIO))

    def _judge(self, elapsed: float) -> bool:
        """At each step boundary, judge the step that ended (records from its second half on)."""
        finished = SCENARIO.step_at(elapsed)
        while len(STEPS) < min(finished, SCENARIO.steps()):
            step = len(STEPS)
            begin, end = (step + 0.5) * SCENARIO.step_s, (step + 1) * SCENARIO.step_s
            chosen = [r for r in RECORDS if begin <= r.t < end]
            users = min(SCENARIO.users, SCENARIO.step_users * (step + 1))
            STEPS.append(step_figures(chosen, users, end - begin, SLO))
            if CONFIG.get("steps_file"):
                Path(CONFIG["steps_file"]).write_text(json.dumps(STEPS))
        return all(step["ok"] for step in STEPS)
