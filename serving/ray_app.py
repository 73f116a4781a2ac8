"""Turnout as a Ray Serve application: N gateway replicas in front, one deployment per embedded variant.

Where it sits: Ray Serve's HTTP proxy → ``TurnoutGateway`` (the same FastAPI app as
``turnout serve``, one per replica) → for embedded variants a ``TurnoutEngine`` deployment
through a deployment handle (``backends.ray_engine``); remote variants (vLLM, Triton…) are
reached over HTTP/gRPC from each gateway replica as before. ``TurnoutRateCounter`` holds the
per-key rate limits every gateway replica shares (``serving.ratelimit_shared``). Every gateway
replica polls the same route store (``store.url``: SQLite on one node, PostgreSQL across
nodes), so an admin change made through any replica reaches all of them within the poll
interval. Each response names the replica that served it in ``x-turnout-replica``. A scrape of
``/metrics`` answers for every gateway replica, each series labelled ``gateway_replica``
(``serving.metrics_merge``), whichever replica Serve's proxy sent it to, and so does a shadow
comparison (``GET /admin/routes/{name}/shadow``: ``serving.shadow_merge``).

A gateway replica reports ready only after its engine deployments have loaded their models and
the rate counter has answered (``_ReplicaEdge``), so the first requests never pay for either.

Deployment names: ``TurnoutGateway``, ``TurnoutRateCounter``, and ``TurnoutEngine`` for the
application rendered from one variant spec (``deploy.render.ray_serve``: ``args`` with
``variant_id``, ``variant``, ``gateway_replicas`` and ``model_source``, ``shipped_model`` or
``engine_url``) or
``TurnoutEngine-<variant>`` per embedded variant of a ``gateway.yaml`` (``args``: ``config``
(path or mapping), ``gateway_replicas``). Engine replicas come from the spec (``replicas``, or
``autoscaling`` on ongoing requests with its bounds); an embedded variant declared without a
spec autoscales between ``DEFAULT_MIN_ENGINES`` and ``DEFAULT_MAX_ENGINES`` replicas, aiming
at one full batch (``batching.max_batch_size``) in flight per replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import generate_latest
from pydantic import HttpUrl
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends.base import BackendInfo
from backends.ray_engine import EngineFigures, RayEngineBackend
from backends.settings import EmbeddedSettings
from deploy.model.artifacts import hf_dir
from deploy.render import ray_serve as rendered
from deploy.spec import VariantSpec, parse_spec
from serving.api.state import AppState
from serving.config import GatewayConfig, load_config, parse_config
from serving.metrics import GatewayMetrics
from serving.metrics_merge import merge_pages
from serving.observations import Key, SharedObservationLog, Tagged
from serving.ratelimit_shared import Limiter, SharedLimiter
from serving.ray_deployments import HandleCounter, TurnoutEngine, TurnoutRateCounter
from serving.ray_drain import POLL_S, DrainGate
from serving.routing.canary import WindowStats
from serving.routing.spec import RouteSpec, WeightedTarget
from serving.spec_variants import SpecVariant, variant_settings

log = logging.getLogger("turnout")

GATEWAY = rendered.GATEWAY_DEPLOYMENT
ENGINE = rendered.ENGINE_DEPLOYMENT
COUNTER = rendered.COUNTER_DEPLOYMENT
# Ray Serve's default (5 in flight per replica) would starve the engine's batcher and the gateway.
GATEWAY_MAX_ONGOING = 1024
# Requests Serve's proxy queues for the gateway replicas beyond those; past it the proxy answers
# 503 at once. Serve's default (no bound) let ~2,100 stalled uploads, each holding a replica's
# slot (the server: bounds of `turnout serve` do not reach Serve's own HTTP proxy), queue every
# later request for good (QA).
GATEWAY_MAX_QUEUED = 1024
ENGINE_CPUS = 0.25  # Ray only counts these (placement); ONNX Runtime threads are set per variant
GATEWAY_CPUS = 0.25  # so 2-4 gateway replicas and a few engines fit on a 2-core machine
DEFAULT_MIN_ENGINES = 1
DEFAULT_MAX_ENGINES = 2
HEALTH_CHECK_S = 2.0
WARM_TIMEOUT_S = 120.0  # a gateway replica waits this long for its engines before serving anyway
PAGE_EVERY_S = 2.0  # each gateway replica publishes its /metrics page this often (and on a scrape)
PAGE_TIMEOUT_S = 2.0
_Shared = TypeVar("_Shared")  # what each gateway replica shares through the counter (a page, a record)


class _ReplicaEdge:
    """Names the replica in ``x-turnout-replica`` on every response; warms up before startup ends.

    Serve's proxy passes its request id down as ``x-request-id`` (the client's, or one it made)
    and puts it on every response itself, so the app's own copy of that header is dropped here:
    one header, the same id the gateway logs.
    """

    def __init__(self, app: ASGIApp, replica: str, warm: Callable[[], Any]) -> None:
        self.app = app
        self.header = (b"x-turnout-replica", replica.encode())
        self._warm = warm

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":

            async def warmed(message: Message) -> None:
                if message["type"] == "lifespan.startup.complete":
                    await self._warm()
                await send(message)

            await self.app(scope, receive, warmed)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message["headers"] = [*kept, self.header]
            await send(message)

        await self.app(scope, receive, tagged)


def _config_from(source: str | Mapping[str, Any], base_dir: str | None) -> GatewayConfig:
    if isinstance(source, str):
        return load_config(Path(source))
    return parse_config(dict(source), "<ray args>", Path(base_dir) if base_dir else None)


class TurnoutGateway:
    """One gateway replica: the whole Turnout app, with embedded variants behind engine handles."""

    def __init__(
        self,
        config: str | Mapping[str, Any],
        engines: Mapping[str, DeploymentHandle[Any]],
        counter: DeploymentHandle[Any],
        replicas: int,
        base_dir: str | None = None,
    ) -> None:
        self.config = _config_from(config, base_dir)
        self.engines = dict(engines)
        self.counter = counter
        self.replicas = replicas
        self.replica = "local"  # Serve's id of this replica, once the app is built
        self._metrics: GatewayMetrics | None = None
        self._state: AppState | None = None
        self._shadows_sent = 0  # the shadow record's fingerprint the counter holds (0: none)
        self._publishing: asyncio.Task[None] | None = None
        self._gate: DrainGate | None = None
        self._watching: asyncio.Task[None] | None = None

    def _limiter(self, metrics: GatewayMetrics) -> Limiter:
        # The deployment's own replica count (an edited serve config included) divides the
        # limits in the fallback; the builder's argument only when Ray does not say.
        live = serve.get_replica_context().world_size
        replicas = live if isinstance(live, int) and live > 0 else self.replicas
        return SharedLimiter(HandleCounter(self.counter), replicas, metrics.shared_limit_unreachable.inc)

    async def _exchange_samples(
        self, tagged: list[Tagged], judged: dict[Key, float]
    ) -> dict[Key, WindowStats]:
        summaries: dict[Key, WindowStats] = await self.counter.observations.remote(tagged, judged)
        return summaries

    async def _warm(self) -> None:
        """Wait (bounded) until every engine has loaded its model and the counter answers."""
        targets = {COUNTER: self.counter, **{f"engine {name}": h for name, h in self.engines.items()}}

        async def ping(name: str, handle: DeploymentHandle[Any]) -> None:
            try:
                await asyncio.wait_for(handle.ping.remote(), WARM_TIMEOUT_S)
            except Exception as exc:  # serve anyway: requests wait for (or fail over) the engine
                why = f"{type(exc).__name__}: {exc}"
                log.warning("gateway replica: %s not ready after start (%s)", name, why)

        await asyncio.gather(*(ping(name, handle) for name, handle in targets.items()))
        if self._publishing is None:
            self._publishing = asyncio.get_running_loop().create_task(self._publish_pages())
        if self._watching is None:
            self._watching = asyncio.get_running_loop().create_task(self._watch_for_drain())

    async def _watch_for_drain(self) -> None:
        """Report what is in flight and learn whether the application is draining (ray_drain)."""
        gate = self._gate
        assert gate is not None  # built before the replica warms up
        while True:
            await asyncio.sleep(POLL_S)
            try:
                elapsed = await asyncio.wait_for(
                    self.counter.drain_state.remote(self.replica, gate.in_flight(), gate.draining),
                    PAGE_TIMEOUT_S,
                )
            except Exception as exc:  # the counter restarting: ask again
                log.debug("drain state not read: %s", exc)
                continue
            if elapsed is not None:
                gate.drain(float(elapsed))

    def _own_page(self) -> str:
        assert self._metrics is not None  # set when the app was built
        page: bytes = generate_latest(self._metrics.registry)
        return page.decode()

    async def _everyones(self, method: str, own: _Shared) -> dict[str, _Shared]:
        """This replica's ``own`` in through the counter's ``method`` (``metrics_pages``,
        ``shadow_states``), every live gateway replica's out: this one's at least, alone while
        the counter restarts."""
        try:
            found: dict[str, _Shared] = await asyncio.wait_for(
                getattr(self.counter, method).remote(self.replica, own), PAGE_TIMEOUT_S
            )
        except Exception as exc:
            log.debug("gateway replicas' %s not exchanged: %s", method, exc)
            found = {}
        found[self.replica] = own
        return found

    async def _publish_pages(self) -> None:
        while True:
            await asyncio.sleep(PAGE_EVERY_S)
            try:
                await asyncio.wait_for(
                    self.counter.publish_page.remote(self.replica, self._own_page()), PAGE_TIMEOUT_S
                )
                await self._publish_shadows()
            except Exception as exc:  # the counter restarting: the next publish gets through
                log.debug("gateway page not published: %s", exc)

    async def _publish_shadows(self) -> None:
        """This replica's shadow record, in full when it changed since the counter last got it."""
        assert self._state is not None  # set when the app was built
        fingerprint = self._state.shadow_recorder.fingerprint()
        if not fingerprint:  # nothing mirrored here yet
            return
        changed = fingerprint != self._shadows_sent
        tee = self._state.gateway.shadows
        in_flight = tee.in_flight if tee else 0
        own = self._state.shadow_recorder.state() if changed else None
        kept = await asyncio.wait_for(
            self.counter.publish_shadows.remote(self.replica, own, in_flight), PAGE_TIMEOUT_S
        )
        self._shadows_sent = fingerprint if kept else 0

    async def _shadow_states(self, own: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return await self._everyones("shadow_states", own)

    async def _merged_page(self, own: bytes) -> bytes:
        """The answer to a scrape: every gateway replica's series (``serving.metrics_merge``);
        this replica's own page if the others' cannot be merged."""
        text = own.decode()
        pages = await self._everyones("metrics_pages", text)
        try:
            return merge_pages(text, pages)
        except Exception:
            log.exception("gateway replicas' /metrics pages not merged; answering with this replica's")
            return own

    def __serve_build_asgi_app__(self) -> ASGIApp:
        from serving.app import create_app

        backends = {}
        figures = EngineFigures(self.counter)  # one reader for all of this replica's engines
        for name, handle in self.engines.items():
            settings = self.config.variants[name]
            accelerator = settings.accelerator if isinstance(settings, EmbeddedSettings) else "cpu-x86"
            info = BackendInfo(
                kind="ray_serve", engine="onnxruntime-genai", vendor="cpu", accelerator=accelerator
            )
            backends[name] = RayEngineBackend(name, handle, info, figures)
        samples = SharedObservationLog(self._exchange_samples)  # every replica's, for canary judges
        app = create_app(
            self.config, backends=backends, limiter=self._limiter, observations=samples, freeze_heap=True
        )
        replica = serve.get_replica_context().replica_id.unique_id
        self.replica = str(replica)
        state = app.state.turnout
        self._metrics = state.metrics
        self._state = state
        state.metrics_page = self._merged_page  # a scrape answers for every gateway replica
        state.shadow_states = self._shadow_states  # so does a shadow comparison
        self._gate = DrainGate(app)
        return _ReplicaEdge(self._gate, replica, self._warm)


# The deployments (decorated here, not on the classes, so the classes stay plain and typed).
# Serve notices a dead replica at its next health check (default every 10 s) and only then
# starts another; requests waiting on a dead engine or counter wait that long, so check often.
ENGINE_DEPLOYMENT: Any = serve.deployment(
    name=ENGINE,
    max_ongoing_requests=256,
    ray_actor_options={"num_cpus": ENGINE_CPUS},
    health_check_period_s=HEALTH_CHECK_S,
)(TurnoutEngine)
COUNTER_DEPLOYMENT: Any = serve.deployment(
    name=COUNTER,
    num_replicas=1,
    max_ongoing_requests=4096,
    ray_actor_options={"num_cpus": 0},
    health_check_period_s=HEALTH_CHECK_S,
)(TurnoutRateCounter)
GATEWAY_DEPLOYMENT: Any = serve.deployment(
    name=GATEWAY,
    max_ongoing_requests=GATEWAY_MAX_ONGOING,
    max_queued_requests=GATEWAY_MAX_QUEUED,
    ray_actor_options={"num_cpus": GATEWAY_CPUS},
    health_check_period_s=HEALTH_CHECK_S,
)(serve.ingress()(TurnoutGateway))


def engine_options(spec: VariantSpec | None, settings: EmbeddedSettings) -> dict[str, Any]:
    """Ray Serve options of one embedded variant's engine deployment (pure)."""
    options: dict[str, Any] = {"max_ongoing_requests": settings.batching.max_queue_size}
    if spec is not None and spec.autoscaling is None:
        options["num_replicas"] = spec.replicas
        return options
    if spec is None:
        bounds = (DEFAULT_MIN_ENGINES, DEFAULT_MIN_ENGINES, DEFAULT_MAX_ENGINES)
        target = float(settings.batching.max_batch_size)
    else:
        assert spec.autoscaling is not None
        scaling = spec.autoscaling
        bounds = (scaling.min_replicas, spec.replicas, scaling.max_replicas)
        target = scaling.target_ongoing_requests
    options["autoscaling_config"] = {
        "min_replicas": bounds[0],
        "initial_replicas": bounds[1],
        "max_replicas": bounds[2],
        "target_ongoing_requests": target,
    }
    return options


def build_from_config(
    config: GatewayConfig,
    source: str | Mapping[str, Any],
    *,
    gateway_replicas: int = 1,
    engine_name: Callable[[str], str] = lambda variant: f"{ENGINE}-{variant}",
    base_dir: str | None = None,
) -> Any:
    """The bound application for ``config`` (``source`` is what each gateway replica re-reads)."""
    specs = {entry.loaded.id: entry.loaded for entry in config.specs}
    counter = COUNTER_DEPLOYMENT.bind()  # one deployment: the gateways and the engines share it
    engines = {}
    for name, settings in config.variants.items():
        if isinstance(settings, EmbeddedSettings):
            options = engine_options(specs.get(name), settings)
            deployment = ENGINE_DEPLOYMENT.options(name=engine_name(name), **options)
            engines[name] = deployment.bind(name, settings.model_dump(mode="json"), counter)
    gateway = GATEWAY_DEPLOYMENT.options(num_replicas=gateway_replicas)
    return gateway.bind(source, engines, counter, gateway_replicas, base_dir)


def config_for_spec(spec: VariantSpec, variant_id: str, engine_url: str | None) -> dict[str, Any]:
    """The gateway config serving one rendered spec: its engine in Ray, or at ``engine_url``."""
    if rendered.engine_in_ray(spec):
        entry = SpecVariant.model_construct(spec=Path("."))
    elif engine_url is None:
        raise ValueError(f"engine {spec.engine!r} runs as its own server: args.engine_url must say where")
    elif spec.engine in rendered.OPENAI_ENGINES:
        entry = SpecVariant.model_construct(spec=Path("."), base_url=HttpUrl(engine_url))
    else:
        entry = SpecVariant.model_construct(spec=Path("."), url=HttpUrl(engine_url))
    settings = variant_settings(spec, entry)
    route = RouteSpec(targets=[WeightedTarget(variant=variant_id)])
    return {
        "variants": {variant_id: settings.model_dump(mode="json")},
        "routes": {spec.served_name: route.model_dump(mode="json")},
        "auth": {"anonymous_clients": True},
    }


def _from_rendered(args: dict[str, Any], replicas: int) -> Any:
    written = parse_spec(args["variant"], "<ray args: variant>")
    if args.get("variant_id") not in (None, written.id):
        raise ValueError(f"variant_id {args['variant_id']} does not match the variant's id {written.id}")
    variant = dict(args["variant"])
    source = args.get("model_source")
    if args.get("shipped_model"):  # the copy installed with this package (Turnout's Ray image)
        source = str(hf_dir())
    if source and rendered.engine_in_ray(written):  # where this cluster holds the weights; id stays
        variant["model"] = {**variant["model"], "path": source, "architecture": None}
    spec = parse_spec(variant, "<ray args: variant>")
    data = config_for_spec(spec, written.id, args.get("engine_url"))
    config = parse_config(data, "<ray args>")
    return build_from_config(config, data, gateway_replicas=replicas, engine_name=lambda _: ENGINE)


def build_app(args: dict[str, Any]) -> Any:
    """Ray Serve's application builder (``import_path: serving.ray_app:build_app``)."""
    replicas = int(args.get("gateway_replicas", 1))
    if "variant" in args:  # the shape deploy.render.ray_serve writes: one variant spec
        return _from_rendered(args, replicas)
    source = args.get("config")
    base_dir = args.get("base_dir")
    if source is None:  # the shipped model, as `turnout serve` with no config
        from serving.config import default_config

        default = default_config()
        data = default.model_dump(mode="json")
        return build_from_config(default, data, gateway_replicas=replicas)
    config = _config_from(source, base_dir)
    return build_from_config(config, source, gateway_replicas=replicas, base_dir=base_dir)
