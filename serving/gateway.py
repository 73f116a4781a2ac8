"""One request's life: decide → call (retries, fallbacks, breakers) → tee shadows → observe.

Called by the OpenAI API handlers with a validated :class:`GenerateRequest` (or an
:class:`EmbedRequest`, which takes a whole answer's path). Asks the pure
routing policy which variant serves it under the route version in force, tries that
variant (then its retries and fallbacks, skipping variants whose circuit breaker is open)
until one answers — only before the first byte reaches the client — mirrors sampled
shadows on the side, and records the outcome (metrics, breakers, canary samples:
``serving.gateway_outcomes``). For streams the
first chunk is awaited here, so a failure before the first byte becomes a retry, a
fallback or a plain HTTP error, never a broken stream.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TypeVar

from backends.base import (
    Backend,
    Chunk,
    Completion,
    Embeddings,
    EmbedRequest,
    GenerateRequest,
    Usage,
    embedder,
    generator,
)
from serving.config import GatewayConfig
from serving.errors import (
    BackendError,
    BackendUnavailable,
    ClientError,
    NotFound,
    Overloaded,
    TurnoutError,
    cancelled_status,
)
from serving.gateway_outcomes import Outcomes, after_this_turn
from serving.metrics import GatewayMetrics
from serving.observations import ObservationLog
from serving.routing.answer_text import StreamedAnswer, completion_answer, embeddings_answer
from serving.routing.breaker import BreakerSettings, CircuitBreaker
from serving.routing.compare import Answer
from serving.routing.policy import Decision, decide
from serving.routing.routed import ActiveRoute, Routed
from serving.shadow import ShadowTee, resolve

log = logging.getLogger("turnout")
T = TypeVar("T")
BackendRequest = GenerateRequest | EmbedRequest  # what one call asks a backend


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        backends: dict[str, Backend],
        metrics: GatewayMetrics,
        *,
        shadows: ShadowTee | None = None,
        observations: ObservationLog | None = None,
        random_point: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.backends = backends
        self.metrics = metrics
        self.shadows = shadows
        self.observations = observations or ObservationLog()
        self.routes: dict[str, ActiveRoute] = {
            name: ActiveRoute(name, 1, spec) for name, spec in config.routes.items()
        }
        settings = BreakerSettings(**config.breaker.model_dump())
        self.breakers = {name: CircuitBreaker(settings) for name in backends}
        self.outcomes = Outcomes(metrics, self.breakers, self.observations, clock, wall_clock)
        self._random_point = random_point
        self._clock = clock

    # -- the route table -------------------------------------------------------------------

    def apply(self, routes: Mapping[str, ActiveRoute]) -> None:
        """Put a new set of route versions in force (one atomic swap)."""
        self.routes = dict(routes)
        for name, active in routes.items():
            self.metrics.route_version.labels(name).set(active.version)

    def route_names(self) -> list[str]:
        return list(self.routes)

    def choose(
        self, route: str, header_key: str | None, user: str | None, pinned: str | None = None
    ) -> Routed:
        """The route's decision for this request; ``pinned`` (the ``x-turnout-variant`` request
        header, an operator's) names one of the route's own variants to serve it alone: no split,
        fallback or shadow, so a load test measures that variant and nothing else; a running
        canary's judge does not count it."""
        active = self.routes.get(route)
        if active is None:
            near = difflib.get_close_matches(route, self.routes, n=1)
            hint = f"; did you mean '{near[0]}'? (GET /v1/models lists them)" if near else ""
            raise NotFound(f"The model '{route}' does not exist{hint}", param="model")
        spec = active.spec
        if pinned is not None:
            if pinned not in spec.variants():
                raise ClientError(
                    f"variant '{pinned}' does not serve '{route}' (x-turnout-variant); its variants: "
                    f"{', '.join(sorted(spec.variants()))}",
                    param="x-turnout-variant",
                    code="unknown_variant",
                )
            return Routed(active, Decision(pinned), pinned, pinned=True)
        sticky = spec.sticky
        if sticky == "auto":
            key = header_key or user
        else:
            key = header_key if sticky == "header" else user if sticky == "user" else None
        shadow_point = self._random_point() if spec.shadows else 1.0
        decision = decide(route, spec, key, self._random_point(), shadow_point)
        return Routed(active, decision, decision.primary)

    # -- calls -----------------------------------------------------------------------------

    async def complete(self, routed: Routed, request: GenerateRequest, endpoint: str) -> Completion:
        def call(backend: Backend) -> Awaitable[Completion]:
            return generator(backend, routed.served_by).complete(request)

        result, variant, started = await self._whole(routed, request, endpoint, call, completion_answer)
        self.outcomes.observe(routed, variant, endpoint, 200, started, None, result.usage)
        return result

    async def embed(self, routed: Routed, request: EmbedRequest) -> Embeddings:
        """Embeddings from the route's variant, with its retries, fallbacks and shadows, as a
        completion has them (a shadow's vectors are compared with the primary's)."""

        def call(backend: Backend) -> Awaitable[Embeddings]:
            return embedder(backend, routed.served_by).embed(request)

        result, variant, started = await self._whole(routed, request, "embeddings", call, embeddings_answer)
        usage = Usage(prompt_tokens=result.prompt_tokens)
        self.outcomes.observe(routed, variant, "embeddings", 200, started, None, usage)
        return result

    async def _whole(
        self,
        routed: Routed,
        request: BackendRequest,
        endpoint: str,
        call: Callable[[Backend], Awaitable[T]],
        shown: Callable[[T, float], Answer],
    ) -> tuple[T, str, tuple[float, float]]:
        """A whole answer (not a stream), in flight on its route while called. Returns it, the
        variant that answered, and when the request and that attempt began. Its shadows get the
        answer as ``shown`` makes it for comparison, or its failure."""
        in_flight = self.metrics.route_in_flight(routed.route.name)
        in_flight.inc()
        waiting = self._mirror(routed, request)
        started = self._clock()
        try:
            variant, result, attempt_started = await self._attempts(routed, endpoint, started, call)
        except TurnoutError as exc:
            resolve(waiting, Answer(exc.status, "", self._clock() - started))
            raise
        except asyncio.CancelledError:
            resolve(waiting, Answer(499, "", self._clock() - started))
            raise
        finally:
            in_flight.dec()
        if waiting:
            resolve(waiting, shown(result, self._clock() - started))
        return result, variant, (started, attempt_started)

    async def stream(self, routed: Routed, request: GenerateRequest, endpoint: str) -> AsyncIterator[Chunk]:
        """Start the stream and return it once its first chunk has arrived; the request stays
        in flight until the stream ends (``_observed_stream`` counts it out)."""
        in_flight = self.metrics.route_in_flight(routed.route.name)
        in_flight.inc()
        waiting = self._mirror(routed, request)
        started = self._clock()

        async def first_chunk(backend: Backend) -> tuple[Chunk, AsyncIterator[Chunk]]:
            upstream = generator(backend, routed.served_by).stream(request)
            try:
                first = await upstream.__anext__()
            except StopAsyncIteration:
                first = Chunk(finish_reason="stop")
            except BaseException:
                await _close(upstream)
                raise
            return first, upstream

        try:
            variant, (first, upstream), attempt_started = await self._attempts(
                routed, endpoint, started, first_chunk
            )
        except BaseException as exc:  # no stream: the request is out of flight now
            in_flight.dec()
            if isinstance(exc, TurnoutError | asyncio.CancelledError):
                status = exc.status if isinstance(exc, TurnoutError) else 499
                resolve(waiting, Answer(status, "", self._clock() - started))
            raise
        first_at = self._clock()
        # The client waited from ``started`` (retries and fallbacks included); the canary judges
        # the variant that served on its own attempt.
        after_this_turn(
            self.metrics.series(routed.route.name, variant, endpoint).ttft.observe, first_at - started
        )
        return self._observed_stream(
            routed,
            variant,
            endpoint,
            (started, attempt_started),
            first_at - attempt_started,
            first,
            upstream,
            waiting,
        )

    async def _attempts(
        self, routed: Routed, endpoint: str, started: float, call: Callable[[Backend], Awaitable[T]]
    ) -> tuple[str, T, float]:
        """Try the primary, its retries, then the fallbacks; skip variants whose breaker is open.
        Returns the variant that answered, its answer and when its attempt began (``started``:
        when the request did).

        A failure (5xx, timeout, unreachable) counts against the variant's breaker; an overload
        (429: a full queue or connection pool, an upstream's own 429) or a refusal of the call
        (``UpstreamRefused``: 401/403/404/405) leaves the breaker as it was and that variant is
        not retried for this request, only the fallbacks."""
        decision = routed.decision
        candidates = [decision.primary] * (1 + routed.route.spec.retries) + list(decision.fallbacks)
        last_error: TurnoutError | None = None
        skipped: list[str] = []
        failed: list[str] = []
        not_again: set[str] = set()  # overloaded or refusing the call: not retried for this request
        for variant in candidates:
            if variant in not_again:  # an overloaded one would only get more load, a refusing one refuse
                continue
            breaker = self.breakers[variant]
            attempt_started = self._clock()
            if not breaker.allow(attempt_started):
                skipped.append(variant)
                self.outcomes.sample(
                    routed, variant, 503, self._clock(), None
                )  # a canary that can't serve fails
                continue
            routed.served_by = variant
            try:
                result = await call(self.backends[variant])
            except (BackendError, Overloaded) as exc:
                if isinstance(exc, Overloaded) or not exc.judges_backend:  # nothing about its health
                    breaker.release(self._clock(), attempt_started)
                    not_again.add(variant)
                else:
                    self.outcomes.breaker_record(variant, False, attempt_started)
                last_error = self._attempt_failed(routed, variant, exc, attempt_started, failed)
                continue
            except TurnoutError as exc:  # the request is at fault, not the backend: no retry
                self.outcomes.breaker_record(variant, True, attempt_started)
                self.outcomes.observe(routed, variant, endpoint, exc.status, (started, attempt_started), None)
                raise
            except asyncio.CancelledError as exc:  # the client hung up, or the server is going down
                breaker.release(self._clock(), attempt_started)  # a cancelled probe says nothing
                if exc.args != (SIBLING_FAILED,):  # not counted: its request's failure already is
                    status = cancelled_status(exc)  # 499: the client left; 503: the server cut it
                    at = (started, attempt_started)
                    self.outcomes.observe(routed, variant, endpoint, status, at, None, judged=False)
                raise
            except Exception as exc:  # an adapter bug or an answer it did not foresee: a bad gateway
                # (unhandled, it was a 500 with no fallback tried, and a half-open breaker's probe
                # slot was never freed: the variant stayed refused for good)
                log.exception("variant %s failed unexpectedly", variant)
                self.outcomes.breaker_record(variant, False, attempt_started)
                error = BackendError(f"variant '{variant}' failed: {type(exc).__name__}: {exc}")
                last_error = self._attempt_failed(routed, variant, error, attempt_started, failed)
                continue
            self.outcomes.breaker_record(variant, True, attempt_started)
            return variant, result, attempt_started
        if last_error is None:
            now = self._clock()
            wait = min(self.breakers[variant].retry_in(now) for variant in skipped)
            last_error = BackendUnavailable(
                f"no variant of '{routed.route.name}' is available: circuit open for {', '.join(skipped)}",
                code="circuit_open",
                headers={"retry-after": str(max(1, math.ceil(wait)))},  # when the first may take one
            )
        elif len(failed) > 1 or skipped:  # the client sees the last error; say what came before it
            circuit = f"; circuit open: {', '.join(skipped)}" if skipped else ""
            last_error.message = f"{last_error.message} (attempts: {', '.join(failed)}{circuit})"
        series = self.metrics.series(routed.route.name, routed.served_by, endpoint)
        series.requests(last_error.status).inc()
        series.latency.observe(self._clock() - started)  # failures too: the slowest are often here
        raise last_error

    def _attempt_failed(
        self, routed: Routed, variant: str, error: TurnoutError, attempt_started: float, failed: list[str]
    ) -> TurnoutError:
        """Count one failed attempt (the next candidate is tried); returns ``error``."""
        self.outcomes.sample(routed, variant, error.status, attempt_started, None)
        self.metrics.attempts_failed.labels(routed.route.name, variant, str(error.status)).inc()
        failed.append(f"{variant} {error.status}")
        return error

    async def _observed_stream(
        self,
        routed: Routed,
        variant: str,
        endpoint: str,
        started: tuple[float, float],
        ttft: float,
        first: Chunk,
        upstream: AsyncIterator[Chunk],
        waiting: list[asyncio.Future[Answer]],
    ) -> AsyncIterator[Chunk]:
        status = 200
        judged = True
        last = first
        delivered = 1 if first.text else 0  # text chunks handed on (see the usage below)
        produced = 1 if _output(first) else 0  # chunks with any output (text, tool calls…): the pace
        answer = StreamedAnswer() if waiting else None  # what the shadows are compared with
        if answer is not None:
            answer.add(first.text, first.extra)
        try:
            yield first
            if first.finish_reason is None:
                async for chunk in upstream:
                    last = chunk
                    if answer is not None:
                        answer.add(chunk.text, chunk.extra)
                    yield chunk
                    delivered += 1 if chunk.text else 0
                    produced += 1 if _output(chunk) else 0
        except TurnoutError as exc:
            status = exc.status
            self.outcomes.breaker_record(variant, not isinstance(exc, BackendError), started[1])
            raise
        except Exception as exc:  # an adapter bug mid-stream: the client gets an error event (a bad gateway)
            log.exception("variant %s failed unexpectedly mid-stream", variant)
            status = 502
            self.outcomes.breaker_record(variant, False, started[1])
            raise BackendError(f"variant '{variant}' failed mid-stream: {type(exc).__name__}: {exc}") from exc
        except BaseException as exc:
            # The client went away (cancelled, or the stream closed early): 499; cancelled with no
            # client gone, the server is going down and the client gets an error event: 503.
            status = cancelled_status(exc) if isinstance(exc, asyncio.CancelledError) else 499
            judged = False
            raise
        finally:
            self.metrics.route_in_flight(routed.route.name).dec()
            # The decode pace the client saw, once per stream whose output (text, tool calls,
            # reasoning) came in more than one chunk, over the tokens after the first (as vLLM's
            # time per output token): the usage's count, as a chunk may carry several (an upstream
            # that merges deltas while its client lags, as vLLM does); else those chunks. A stream
            # in one chunk has no pace to show.
            paced = last.usage.completion_tokens if last.usage is not None else produced
            if status == 200 and produced > 1 and paced > 1:
                first_at = started[1] + ttft
                per_token = (self._clock() - first_at) / (paced - 1)
                after_this_turn(
                    self.metrics.series(routed.route.name, variant, endpoint).per_token.observe, per_token
                )
            await _close(upstream)
            # A stream that ended without its usage (the client left, the upstream cut it) still
            # produced tokens: one per text chunk delivered, a lower bound (as a key's TPM charge).
            usage = last.usage or Usage(completion_tokens=delivered)
            self.outcomes.observe(routed, variant, endpoint, status, started, ttft, usage, judged=judged)
            if answer is not None:  # a cut stream is nothing to compare with: as a client's leaving
                shown = status if judged else 499
                resolve(waiting, Answer(shown, answer.text(), self._clock() - started[0]))

    # -- side effects ------------------------------------------------------------------------

    def _mirror(self, routed: Routed, request: BackendRequest) -> list[asyncio.Future[Answer]]:
        if not routed.decision.shadows or self.shadows is None:
            return []
        timeouts = {s.variant: s.timeout_s for s in routed.route.spec.shadows}
        waiting = []
        for shadow in routed.decision.shadows:
            future = self.shadows.mirror(routed.route.name, shadow, request, timeouts[shadow])
            if future is not None:
                waiting.append(future)
        return waiting


# The message a prompt's call is cancelled with when another prompt of the same /v1/completions
# request failed: the client did not leave (no 499), the request's own failure is what counts.
SIBLING_FAILED = "another prompt of this request failed"


def _output(chunk: Chunk) -> bool:
    """Whether ``chunk`` carries output for the client (text, a tool call's delta, logprobs)."""
    return bool(chunk.text or chunk.extra or chunk.logprobs)


async def _close(upstream: AsyncIterator[Chunk]) -> None:
    closer = getattr(upstream, "aclose", None)
    if closer is not None:
        await closer()
