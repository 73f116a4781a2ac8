"""The OpenAI HTTP adapter against a real OpenAI-compatible server: a second Turnout.

Gateway A routes ``relay`` to gateway B (the session's embedded gateway) through
``backends/openai_http.py``; what a client of A sees must match what B says, errors included.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from serving.launcher import gateway_process


@pytest.fixture(scope="module")
def relay_url(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("relay") / "gateway.yaml"
    config.write_text(
        "variants:\n"
        "  upstream:\n"
        "    kind: openai_http\n"
        f"    base_url: {gateway_url}/v1\n"
        "    model: turnout-tiny\n"
        "    engine: turnout\n"
        "    vendor: cpu\n"
        "    timeouts: {connect: 2, read: 30}\n"
        "  missing:\n"
        "    kind: openai_http\n"
        f"    base_url: {gateway_url}/v1\n"
        "    model: no-such-model\n"
        "routes:\n"
        "  relay: {targets: [{variant: upstream}]}\n"
        "  broken: {targets: [{variant: missing}]}\n"
        "auth: {anonymous_clients: true}\n"
    )
    with gateway_process(Path(config)) as gateway:
        yield gateway.url


@pytest.fixture(scope="module")
def client(relay_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{relay_url}/v1", api_key="x", max_retries=0)


def test_chat_through_relay(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="relay", messages=[{"role": "user", "content": "12+34="}], max_tokens=8
    )
    assert reply.model == "relay"
    assert reply.choices[0].message.content == "640"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == 4  # </s> counts


def test_completion_through_relay(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="relay", prompt="12+34=", max_tokens=2)
    assert reply.choices[0].text == "64"
    assert reply.choices[0].finish_reason == "length"


def test_stream_through_relay_is_chunk_by_chunk(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="relay",
            messages=[{"role": "user", "content": "12+34="}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == ["6", "4", "0"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_the_upstreams_stop_reason_is_passed_on(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="relay", prompt="12+34=", max_tokens=8, stop=["4"])
    assert (reply.choices[0].text, (reply.choices[0].model_extra or {}).get("stop_reason")) == ("6", "4")
    stream = client.completions.create(model="relay", prompt="12+34=", max_tokens=8, stop=["4"], stream=True)
    reasons = [
        (c.choices[0].model_extra or {}).get("stop_reason") for c in stream if c.choices[0].finish_reason
    ]
    assert reasons == ["4"]


def test_sampling_fields_reach_the_upstream(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model="relay", prompt="the", max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 12


def test_upstream_400_comes_back_as_the_same_openai_error(relay_url: str, gateway_url: str) -> None:
    body = {"model": "relay", "prompt": "1", "max_tokens": 100000}
    relayed = httpx.post(f"{relay_url}/v1/completions", json=body)
    direct = httpx.post(f"{gateway_url}/v1/completions", json={**body, "model": "turnout-tiny"})
    assert relayed.status_code == direct.status_code == 400
    assert relayed.json()["error"]["message"] == direct.json()["error"]["message"]
    assert relayed.json()["error"]["param"] == "max_tokens"


def test_a_route_whose_upstream_lacks_its_model_is_a_502_not_a_404(relay_url: str) -> None:
    """The relay lists "broken" in /v1/models; its upstream has no such model: the gateway's
    variant is misconfigured, which the client must not read as "your model does not exist"."""
    reply = httpx.post(f"{relay_url}/v1/completions", json={"model": "broken", "prompt": "1"})
    assert reply.status_code == 502
    message = reply.json()["error"]["message"]
    assert "answered 404" in message and "check the variant's model, base_url and task" in message


def test_upstream_unknown_field_passes_through_and_is_refused_there(relay_url: str) -> None:
    body = {"model": "relay", "prompt": "1", "max_tokens": 1, "frobnicate": 1}
    reply = httpx.post(f"{relay_url}/v1/completions", json=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "frobnicate"
