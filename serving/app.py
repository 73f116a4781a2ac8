"""The app factory: config → FastAPI app with backends, gateway, routes and error handlers.

``create_app`` is what ``turnout serve`` runs under uvicorn and what tests mount;
backends are built here (one adapter per variant) and started/closed in the lifespan.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends.base import Backend
from backends.registry import build_backend
from serving.access import Access
from serving.api import (
    admin_batches,
    admin_keys,
    admin_routes,
    batches_route,
    conversations_route,
    embeddings_route,
    files_route,
    health,
    input_tokens,
    openai_routes,
    stored_responses,
)
from serving.api import errors as api_errors
from serving.api.background_responses import BackgroundRuns
from serving.api.openai_routes import request_id
from serving.api.state import AppState
from serving.batch_runner import BatchRunner
from serving.canary_controller import CanaryController
from serving.config import GatewayConfig, default_config
from serving.errors import TurnoutError
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics, ReplicaFigures, ReplicaStats
from serving.observations import ObservationLog
from serving.ratelimit_shared import Limiter
from serving.route_sync import RouteSync
from serving.shadow import ShadowTee
from serving.shadow_recorder import ShadowRecorder
from serving.store import RouteStore


def _engine_stats(backends: Mapping[str, Backend]) -> Callable[[], dict[str, dict[str, float]]]:
    def collect() -> dict[str, dict[str, float]]:
        found: dict[str, dict[str, float]] = {}
        for name, backend in backends.items():
            stats = getattr(backend, "engine_stats", None)
            if callable(stats):
                found[name] = stats()
        return found

    return collect


def _replica_stats(backends: Mapping[str, Backend]) -> ReplicaStats | None:
    """Per-replica figures of the replica-set variants; None (no gauges at all) if there are none."""
    readers = {name: getattr(backend, "replica_stats", None) for name, backend in backends.items()}
    sets = {name: read for name, read in readers.items() if callable(read)}
    if not sets:
        return None

    def collect() -> dict[str, list[ReplicaFigures]]:
        found: dict[str, list[ReplicaFigures]] = {name: read() for name, read in sets.items()}
        return found

    return collect


class GatewayApp(FastAPI):
    """FastAPI, with the two generation endpoints served ahead of its middleware stack.

    Every proxied request pays for each ASGI layer (error, telemetry, body-limit, exception
    and exit-stack middleware, then the router); the generation handlers catch and render
    their own errors, so they skip those layers. Everything else goes through FastAPI.
    """

    hot_routes: dict[str, ASGIApp]
    turnout: AppState  # also app.state.turnout; a plain attribute is ~1 us cheaper per request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.hot_routes.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                await endpoint(scope, receive, send)
                return
        if scope["type"] == "http":  # the generation endpoints set their own
            send = _with_request_id(scope, send)
        await super().__call__(scope, receive, send)


def _with_request_id(scope: Scope, send: Send) -> Send:
    """``send`` that gives the answer an ``x-request-id`` (the client's, if fit to echo) unless
    it has one: every answer carries one, /v1/models, admin calls and 404s included."""
    sent = next((value for name, value in scope["headers"] if name == b"x-request-id"), None)
    rid = request_id(sent.decode("latin-1") if sent is not None else None).encode("latin-1")

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            if not any(name.lower() == b"x-request-id" for name, _ in headers):
                message = {**message, "headers": [*headers, (b"x-request-id", rid)]}
        await send(message)

    return sending


def _allow_browsers(gateway_app: GatewayApp, origins: tuple[str, ...]) -> None:
    """CORS for ``origins``: preflights answered, and the answers (the generation endpoints'
    too, which skip the middleware stack) carry the headers a browser needs to read them."""

    def cors(app: ASGIApp) -> ASGIApp:  # a middleware factory: Starlette passes the inner app
        return CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=("GET", "POST", "PUT", "DELETE", "OPTIONS"),
            allow_headers=("*",),
            expose_headers=("x-request-id", "x-turnout-variant", "x-turnout-route-version", "retry-after"),
        )

    gateway_app.add_middleware(cors)
    gateway_app.hot_routes = {path: cors(endpoint) for path, endpoint in gateway_app.hot_routes.items()}


def create_app(
    config: GatewayConfig | None = None,
    *,
    backends: Mapping[str, Backend] | None = None,
    limiter: Callable[[GatewayMetrics], Limiter] | None = None,
    observations: ObservationLog | None = None,
    freeze_heap: bool = False,
) -> FastAPI:
    """The gateway app. ``backends`` replaces the adapters of the variants it names (Ray Serve
    engine handles, ``serving.ray_app``); ``limiter`` builds a rate limiter shared by replicas,
    ``observations`` the canary samples they share.
    ``freeze_heap``: the process is this app's alone (``turnout serve``, a Serve replica), so
    once started, move every object so far out of the garbage collector's sight (``gc.freeze``).
    """
    config = config or default_config()
    given = backends or {}
    backends = {
        name: given[name] if name in given else build_backend(name, settings)
        for name, settings in config.variants.items()
    }
    metrics = GatewayMetrics(engine_stats=_engine_stats(backends), replica_stats=_replica_stats(backends))
    spec_names = config.spec_names
    for name, backend in backends.items():
        info = backend.info
        spec = spec_names.get(name, "")
        metrics.variant_info.labels(name, info.kind, info.engine, info.vendor, info.accelerator, spec).set(1)
        metrics.breaker_open.labels(name).set(0)  # present from the start: alerts need no absent()
        hook = getattr(backend, "set_batch_observer", None)
        if callable(hook):
            hook(metrics.batch_observer(name))
    recorder = ShadowRecorder(config.shadow.recent_differences)
    tee = ShadowTee(backends, metrics, recorder, max_in_flight=config.shadow.max_in_flight)
    gateway = Gateway(config, backends, metrics, shadows=tee, observations=observations)
    access = Access(
        config.auth,
        metrics,
        limiter=limiter(metrics) if limiter else None,
        batch_key_limits=config.batches.key_limits,
    )
    store = RouteStore(config.store.url, orphan_after_s=config.responses.background_orphan_s)
    sync = RouteSync(store, gateway, access, config.store.poll_interval_s)
    canary = CanaryController(gateway, sync, metrics, config.canary.tick_s)
    background = BackgroundRuns(store, config.responses.background_max_running, metrics.background)
    batch_runner = BatchRunner(store, access, config.batches, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await sync.start(dict(config.routes))
        canary.start()
        await asyncio.gather(*(backend.start() for backend in backends.values()))
        if freeze_heap:
            # The ~100k objects of imports, config and engines live as long as the process; left
            # in the heap, each full collection walked them all (about 60 ms here, every few
            # thousand requests under load: a latency spike and ~30 us of CPU a request).
            gc.collect()
            gc.freeze()
        batch_runner.start(app)
        try:
            yield
        finally:
            await batch_runner.close()
            await background.close()
            await canary.close()
            await tee.close()
            await sync.close()
            await asyncio.gather(*(backend.close() for backend in backends.values()))

    app = GatewayApp(title="Turnout", lifespan=lifespan, docs_url=None, redoc_url=None)
    # A path with a stray "/" is a 404 in the OpenAI shape saying so, not Starlette's empty 307
    # to a Location built from the Host header (which clients do not follow on POST anyway).
    app.router.redirect_slashes = False
    app.hot_routes = {
        "/v1/chat/completions": openai_routes.chat_completions,
        "/v1/completions": openai_routes.completions,
        "/v1/responses": openai_routes.responses,
        "/v1/embeddings": embeddings_route.embeddings,
    }
    app.turnout = app.state.turnout = AppState(
        gateway=gateway,
        metrics=metrics,
        max_body_bytes=config.server.max_body_bytes,
        started=int(time.time()),
        access=access,
        store=store,
        sync=sync,
        shadow_recorder=recorder,
        canary=canary,
        background=background,
        batches=batch_runner,
        variant_aliases=config.variant_aliases,
    )
    for path, endpoint in app.hot_routes.items():  # the way in under a path prefix (Ray Serve)
        app.router.routes.append(Route(path, endpoint, methods=["POST"]))
    if config.server.cors_allow_origins:
        _allow_browsers(app, config.server.cors_allow_origins)
    app.add_route("/v1/models", openai_routes.list_models, methods=["GET"])
    app.add_route("/v1/models/{model:path}", openai_routes.get_model, methods=["GET"])
    kept = ["GET", "DELETE", "POST"]  # a stored answer, its input items, its deletion
    app.add_route("/v1/responses/input_tokens", input_tokens.count_input_tokens, methods=["POST"])
    app.add_route("/v1/responses/{rest:path}", stored_responses.stored_response, methods=kept)
    app.add_route("/v1/conversations", conversations_route.create_conversation, methods=["POST"])
    app.add_route("/v1/conversations/{rest:path}", conversations_route.conversation, methods=kept)
    app.add_route("/v1/files", files_route.files, methods=["GET", "POST"])
    app.add_route("/v1/files/{rest:path}", files_route.one_file, methods=["GET", "DELETE", "POST"])
    app.add_route("/v1/batches", batches_route.batches, methods=["GET", "POST"])
    app.add_route("/v1/batches/{rest:path}", batches_route.one_batch, methods=["GET", "POST"])
    app.add_route("/health", health.health, methods=["GET"])
    app.add_route("/ready", health.ready, methods=["GET"])
    app.add_route("/metrics", health.metrics, methods=["GET"])
    admin_routes.install(app)
    admin_keys.install(app)
    admin_batches.install(app)
    app.add_exception_handler(TurnoutError, api_errors.handle_turnout_error)
    app.add_exception_handler(HTTPException, api_errors.handle_http_exception)
    app.add_exception_handler(Exception, api_errors.handle_unexpected)
    return app
