"""``/v1/embeddings`` through Turnout to a real vLLM embedding server, and beside the embedded engine.

vLLM serves the shipped model as an embedding model here (``--runner pooling --convert embed``:
the normalized hidden state of the last token), a second server of its own for this module
(~30–45 s, ~3 GiB; the session's generating one cannot embed), stopped when the module ends.
The embedded engine computes the same thing, so a route to either answers with the same vectors.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from deploy.model.artifacts import hf_dir
from deploy.vllm_runtime import VllmServer, vllm_server
from serving.launcher import Launched, free_port
from tests.integration.control_plane import running_gateway, write_config
from tests.integration.engines import vllm_install_or_skip

MODEL = "turnout-tiny-embed"
TEXTS = ["03+45=", "hello world, this is a test", "the cat sat on the mat"]


@pytest.fixture(scope="module")
def vllm_embed() -> Iterator[VllmServer]:
    install = vllm_install_or_skip()
    options = ("--runner", "pooling", "--convert", "embed")
    with vllm_server(install, hf_dir(), MODEL, free_port(), extra_args=options) as server:
        yield server
    shutil.rmtree(Path(server.log).parent, ignore_errors=True)


@pytest.fixture(scope="module")
def gateway(vllm_embed: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    variant = {"kind": "openai_http", "base_url": vllm_embed.base_url, "model": MODEL, "engine": "vllm"}
    config = write_config(
        tmp_path_factory.mktemp("vllm-embed") / "gateway.yaml",
        {"embed-vllm": variant, "embed-local": {"kind": "embedded", "precision": "fp32"}},
        {
            "embed": {"targets": [{"variant": "embed-vllm"}]},
            "embed-local": {"targets": [{"variant": "embed-local"}]},
        },
    )
    with running_gateway(config) as launched:
        yield launched


def vectors(reply: openai.types.CreateEmbeddingResponse) -> np.ndarray:
    return np.array([item.embedding for item in sorted(reply.data, key=lambda item: item.index)])


def test_vllm_and_the_embedded_engine_embed_alike_through_turnout(gateway: Launched) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)
    from_vllm = client.embeddings.create(model="embed", input=TEXTS)
    local = client.embeddings.create(model="embed-local", input=TEXTS)
    assert from_vllm.model == "embed"
    assert np.allclose(vectors(from_vllm), vectors(local), atol=1e-5)
    assert from_vllm.usage.prompt_tokens == local.usage.prompt_tokens == 37  # BOS added alike
    by_ids = client.embeddings.create(model="embed", input=[[1, 5, 6], [1, 7]], encoding_format="float")
    local_ids = client.embeddings.create(model="embed-local", input=[[1, 5, 6], [1, 7]])
    assert np.allclose(vectors(by_ids), vectors(local_ids), atol=1e-5)
    assert by_ids.usage.prompt_tokens == 5  # token ids as sent: no BOS added


def test_vllms_own_fields_reach_it_and_its_refusals_come_back(gateway: Launched) -> None:
    url = f"{gateway.url}/v1/embeddings"
    long_text = "hello world " * 30
    truncated = httpx.post(
        url, json={"model": "embed", "input": long_text, "truncate_prompt_tokens": 4}, timeout=60
    )
    assert truncated.status_code == 200, truncated.text
    assert truncated.json()["usage"]["prompt_tokens"] == 4  # vLLM's extension, passed through
    refused = httpx.post(url, json={"model": "embed", "input": "x", "dimensions": 8}, timeout=60)
    assert refused.status_code == 400
    assert "Matryoshka" in refused.json()["error"]["message"]
    assert refused.headers["x-turnout-variant"] == "embed-vllm"
