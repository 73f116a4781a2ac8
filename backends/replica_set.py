"""A variant served by several replicas of one engine: pick one per request, by load.

It sits where a single adapter would, between ``serving.gateway`` and the engines, behind
the same :class:`~backends.base.Backend` protocol; ``backends.registry`` builds it only
for a variant with ``replicas`` (one without keeps the bare adapter). It holds one adapter
per replica: :class:`OpenAIHttpBackend` (vLLM, trtllm-serve, SGLang, another Turnout) or
:class:`TritonBackend` (each Triton server's own metrics port is scraped for its
``nv_inference_pending_request_count``). Per request it asks the pure policy
(``serving.routing.balance.choose``) with each replica's in-flight count, kept here, and
the engine figures ``backends.load_probe`` last scraped (and, under ``prefix_affinity``, the
replica its prompt's start last went to: ``serving.routing.prefix_index``), then calls that
replica.

A replica that cannot be reached (:class:`BackendUnavailable`) is marked unhealthy until
a probe that started after the failure reaches it again, and the request is sent once
more to another replica, before the first byte only. Everything else (4xx, 5xx,
timeouts, failures mid-stream) is the gateway's to handle: retries, fallbacks, breakers.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import HttpUrl

from backends.base import (
    Backend,
    BackendInfo,
    Chunk,
    Completion,
    Embeddings,
    EmbedRequest,
    GenerateRequest,
    embedder,
    token_counter,
)
from backends.load_probe import EngineLoad, LoadProbe, metrics_url
from backends.settings import BalanceSettings, OpenAIHttpSettings, TritonSettings
from serving.errors import BackendUnavailable
from serving.metrics import ReplicaFigures
from serving.routing.balance import ReplicaLoad, choose
from serving.routing.prefix_index import PrefixIndex, prompt_blocks, prompt_start

T = TypeVar("T")


def _one_server(settings: OpenAIHttpSettings, url: HttpUrl) -> OpenAIHttpSettings:
    return settings.model_copy(update={"base_url": url, "replicas": ()})


@dataclass(frozen=True, slots=True)
class Member:
    """One replica: its adapter, the address it is known by, and its engine's metrics page."""

    backend: Backend
    url: str
    metrics_url: str


def openai_members(name: str, settings: OpenAIHttpSettings) -> list[Member]:
    from backends.openai_http import OpenAIHttpBackend

    return [
        Member(
            OpenAIHttpBackend(f"{name}[{i}]", _one_server(settings, url)),
            str(url),
            metrics_url(str(url), settings.balance.metrics_path),
        )
        for i, url in enumerate((settings.base_url, *settings.replicas))
    ]


def triton_members(name: str, settings: TritonSettings) -> list[Member]:
    from backends.triton import TritonBackend

    members = []
    for i, server in enumerate(settings.servers()):
        one = settings.model_copy(
            update={"url": server.url, "grpc_url": server.grpc_url, "metrics_url": None, "replicas": ()}
        )
        address = str(server.url) if settings.protocol == "generate" else str(server.grpc_url)
        members.append(Member(TritonBackend(f"{name}[{i}]", one), address, str(server.metrics_url)))
    return members


@dataclass(slots=True)
class _Replica:
    backend: Backend
    url: str
    healthy: bool = True
    down_since: float = float("-inf")  # monotonic time it was marked down by a failed call
    in_flight: int = 0
    picked: int = 0
    prefix_hits: int = 0  # picked because it took the request's prompt start before
    load: EngineLoad | None = None

    def view(self, index: int) -> ReplicaLoad:
        load = self.load
        if load is None:
            return ReplicaLoad(index, self.healthy, self.url, self.in_flight)
        return ReplicaLoad(
            index, self.healthy, self.url, self.in_flight, load.waiting, load.running, load.kv_usage
        )


class ReplicaSetBackend:
    """One variant, several servers of the same model; the least loaded healthy one serves."""

    def __init__(
        self,
        name: str,
        settings: OpenAIHttpSettings | TritonSettings,
        *,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        members: Sequence[Member] = (
            triton_members(name, settings)
            if isinstance(settings, TritonSettings)
            else openai_members(name, settings)
        )
        self.replicas = [_Replica(member.backend, member.url) for member in members]
        self.info: BackendInfo = self.replicas[0].backend.info
        balance: BalanceSettings = settings.balance
        self.policy = balance.policy
        self._balance = balance
        self.prefixes = PrefixIndex()  # under prefix_affinity: where each prompt start went
        self._draw = draw
        probe_args = {} if clock is None else {"clock": clock}
        self.probe = LoadProbe(
            [member.metrics_url for member in members],
            balance.probe_interval_s,
            balance.probe_timeout_s,
            self._probed,
            **probe_args,
        )

    # ---- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        for replica in self.replicas:
            await replica.backend.start()
        await self.probe.start()

    async def close(self) -> None:
        await self.probe.close()
        for replica in self.replicas:
            await replica.backend.close()

    def ready(self) -> bool:
        return any(replica.backend.ready() for replica in self.replicas)

    # ---- health and load -----------------------------------------------------------

    def _probed(self, index: int, load: EngineLoad | None, started: float) -> None:
        replica = self.replicas[index]
        if load is None:
            replica.healthy, replica.load = False, None
        elif started > replica.down_since:  # a probe older than the failure proves nothing
            replica.healthy, replica.load = True, load

    def _mark_down(self, index: int) -> None:
        replica = self.replicas[index]
        replica.healthy, replica.load = False, None
        replica.down_since = self.probe.clock()

    def affinity(self, request: GenerateRequest) -> list[bytes]:
        """The request's start as block hashes, under ``prefix_affinity`` (else none)."""
        if self.policy != "prefix_affinity":
            return []
        return prompt_blocks(prompt_start(request, self._balance.prefix_chars))

    def pick(self, exclude: int | None = None, blocks: list[bytes] | None = None) -> int:
        """The replica for the next request; under ``prefix_affinity`` the one that took the
        longest known run of its ``blocks``, unless it is overloaded, and it is recorded there."""
        loads = [r.view(i) for i, r in enumerate(self.replicas) if i != exclude]
        preferred = self.prefixes.match(blocks) if blocks else None
        draws = (self._draw(), self._draw())
        index = choose(loads, self.policy, draws, preferred, self._balance.max_imbalance)
        replica = self.replicas[index]
        if blocks:
            self.prefixes.record(blocks, replica.url)
        if preferred is not None and preferred == replica.url:
            replica.prefix_hits += 1
        replica.picked += 1
        return index

    def replica_stats(self) -> list[ReplicaFigures]:
        """Per-replica figures for Turnout's ``/metrics`` (read at scrape time)."""
        figures = []
        for i, replica in enumerate(self.replicas):
            load = replica.load
            figures.append(
                ReplicaFigures(
                    replica=str(i),
                    url=replica.url,
                    healthy=replica.healthy,
                    in_flight=replica.in_flight,
                    picked=replica.picked,
                    waiting=load.waiting if load else None,
                    running=load.running if load else None,
                    kv_usage=load.kv_usage if load else None,
                    prefix_hits=replica.prefix_hits if self.policy == "prefix_affinity" else None,
                )
            )
        return figures

    # ---- request path --------------------------------------------------------------

    async def _call_on(self, index: int, call: Callable[[Backend], Awaitable[T]]) -> T:
        replica = self.replicas[index]
        replica.in_flight += 1
        try:
            return await call(replica.backend)
        except BackendUnavailable:
            self._mark_down(index)
            raise
        finally:
            replica.in_flight -= 1

    async def _call(self, call: Callable[[Backend], Awaitable[T]], blocks: list[bytes] | None = None) -> T:
        """``call`` on the replica the policy picks; once more on another if that one is unreachable."""
        index = self.pick(blocks=blocks)
        try:
            return await self._call_on(index, call)
        except BackendUnavailable:
            return await self._call_on(self.pick(exclude=index, blocks=blocks), call)

    async def complete(self, request: GenerateRequest) -> Completion:
        return await self._call(lambda backend: backend.complete(request), self.affinity(request))

    async def embed(self, request: EmbedRequest) -> Embeddings:
        return await self._call(lambda backend: embedder(backend, self.name).embed(request))

    async def count_tokens(self, request: GenerateRequest) -> int:
        return await self._call(lambda backend: token_counter(backend, self.name).count_tokens(request))

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        blocks = self.affinity(request)
        index = self.pick(blocks=blocks)
        for attempt in (1, 2):
            replica = self.replicas[index]
            replica.in_flight += 1
            upstream = replica.backend.stream(request)
            started = False
            try:
                async for chunk in upstream:
                    started = True
                    yield chunk
                return
            except BackendUnavailable:
                self._mark_down(index)
                if started or attempt == 2:
                    raise
            finally:
                replica.in_flight -= 1
                closer = getattr(upstream, "aclose", None)
                if closer is not None:
                    await closer()
            index = self.pick(exclude=index, blocks=blocks)
