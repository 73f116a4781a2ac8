"""A variant's ``task``: an upstream that serves embeddings only (vLLM's pooling runner) or
generation only is refused the other kind of request with a 400, before anything is sent.

Through a real gateway in front of fault servers (``backends/fault.py``), which would answer
both: what the client gets, and that the upstream never saw the refused requests. Without a
task the request goes through (another Turnout, a provider serving both); an upstream that
answers 404 then gets the 502 whose hint names the task. A route cannot mix tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import fault_variant, put_route, running_gateway, write_config

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, FaultServer]]:
    with FaultServer() as embeds, FaultServer() as generates, FaultServer() as both:
        yield {"embeds": embeds, "generates": generates, "both": both}


@pytest.fixture(scope="module")
def gateway(
    upstreams: dict[str, FaultServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Launched]:
    variants = {
        "embeds": {**fault_variant(upstreams["embeds"]), "task": "embed"},
        "generates": {**fault_variant(upstreams["generates"]), "task": "generate"},
        "both": fault_variant(upstreams["both"]),
    }
    routes = {name: {"targets": [{"variant": name}]} for name in variants}
    config = write_config(tmp_path_factory.mktemp("task") / "gateway.yaml", variants, routes)
    with running_gateway(config) as launched:
        yield launched


def post(gateway: Launched, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1/{path}", json=body, timeout=30)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("chat/completions", CHAT),
        ("chat/completions", {**CHAT, "stream": True}),
        ("completions", {"prompt": "hi", "max_tokens": 4}),
        ("responses", {"input": "hi", "max_output_tokens": 4}),
    ],
)
def test_generation_asked_of_an_embedding_variant_is_a_400_and_never_sent(
    gateway: Launched, upstreams: dict[str, FaultServer], path: str, body: dict[str, Any]
) -> None:
    before = upstreams["embeds"].stats()["requests"]
    reply = post(gateway, path, {"model": "embeds", **body})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "model_not_supported" and error["param"] == "model"
    assert "'embeds' serves embeddings only (task: embed)" in error["message"]
    assert "/v1/embeddings" in error["message"]
    assert upstreams["embeds"].stats()["requests"] == before
    served = post(gateway, "embeddings", {"model": "embeds", "input": "hi"})
    assert served.status_code == 200 and len(served.json()["data"][0]["embedding"]) == 8


def test_embeddings_asked_of_a_generating_variant_are_a_400_and_never_sent(
    gateway: Launched, upstreams: dict[str, FaultServer]
) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)
    before = upstreams["generates"].stats()["requests"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="generates", input=["a", "b"])
    assert refused.value.code == "model_not_supported"
    assert "'generates' (its task is generate) does not serve embeddings" in refused.value.message
    assert upstreams["generates"].stats()["requests"] == before
    answer = client.chat.completions.create(model="generates", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content


def test_a_variant_without_a_task_is_sent_both(gateway: Launched) -> None:
    assert post(gateway, "chat/completions", {"model": "both", **CHAT}).status_code == 200
    assert post(gateway, "embeddings", {"model": "both", "input": "hi"}).status_code == 200


def test_a_route_mixing_tasks_is_refused_when_written(gateway: Launched) -> None:
    spec = {"targets": [{"variant": "generates"}], "fallbacks": ["embeds"]}
    reply = put_route(gateway.url, "mixed", spec)
    assert reply.status_code == 422, reply.text
    message = reply.json()["error"]["message"]
    assert "embeds (task: embed) and generates (task: generate) are on one route" in message
    shadowed = {"targets": [{"variant": "generates"}], "shadows": [{"variant": "both"}]}
    assert put_route(gateway.url, "shadowed", shadowed).status_code == 201  # no task: serves either
