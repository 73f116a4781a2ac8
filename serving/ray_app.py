"""Turnout as a Ray Serve application: N gateway replicas in front, one deployment per embedded variant.

Where it sits: Ray Serve's HTTP proxy → ``TurnoutGateway`` (the same FastAPI app as
``turnout serve``, one per replica) → for embedded variants a ``TurnoutEngine`` deployment
through a deployment handle (``backends.ray_engine``); remote variants (vLLM, Triton…) are
reached over HTTP/gRPC from each gateway replica as before. ``TurnoutRateCounter`` holds the
per-key rate limits every gateway replica shares (``serving.ratelimit_shared``). Every gateway
replica polls the same route store (``store.url``: SQLite on one node, PostgreSQL across
nodes), so an admin change made through any replica reaches all of them within the poll
interval. Each response names the replica that served it in ``x-turnout-replica``.

Deployment names: ``TurnoutGateway``, ``TurnoutRateCounter``, and ``TurnoutEngine`` for the
application rendered from one variant spec (``deploy.render.ray_serve``: ``args`` with
``variant_id``, ``variant``, ``model_source``) or ``TurnoutEngine-<variant>`` per embedded
variant of a ``gateway.yaml`` (``args``: ``config`` (path or mapping), ``gateway_replicas``).
Engine replicas come from the spec (``replicas``, or ``autoscaling`` on ongoing requests
with its bounds); a variant declared without a spec gets one replica.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends.base import BackendInfo, Chunk, Completion, GenerateRequest
from backends.ray_engine import RayEngineBackend
from backends.settings import EmbeddedSettings
from deploy.spec import VariantSpec, parse_spec
from serving.config import GatewayConfig, load_config, parse_config
from serving.metrics import GatewayMetrics
from serving.ratelimit_shared import Limiter, LocalLimiter, SharedLimiter
from serving.routing.spec import RouteSpec, WeightedTarget
from serving.spec_variants import SpecVariant, variant_settings

GATEWAY = "TurnoutGateway"
ENGINE = "TurnoutEngine"
COUNTER = "TurnoutRateCounter"
# Ray Serve's default (5 in flight per replica) would starve the engine's batcher and the gateway.
GATEWAY_MAX_ONGOING = 1024
ENGINE_CPUS = 0.25  # Ray only counts these (placement); ONNX Runtime threads are set per variant
GATEWAY_CPUS = 0.25  # so 2-4 gateway replicas and a few engines fit on a 2-core machine


class TurnoutEngine:
    """One embedded engine (ONNX Runtime GenAI, in this replica's process)."""

    def __init__(self, variant: str, settings: dict[str, Any]) -> None:
        from backends.embedded import EmbeddedBackend

        self.backend = EmbeddedBackend(variant, EmbeddedSettings.model_validate(settings))
        self._started = False

    async def _started_backend(self) -> Any:
        if not self._started:
            await self.backend.start()
            self._started = True
        return self.backend

    async def complete(self, request: GenerateRequest) -> Completion:
        backend = await self._started_backend()
        result: Completion = await backend.complete(request)
        return result

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        backend = await self._started_backend()
        async for chunk in backend.stream(request):
            yield chunk


class TurnoutRateCounter:
    """The token buckets of every key, shared by all gateway replicas (one replica, in memory)."""

    def __init__(self) -> None:
        self.limiter = LocalLimiter()

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        return self.limiter.admit_now(key, rpm, tpm)

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        self.limiter.charge(key, tokens, tpm)


class _HandleCounter:
    """``serving.ratelimit_shared.Counter`` over the counter deployment's handle."""

    def __init__(self, handle: DeploymentHandle[Any]) -> None:
        self.handle = handle

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        answer: float | None = await self.handle.admit.remote(key, rpm, tpm)
        return answer

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        await self.handle.charge.remote(key, tokens, tpm)


class _ReplicaHeader:
    """Adds ``x-turnout-replica`` (this Ray Serve replica's id) to every response."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.header = (b"x-turnout-replica", replica.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self.header]
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

    def _limiter(self, metrics: GatewayMetrics) -> Limiter:
        counter = _HandleCounter(self.counter)
        return SharedLimiter(counter, self.replicas, metrics.shared_limit_unreachable.inc)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        from serving.app import create_app

        backends = {}
        for name, handle in self.engines.items():
            settings = self.config.variants[name]
            accelerator = settings.accelerator if isinstance(settings, EmbeddedSettings) else "cpu-x86"
            info = BackendInfo(
                kind="ray_serve", engine="onnxruntime-genai", vendor="cpu", accelerator=accelerator
            )
            backends[name] = RayEngineBackend(name, handle, info)
        app = create_app(self.config, backends=backends, limiter=self._limiter)
        replica = serve.get_replica_context().replica_id.unique_id
        return _ReplicaHeader(app, replica)


# The deployments (decorated here, not on the classes, so the classes stay plain and typed).
ENGINE_DEPLOYMENT: Any = serve.deployment(
    name=ENGINE, max_ongoing_requests=256, ray_actor_options={"num_cpus": ENGINE_CPUS}
)(TurnoutEngine)
COUNTER_DEPLOYMENT: Any = serve.deployment(
    name=COUNTER, num_replicas=1, max_ongoing_requests=4096, ray_actor_options={"num_cpus": 0}
)(TurnoutRateCounter)
GATEWAY_DEPLOYMENT: Any = serve.deployment(
    name=GATEWAY, max_ongoing_requests=GATEWAY_MAX_ONGOING, ray_actor_options={"num_cpus": GATEWAY_CPUS}
)(serve.ingress()(TurnoutGateway))


def _engine_options(spec: VariantSpec | None, settings: EmbeddedSettings) -> dict[str, Any]:
    options: dict[str, Any] = {"max_ongoing_requests": settings.batching.max_queue_size}
    if spec is None:
        options["num_replicas"] = 1
    elif spec.autoscaling is None:
        options["num_replicas"] = spec.replicas
    else:
        scaling = spec.autoscaling
        options["autoscaling_config"] = {
            "min_replicas": scaling.min_replicas,
            "initial_replicas": spec.replicas,
            "max_replicas": scaling.max_replicas,
            "target_ongoing_requests": scaling.target_ongoing_requests,
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
    engines = {}
    for name, settings in config.variants.items():
        if isinstance(settings, EmbeddedSettings):
            options = _engine_options(specs.get(name), settings)
            deployment = ENGINE_DEPLOYMENT.options(name=engine_name(name), **options)
            engines[name] = deployment.bind(name, settings.model_dump(mode="json"))
    gateway = GATEWAY_DEPLOYMENT.options(num_replicas=gateway_replicas)
    return gateway.bind(source, engines, COUNTER_DEPLOYMENT.bind(), gateway_replicas, base_dir)


def _config_for_spec(spec: VariantSpec, variant_id: str) -> dict[str, Any]:
    if spec.engine != "onnxruntime-genai":
        raise ValueError(
            f"engine {spec.engine!r} runs as its own server, not inside Ray Serve here: declare it in a "
            "gateway.yaml under specs: with its base_url/url and run `turnout serve --ray --config` on that"
        )
    settings = variant_settings(spec, SpecVariant.model_construct(spec=Path(".")))
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
    if source:  # where this cluster holds the weights; the id stays the spec's as written
        variant["model"] = {**variant["model"], "path": source, "architecture": None}
    data = _config_for_spec(parse_spec(variant, "<ray args: variant>"), written.id)
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
