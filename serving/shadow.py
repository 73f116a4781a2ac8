"""Shadow (mirror) traffic: a sampled copy of a request goes to a shadow variant on the side.

``serving.gateway`` calls :meth:`ShadowTee.mirror` when the routing decision samples a
shadow, and later resolves the returned handle with the primary's answer; the copy is sent
then. The shadow call runs as a detached task with its own timeout; at most ``max_in_flight`` run at once and
the rest are dropped (and counted), so a slow or dead shadow never delays, fails or
changes the primary answer. Each finished pair is compared (``serving.routing.compare``: texts,
or an embeddings request's vectors) and recorded (``serving.shadow_recorder``, Prometheus
counters).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from backends.base import Backend, EmbedRequest, GenerateRequest, embedder, generator
from serving.errors import TurnoutError
from serving.metrics import GatewayMetrics
from serving.routing.answer_text import completion_answer, embeddings_answer
from serving.routing.compare import Answer, compare
from serving.shadow_recorder import ShadowRecorder

log = logging.getLogger("turnout.shadow")

# How long a shadow waits for the primary's answer (a long stream, say) before giving up.
_PRIMARY_WAIT_S = 600.0


class ShadowTee:
    def __init__(
        self,
        backends: Mapping[str, Backend],
        metrics: GatewayMetrics,
        recorder: ShadowRecorder,
        *,
        max_in_flight: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._backends = backends
        self._metrics = metrics
        self.recorder = recorder
        self._max_in_flight = max_in_flight
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def mirror(
        self, route: str, shadow: str, request: GenerateRequest | EmbedRequest, timeout_s: float
    ) -> asyncio.Future[Answer] | None:
        """Start the shadow call; resolve the returned future with the primary's answer."""
        tally = self.recorder.tally(route, shadow)
        if len(self._tasks) >= self._max_in_flight:
            tally.dropped += 1
            self._metrics.shadow.labels(route, shadow, "dropped").inc()
            return None
        tally.sent += 1
        primary: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        copy = dataclasses.replace(request, request_id=f"{request.request_id}-shadow-{shadow}")
        task = asyncio.create_task(self._run(route, shadow, copy, timeout_s, primary))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return primary

    async def _run(
        self,
        route: str,
        shadow: str,
        request: GenerateRequest | EmbedRequest,
        timeout_s: float,
        primary: asyncio.Future[Answer],
    ) -> None:
        tally = self.recorder.tally(route, shadow)
        counter = self._metrics.shadow
        # The copy is sent once the primary has answered, so its work never competes with the
        # primary's on a shared event loop or engine; both latencies are measured on their own.
        try:
            async with asyncio.timeout(_PRIMARY_WAIT_S):
                reference = await primary
        except (TimeoutError, asyncio.CancelledError):
            tally.skipped += 1
            counter.labels(route, shadow, "skipped").inc()
            return
        # Nothing to compare against: the client hung up (499), or its request was refused as
        # bad (a 4xx other than an overload's 429), which the shadow would refuse too and be
        # counted as failing for it.
        if 400 <= reference.status < 500 and reference.status != 429:
            tally.skipped += 1
            counter.labels(route, shadow, "skipped").inc()
            return
        started = self._clock()
        try:
            async with asyncio.timeout(timeout_s):
                answer = await self._call(shadow, request, started)
        except TimeoutError:
            tally.timeouts += 1
            counter.labels(route, shadow, "timeout").inc()
            answer = Answer(504, "", self._clock() - started)
        except TurnoutError as exc:
            tally.errors += 1
            counter.labels(route, shadow, "error").inc()
            answer = Answer(exc.status, "", self._clock() - started)
        except Exception:
            log.exception("shadow %s of route %s failed", shadow, route)
            tally.errors += 1
            counter.labels(route, shadow, "error").inc()
            answer = Answer(500, "", self._clock() - started)
        result_ = compare(reference, answer)
        self.recorder.compared(route, shadow, request.request_id, reference, answer, result_)
        if answer.status != 200:  # counted once, as its error or timeout: no answer to compare
            return
        counter.labels(route, shadow, "differ" if result_.differs else "match").inc()
        self._metrics.shadow_similarity.labels(route, shadow).observe(result_.similarity)

    async def _call(self, shadow: str, request: GenerateRequest | EmbedRequest, started: float) -> Answer:
        backend = self._backends[shadow]
        # A variant that cannot do the request's task (embed, or generate): a 400, an error here.
        if isinstance(request, EmbedRequest):
            embedded = await embedder(backend, shadow).embed(request)
            return embeddings_answer(embedded, self._clock() - started)
        completion = await generator(backend, shadow).complete(request)
        return completion_answer(completion, self._clock() - started)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def resolve(futures: list[asyncio.Future[Answer]], answer: Answer) -> None:
    """Hand the primary's answer to every waiting shadow (safe to call more than once)."""
    for future in futures:
        if not future.done():
            future.set_result(answer)
