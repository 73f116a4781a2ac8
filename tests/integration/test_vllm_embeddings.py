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
        {
            "embed-vllm": {**variant, "task": "embed"},
            "untyped-vllm": variant,  # the same server, its task not said
            "embed-local": {"kind": "embedded", "precision": "fp32"},
        },
        {
            "embed": {"targets": [{"variant": "embed-vllm"}]},
            "untyped": {"targets": [{"variant": "untyped-vllm"}]},
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


def test_chat_asked_of_the_embedding_server_is_a_400_with_its_task_and_a_502_hinting_at_it_without(
    gateway: Launched,
) -> None:
    """vLLM's pooling runner answers chat with a bare 404. With ``task: embed`` the gateway
    refuses it first (the client's mistake: a 400 saying where to send it); without, the 404
    is the variant's misconfiguration to the gateway (a 502) whose hint names the task."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    typed = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "embed", **chat}, timeout=60)
    assert typed.status_code == 400
    assert typed.json()["error"]["code"] == "model_not_supported"
    assert "serves embeddings only (task: embed)" in typed.json()["error"]["message"]
    untyped = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "untyped", **chat}, timeout=60)
    assert untyped.status_code == 502
    assert "answered 404" in untyped.json()["error"]["message"]
    assert "check the variant's model, base_url and task" in untyped.json()["error"]["message"]
    embedded = httpx.post(
        f"{gateway.url}/v1/embeddings", json={"model": "untyped", "input": "hi"}, timeout=60
    )
    assert embedded.status_code == 200  # without a task, embeddings go through as before
