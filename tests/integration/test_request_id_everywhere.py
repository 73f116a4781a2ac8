"""Every answer carries ``x-request-id``, not only the generation endpoints': /v1/models, health
and metrics, admin calls, 404s and 405s (the client's id echoed when fit, else a new one)."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/models", 200),
        ("GET", "/v1/models/turnout-tiny", 200),
        ("GET", "/v1/models/no-such-model", 404),
        ("GET", "/health", 200),
        ("GET", "/v1/audio/speech", 404),
        ("GET", "/v1/embeddings", 405),
        ("GET", "/v1/chat/completions", 405),
    ],
)
def test_every_answer_has_a_request_id(gateway_url: str, method: str, path: str, status: int) -> None:
    mine = httpx.request(method, gateway_url + path, headers={"x-request-id": "trace-42"})
    assert mine.status_code == status
    assert mine.headers.get_list("x-request-id") == ["trace-42"]
    made = httpx.request(method, gateway_url + path)
    assert len(made.headers.get_list("x-request-id")) == 1 and made.headers["x-request-id"] != "trace-42"


def test_the_generation_endpoints_keep_their_own_single_id(gateway_url: str) -> None:
    body = {"model": "turnout-tiny", "prompt": "1+2=", "max_tokens": 2}
    reply = httpx.post(f"{gateway_url}/v1/completions", json=body, headers={"x-request-id": "trace-7"})
    assert reply.headers.get_list("x-request-id") == ["trace-7"] and reply.json()["id"] == "cmpl-trace-7"
