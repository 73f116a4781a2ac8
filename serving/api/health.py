"""Liveness (``/health``), readiness (``/ready``) and Prometheus ``/metrics``."""

from __future__ import annotations

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from serving.api.state import AppState


async def health(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


async def ready(request: Request) -> Response:
    state: AppState = request.app.state.turnout
    waiting = sorted(name for name, backend in state.gateway.backends.items() if not backend.ready())
    if waiting:
        body = orjson.dumps({"status": "starting", "not_ready": waiting})
        return Response(body, status_code=503, media_type="application/json")
    return Response(b'{"status":"ready"}', media_type="application/json")


async def metrics(request: Request) -> Response:
    state: AppState = request.app.state.turnout
    page = generate_latest(state.metrics.registry)
    if state.metrics_page is not None:
        page = await state.metrics_page(page)
    return Response(page, media_type=CONTENT_TYPE_LATEST)
