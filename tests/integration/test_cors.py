"""Browsers: ``server.cors_allow_origins`` lets pages from those origins call the API.

A real ``turnout serve`` on the embedded model, asked as a browser asks: a preflight
``OPTIONS`` for the generation endpoint (served ahead of the middleware stack, so it needs
its own CORS wrapper), then the real request with an ``Origin``. Without the setting no
origin is allowed (the app is built in-process for that: no request reaches an engine).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from serving.app import create_app
from serving.config import GatewayConfig
from serving.launcher import Launched, gateway_process

ALLOWED, OTHER = "https://app.example", "https://elsewhere.example"
PREFLIGHT = {
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization, content-type",
}
CHAT = {"model": "turnout-tiny", "messages": [{"role": "user", "content": "12+34="}], "max_tokens": 4}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    tmp = tmp_path_factory.mktemp("cors")
    config = {
        "server": {"cors_allow_origins": [ALLOWED]},
        "variants": {"tiny": {"kind": "embedded", "precision": "fp32"}},
        "routes": {"turnout-tiny": {"targets": [{"variant": "tiny"}]}},
        "store": {"url": f"sqlite:///{tmp / 'routes.db'}"},
        "auth": {"anonymous_clients": True},
    }
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    with gateway_process(path) as launched:
        yield launched


def test_a_preflight_from_an_allowed_origin_is_answered(gateway: Launched) -> None:
    reply = httpx.options(
        f"{gateway.url}/v1/chat/completions", headers={"origin": ALLOWED, **PREFLIGHT}, timeout=10
    )
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in reply.headers["access-control-allow-methods"]
    assert "authorization" in reply.headers["access-control-allow-headers"].lower()


def test_answers_to_an_allowed_origin_are_readable(gateway: Launched) -> None:
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions", json=CHAT, headers={"origin": ALLOWED}, timeout=30
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "640"
    assert reply.headers["access-control-allow-origin"] == ALLOWED
    exposed = reply.headers["access-control-expose-headers"].lower()
    assert "x-request-id" in exposed and "x-turnout-variant" in exposed
    bad = httpx.post(
        f"{gateway.url}/v1/chat/completions", json={**CHAT, "max_tokens": 0}, headers={"origin": ALLOWED}
    )
    assert bad.status_code == 400 and bad.headers["access-control-allow-origin"] == ALLOWED  # errors too
    models = httpx.get(f"{gateway.url}/v1/models", headers={"origin": ALLOWED}, timeout=10)
    assert models.status_code == 200 and models.headers["access-control-allow-origin"] == ALLOWED


def test_another_origin_is_refused(gateway: Launched) -> None:
    preflight = httpx.options(
        f"{gateway.url}/v1/chat/completions", headers={"origin": OTHER, **PREFLIGHT}, timeout=10
    )
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, headers={"origin": OTHER}, timeout=30)
    assert reply.status_code == 200  # served (CORS is the browser's check), but not readable there
    assert "access-control-allow-origin" not in reply.headers


async def test_no_origin_is_allowed_by_default(tmp_path: Path) -> None:
    config = GatewayConfig.model_validate(
        {
            "variants": {"up": {"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "m"}},
            "routes": {"chat": {"targets": [{"variant": "up"}]}},
            "store": {"url": f"sqlite:///{tmp_path / 'routes.db'}"},
        }
    )
    transport = httpx.ASGITransport(app=create_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        reply = await client.options("/v1/chat/completions", headers={"origin": ALLOWED, **PREFLIGHT})
    assert reply.status_code == 405
    assert not [name for name in reply.headers if name.startswith("access-control-")]
