"""``/v1/embeddings`` through Turnout to the real ``tritonserver``, over HTTP generate and gRPC.

The session's Triton server (``tests/integration/engines.py``) serves the shipped repository,
whose ``turnout_tiny_embed`` (``deploy/triton_repo/embed_models.py``) runs the embedded engine's
embedding graph: a route to a Triton variant with ``preset: turnout-tiny`` (which names that
model as its ``embed_model``) answers with the embedded engine's vectors. What the model cannot
take is a 400 before anything is sent; what Triton refuses comes back as a 400 with its words.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest

from deploy.triton_runtime import TritonServer
from serving.launcher import Launched
from tests.integration.control_plane import running_gateway, write_config

TEXTS = ["03+45=", "hello world, this is a test", "the cat sat on the mat"]
PROTOCOLS = ("generate", "grpc")


@pytest.fixture(scope="module")
def gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    variants = {
        "generate": {"kind": "triton", "preset": "turnout-tiny", "url": triton.http_url},
        "grpc": {"kind": "triton", "preset": "turnout-tiny", "protocol": "grpc", "grpc_url": triton.grpc_url},
        "no-embed-model": {"kind": "triton", "model": "turnout_tiny", "url": triton.http_url},
        "local": {"kind": "embedded", "precision": "fp32"},
    }
    routes = {name: {"targets": [{"variant": name}]} for name in variants}
    config = write_config(tmp_path_factory.mktemp("triton-embed") / "gateway.yaml", variants, routes)
    with running_gateway(config) as launched:
        yield launched


def _client(gateway: Launched) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)


def vectors(reply: openai.types.CreateEmbeddingResponse) -> np.ndarray:
    return np.array([item.embedding for item in sorted(reply.data, key=lambda item: item.index)])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_triton_embeds_as_the_embedded_engine_does(gateway: Launched, protocol: str) -> None:
    client = _client(gateway)
    reply = client.embeddings.create(model=protocol, input=TEXTS)  # the SDK asks for base64
    local = client.embeddings.create(model="local", input=TEXTS)
    assert reply.model == protocol and vectors(reply).shape == (3, 128)
    assert np.allclose(vectors(reply), vectors(local), atol=1e-5)
    assert reply.usage.prompt_tokens == local.usage.prompt_tokens == 37  # BOS on each, as there
    one = httpx.post(
        f"{gateway.url}/v1/embeddings",
        json={"model": protocol, "input": "03+45=", "encoding_format": "base64"},
        timeout=60,
    )
    assert one.status_code == 200 and one.headers["x-turnout-variant"] == protocol
    row = np.frombuffer(base64.b64decode(one.json()["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(row, vectors(local)[0], atol=1e-5)


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"input": [[1, 5, 6]]}, "input", "token-id inputs are not supported by Triton variants"),
        ({"input": "x", "dimensions": 8}, "dimensions", "have 128 dimensions"),
        ({"input": "x", "truncate_prompt_tokens": 4}, None, "truncate_prompt_tokens"),
        ({"input": "hello " * 600}, None, "over this model's maximum context length of 512 tokens"),
    ],
)
def test_what_triton_cannot_take_is_a_400_saying_why(
    gateway: Launched, fields: dict[str, object], param: str | None, says: str
) -> None:
    for protocol in PROTOCOLS:
        reply = httpx.post(f"{gateway.url}/v1/embeddings", json={"model": protocol, **fields}, timeout=60)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert says in error["message"] and (param is None or error["param"] == param), error
    assert _client(gateway).embeddings.create(model="generate", input="x").data  # and it keeps serving


def test_a_triton_variant_without_an_embed_model_is_a_400_naming_it(gateway: Launched) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _client(gateway).embeddings.create(model="no-embed-model", input="x")
    assert refused.value.code == "model_not_supported"
    assert "variant 'no-embed-model' (triton) serves no embeddings" in refused.value.message
    assert "embed_model" in refused.value.message
