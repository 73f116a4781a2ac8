"""Runs Batch API batches: each of a batch's requests sent through this gateway, one by one.

Where it sits: beside the request path, in every gateway process. ``POST /v1/batches``
(``serving.api.batches_route``) keeps a batch in the store; the :class:`BatchRunner` of some
gateway on that store claims it (``serving.store.batches``) and sends each request that has no
answer yet into this gateway's own ASGI app, in-process, as the key that made the batch
(``Access.acting_for``): the same checks, route choice, rate limits, fallbacks and metrics as
the same request sent over HTTP. At most ``batches.concurrency`` of a batch's requests are in
flight, ``batches.max_running`` batches per gateway. A 429 or 503 (the gateway's state, not the
request's fault) is sent again later; any other answer is final, and is kept every
``check_every_s`` with the runner's beat. A batch ends ``completed`` once every request has an
answer, ``cancelled`` when cancelled, ``expired`` at its window's end (the requests never sent go
to the error file). A gateway going down hands its batches back at once; one killed loses them
to another after ``batches.orphan_s`` without its beat, which then sends the requests whose
answers were not kept (so a request may run twice, never be answered twice). A gateway running
no batch looks for one every ``IDLE_LOOK_EVERY`` beats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

import orjson
from starlette.types import ASGIApp, Message

from serving.access import Access, acting_in_process
from serving.batches import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    EXPIRED,
    FAILED,
    BatchLine,
    BatchRecord,
    is_success,
    output_line,
    retry_wait,
    usage_of,
)
from serving.config import BatchSettings
from serving.metrics import GatewayMetrics
from serving.store import RouteStore

log = logging.getLogger("turnout")

_Answer = tuple[int, int, dict[str, Any], int, int]
_HANG_UP_GRACE_S = 5.0
_COALESCE_S = 0.001
# A gateway running no batch looks for one every this many beats (a batch made on it, or
# cancelled through it, wakes it at once): an idle gateway spends ~1 ms of CPU a look here.
IDLE_LOOK_EVERY = 5
_INTERNAL = {"error": {"message": "internal error", "type": "internal_error", "param": None, "code": None}}
_NO_STREAMS = {
    "error": {
        "message": "stream: a batch's requests cannot stream; leave stream out of the body",
        "type": "invalid_request_error",
        "param": "stream",
        "code": "unsupported_value",
    }
}


class BatchRunner:
    """This gateway's running batches, by id."""

    def __init__(
        self,
        store: RouteStore,
        access: Access,
        settings: BatchSettings,
        metrics: GatewayMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._access = access
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self.claimant = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._app: ASGIApp | None = None
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._answers: dict[str, list[_Answer]] = {}
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.Task[None] | None = None

    def start(self, app: ASGIApp) -> None:
        """Run batches through ``app`` (this gateway's own) from now on."""
        self._app = app
        self._wake = asyncio.Event()
        self._loop = asyncio.create_task(self._looping())

    def poke(self) -> None:
        """A batch was made or cancelled here: look now rather than at the next beat."""
        if self._wake is not None:
            self._wake.set()

    async def close(self) -> None:
        """Going down: stop sending, keep the answers already in, hand the batches back."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        running = dict(self._runs)
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        try:
            await self._keep_answers()
            await asyncio.to_thread(self._store.batches.release, list(running), self.claimant)
        except Exception:
            log.exception("could not keep batch answers, or hand the batches back")

    async def _looping(self) -> None:
        assert self._wake is not None
        while True:
            every = self._settings.check_every_s
            if not self._runs and not self._answers:  # idle: look for others' batches less often
                every *= IDLE_LOOK_EVERY
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), every)
            self._wake.clear()
            try:
                await self._tick()
            except Exception:
                log.exception("batch runner: could not beat, keep answers or claim batches")

    async def _tick(self) -> None:
        await self._keep_answers()
        if self._runs:
            states = await asyncio.to_thread(self._store.batches.beat, list(self._runs), self.claimant)
            for batch_id, task in list(self._runs.items()):
                status = states.get(batch_id)
                if status is None:  # another gateway took it over while this one could not beat
                    task.cancel()
                elif status == CANCELLING:
                    self._stops[batch_id].set()
        while len(self._runs) < self._settings.max_running:
            record = await asyncio.to_thread(
                self._store.batches.claim, self.claimant, self._settings.orphan_s
            )
            if record is None:
                break
            batch_id = record.batch_id
            self._stops[batch_id] = asyncio.Event()
            self._answers.setdefault(batch_id, [])  # answers of a run it lost may be waiting
            self._runs[batch_id] = asyncio.create_task(self._run(record))
        self._metrics.batches_running.set(len(self._runs))

    async def _keep_answers(self) -> None:
        """Write the answers in so far (taken here, on the event loop, which adds them)."""
        taken = {batch_id: answers for batch_id, answers in self._answers.items() if answers}
        for batch_id in list(self._answers):
            if batch_id in self._runs:
                self._answers[batch_id] = []
            else:
                del self._answers[batch_id]
        for batch_id, answers in taken.items():
            try:
                await asyncio.to_thread(self._store.batches.answer, batch_id, answers)
            except BaseException:  # kept for the next try, ahead of any added since
                self._answers.setdefault(batch_id, [])[:0] = answers
                raise

    async def _run(self, record: BatchRecord) -> None:
        batch_id = record.batch_id
        try:
            ending = CANCELLED if record.status == CANCELLING else await self._send_all(record)
            await self._keep_answers()
            ended = await asyncio.to_thread(
                self._store.batches.end, batch_id, self.claimant, ending, self._settings.file_retention_s
            )
            if ended is not None:
                log.info("batch %s %s", batch_id, ended.status)
                self._metrics.batches_ended.labels(ended.status).inc()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s: run failed; another beat will take it up", batch_id)
            await asyncio.to_thread(self._store.batches.release, [batch_id], self.claimant)
        finally:
            self._runs.pop(batch_id, None)
            self._stops.pop(batch_id, None)
            self._metrics.batches_running.set(len(self._runs))

    async def _send_all(self, record: BatchRecord) -> str:
        """Send the requests without an answer; the batch's ending (completed, cancelled, expired)."""
        lines = await asyncio.to_thread(self._store.batches.unanswered, record.batch_id)
        stop = self._stops[record.batch_id]
        key = self._access.acting_for(record.owner)
        hang_up = asyncio.Event()  # set: the requests in flight see their client leave
        in_flight: set[asyncio.Task[bool]] = set()
        stopping = asyncio.ensure_future(stop.wait())
        answered = 0

        def over() -> bool:
            return stop.is_set() or self._clock() >= record.expires_at

        def ended(task: asyncio.Task[bool]) -> None:
            nonlocal answered
            in_flight.discard(task)
            answered += 1 if not task.cancelled() and task.exception() is None and task.result() else 0

        async def room(most: int) -> None:
            while len(in_flight) > most and not over():
                left = record.expires_at - self._clock()
                await asyncio.wait([*in_flight, stopping], timeout=left, return_when=asyncio.FIRST_COMPLETED)
                await asyncio.sleep(_COALESCE_S)

        try:
            for line in lines:
                await room(self._settings.concurrency - 1)
                if over():
                    break
                task = asyncio.create_task(self._one(record, line, key, hang_up))
                in_flight.add(task)
                task.add_done_callback(ended)
            await room(0)
        finally:
            stopping.cancel()
            await _hang_up(hang_up, set(in_flight))
        if stop.is_set():
            return CANCELLED
        if answered < len(lines) and self._clock() < record.expires_at:  # a line's send broke
            raise RuntimeError(f"{len(lines) - answered} of {len(lines)} requests got no answer")
        if answered < len(lines):
            self._metrics.batch_requests.labels(record.endpoint, EXPIRED).inc(len(lines) - answered)
            return EXPIRED
        return COMPLETED

    async def _one(
        self, record: BatchRecord, line: BatchLine, key: str | None, hang_up: asyncio.Event
    ) -> bool:
        """Send one request until its answer is final, and keep that answer; False when the
        batch stopped first (cancelled, expired, the gateway going down): nothing is kept."""
        body = line.body.encode()
        if orjson.loads(body).get("stream"):
            status, request_id, answer = 400, "", dict(_NO_STREAMS)
        else:
            attempt = 0
            while True:
                try:
                    status, headers, payload = await self._send(record.endpoint, body, key, hang_up)
                except Exception:  # the app renders its own errors: this is a bug, said as a 500
                    log.exception("batch %s: request %s failed", record.batch_id, line.custom_id)
                    status, headers, payload = 500, {}, orjson.dumps(_INTERNAL)
                wait = retry_wait(status, headers.get("retry-after"), attempt)
                if hang_up.is_set() or wait is None or self._clock() + wait >= record.expires_at:
                    break
                attempt += 1
                self._metrics.batch_retries.labels(str(status)).inc()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(hang_up.wait(), wait)
            if hang_up.is_set():
                return False
            request_id = headers.get("x-request-id", "")
            answer = _parsed(payload)
        succeeded = is_success(status)
        taken, given = usage_of(answer) if succeeded else (0, 0)
        self._metrics.batch_requests.labels(record.endpoint, COMPLETED if succeeded else FAILED).inc()
        result = output_line(line.custom_id, status, request_id, answer)
        self._answers[record.batch_id].append((line.index, status, result, taken, given))
        return True

    async def _send(
        self, path: str, body: bytes, key: str | None, hang_up: asyncio.Event
    ) -> tuple[int, dict[str, str], bytes]:
        """POST ``body`` to ``path`` on this gateway's app, in-process: (status, headers, body)."""
        assert self._app is not None
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if key is not None:
            headers.append((b"authorization", b"Bearer " + key.encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
            "state": {},
        }
        given = False

        async def receive() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await hang_up.wait()  # the batch stopped: its requests' client leaves
            return {"type": "http.disconnect"}

        status = 500
        answer_headers: dict[str, str] = {}
        parts: list[bytes] = []

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    answer_headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))

        with acting_in_process():  # the batch owner's acting key is good here alone
            await self._app(scope, receive, send)
        return status, answer_headers, b"".join(parts)


async def _hang_up(hang_up: asyncio.Event, in_flight: set[asyncio.Task[bool]]) -> None:
    """End the requests in flight as a client that leaves ends them (their upstream calls are
    dropped too); any still running after ``_HANG_UP_GRACE_S`` is cancelled."""
    hang_up.set()
    if in_flight:
        _, lingering = await asyncio.wait(in_flight, timeout=_HANG_UP_GRACE_S)
        for task in lingering:
            task.cancel()
        await asyncio.gather(*lingering, return_exceptions=True)


def _parsed(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode("utf-8", "replace")
