"""One request's life: decide → call → observe.

Called by the OpenAI API handlers with a validated :class:`GenerateRequest` and the
public model name. Asks the pure routing policy which variant serves it, calls that
variant's backend adapter, and records the outcome (status, latency, TTFT, tokens).
For streams, the first chunk is awaited here so that a backend that fails before the
first byte gives the client a plain HTTP error, not a broken stream.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from backends.base import Backend, Chunk, Completion, GenerateRequest
from serving.config import GatewayConfig
from serving.errors import NotFound, TurnoutError
from serving.metrics import GatewayMetrics
from serving.routing.policy import RouteSpec, decide


@dataclass(frozen=True, slots=True)
class RouteTable:
    """The routes in force and their version (static config: version 1)."""

    routes: dict[str, RouteSpec]
    version: int = 1


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        backends: dict[str, Backend],
        metrics: GatewayMetrics,
        *,
        random_point: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config
        self.backends = backends
        self.metrics = metrics
        self.table = RouteTable(routes=dict(config.routes))
        self._random_point = random_point
        self._clock = clock

    def route_names(self) -> list[str]:
        return list(self.table.routes)

    def choose(self, route: str, key: str | None) -> tuple[str, Backend]:
        spec = self.table.routes.get(route)
        if spec is None:
            raise NotFound(f"The model '{route}' does not exist", param="model")
        variant = decide(route, spec, key, self._random_point()).primary
        return variant, self.backends[variant]

    async def complete(
        self, route: str, variant: str, backend: Backend, request: GenerateRequest, endpoint: str
    ) -> Completion:
        started = self._clock()
        try:
            result = await backend.complete(request)
        except TurnoutError as exc:
            self._observe(route, variant, endpoint, str(exc.status), started)
            raise
        except asyncio.CancelledError:  # the client hung up and the API layer cancelled the work
            self._observe(route, variant, endpoint, "499", started)
            raise
        self._observe(route, variant, endpoint, "200", started)
        self._count_tokens(route, variant, result.usage.prompt_tokens, result.usage.completion_tokens)
        return result

    async def stream(
        self, route: str, variant: str, backend: Backend, request: GenerateRequest, endpoint: str
    ) -> AsyncIterator[Chunk]:
        """Start the stream and return it once its first chunk has arrived."""
        started = self._clock()
        upstream = backend.stream(request)
        try:
            first = await upstream.__anext__()
        except StopAsyncIteration:
            first = Chunk(finish_reason="stop")
        except TurnoutError as exc:
            self._observe(route, variant, endpoint, str(exc.status), started)
            raise
        self.metrics.ttft.labels(route, variant, endpoint).observe(self._clock() - started)
        return self._observed_stream(route, variant, endpoint, started, first, upstream)

    async def _observed_stream(
        self,
        route: str,
        variant: str,
        endpoint: str,
        started: float,
        first: Chunk,
        upstream: AsyncIterator[Chunk],
    ) -> AsyncIterator[Chunk]:
        status = "200"
        last = first
        try:
            yield first
            if first.finish_reason is None:
                async for chunk in upstream:
                    last = chunk
                    yield chunk
        except TurnoutError as exc:
            status = str(exc.status)
            raise
        except BaseException:
            status = "499"  # client went away (cancelled) or the stream was closed early
            raise
        finally:
            closer = getattr(upstream, "aclose", None)
            if closer is not None:
                await closer()
            self._observe(route, variant, endpoint, status, started)
            if last.usage is not None:
                self._count_tokens(route, variant, last.usage.prompt_tokens, last.usage.completion_tokens)

    def _observe(self, route: str, variant: str, endpoint: str, status: str, started: float) -> None:
        self.metrics.requests.labels(route, variant, endpoint, status).inc()
        self.metrics.latency.labels(route, variant, endpoint).observe(self._clock() - started)

    def _count_tokens(self, route: str, variant: str, prompt: int, completion: int) -> None:
        self.metrics.tokens.labels(route, variant, "prompt").inc(prompt)
        self.metrics.tokens.labels(route, variant, "completion").inc(completion)
