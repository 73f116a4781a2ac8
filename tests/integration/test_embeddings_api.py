"""``/v1/embeddings`` through the openai SDK: on the embedded engine, relayed to it by a second
gateway through the OpenAI HTTP adapter (one upstream, and a replica set of two), and mirrored
to shadow variants whose vectors are compared with the primary's.

The embedded engine's vector is the shipped model's last hidden state at the last token,
normalized: checked here against transformers running the Hugging Face folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from deploy.model.artifacts import hf_dir
from serving.launcher import gateway_process
from tests.integration.control_plane import admin, eventually, running_gateway, write_config

TEXTS = ["03+45=", "hello world, this is a test", "the cat sat on the mat"]


def vectors(reply: openai.types.CreateEmbeddingResponse) -> np.ndarray:
    return np.array([item.embedding for item in sorted(reply.data, key=lambda item: item.index)])


@pytest.fixture(scope="module")
def client(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def relay_url(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway relaying ``relay`` to the session's gateway, and ``pair`` to it and a second one."""
    config = tmp_path_factory.mktemp("embeddings-relay") / "gateway.yaml"
    with (
        gateway_process() as second,
        gateway_process(write_relay(config, gateway_url, second.url)) as relay,
    ):
        yield relay.url


def write_relay(config: Path, first: str, second: str) -> Path:
    config.write_text(
        "variants:\n"
        "  upstream: {kind: openai_http, base_url: " + first + "/v1, model: turnout-tiny}\n"
        "  pair:\n"
        "    kind: openai_http\n"
        f"    base_url: {first}/v1\n"
        f"    replicas: ['{second}/v1']\n"
        "    model: turnout-tiny-int8\n"
        "routes:\n"
        "  relay: {targets: [{variant: upstream}]}\n"
        "  pair: {targets: [{variant: pair}]}\n"
        "auth: {anonymous_clients: true}\n"
    )
    return config


def test_the_embedding_is_the_models_normalized_last_hidden_state(client: openai.OpenAI) -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    reply = client.embeddings.create(model="turnout-tiny", input=TEXTS)  # the SDK asks for base64
    assert reply.model == "turnout-tiny" and reply.object == "list"
    got = vectors(reply)
    folder = hf_dir()
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))  # adds BOS, as the engine does
    expected, tokens = [], 0
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        tokens += len(ids)
        with torch.no_grad():
            hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1].numpy()
        expected.append(hidden / np.linalg.norm(hidden))
    assert got.shape == (3, 128)
    assert np.allclose(got, np.array(expected), atol=1e-5)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens


def test_numbers_and_base64_one_input_and_a_batch_token_ids_and_text_agree(client: openai.OpenAI) -> None:
    batch = vectors(client.embeddings.create(model="turnout-tiny", input=TEXTS))
    as_numbers = vectors(client.embeddings.create(model="turnout-tiny", input=TEXTS, encoding_format="float"))
    alone = vectors(client.embeddings.create(model="turnout-tiny", input=TEXTS[1]))
    assert np.array_equal(batch.astype(np.float32), as_numbers.astype(np.float32))  # float32 both ways
    assert np.allclose(alone[0], batch[1], atol=1e-6)  # padded in a batch, alone: the same
    ids = client.completions.create(
        model="turnout-tiny", prompt=TEXTS[0], max_tokens=1, echo=True, logprobs=0
    )
    assert ids.choices[0].logprobs is not None
    by_ids = client.embeddings.create(model="turnout-tiny", input=[[1, *token_ids(TEXTS[0])]])
    assert np.allclose(vectors(by_ids)[0], batch[0], atol=1e-6)


def token_ids(text: str) -> list[int]:
    """``text``'s token ids, without the BOS the tokenizer adds (as the engine adds it)."""
    from tokenizers import Tokenizer

    encoded = Tokenizer.from_file(str(hf_dir() / "tokenizer.json")).encode(text).ids
    return encoded[1:]


def test_quantized_variants_embed_close_to_fp32_but_not_equal(client: openai.OpenAI) -> None:
    fp32 = vectors(client.embeddings.create(model="turnout-tiny", input=TEXTS))
    for route in ("turnout-tiny-int8", "turnout-tiny-int4"):
        quantized = vectors(client.embeddings.create(model=route, input=TEXTS))
        cosines = (quantized * fp32).sum(axis=1)
        assert (cosines > 0.99).all() and not np.array_equal(quantized, fp32), (route, cosines)


@pytest.mark.parametrize(
    ("body", "status", "param", "says"),
    [
        ({"input": ""}, 400, "input", "must not be an empty text"),
        ({"input": "x", "dimensions": 8}, 400, "dimensions", "leave dimensions unset or 128"),
        ({"input": "7" * 600}, 400, "input", "maximum context length is 512 tokens"),
        ({"input": [[1, 512]]}, 400, "input", "input 0: token ids need at least one id, each from 0 to 511"),
        ({"input": {"text": "x"}}, 400, "input", "got an object"),
        ({"input": "x", "truncate_prompt_tokens": 3}, 400, "truncate_prompt_tokens", "Unrecognized"),
        ({"input": "x", "model": "turnout-tiny-fp64"}, 404, "model", "did you mean 'turnout-tiny"),
    ],
)
def test_bad_requests_get_the_openai_error(
    gateway_url: str, body: dict[str, object], status: int, param: str, says: str
) -> None:
    reply = httpx.post(f"{gateway_url}/v1/embeddings", json={"model": "turnout-tiny", **body}, timeout=30)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and says in error["message"], error
    assert reply.headers["x-request-id"]
    after = httpx.post(
        f"{gateway_url}/v1/embeddings", json={"model": "turnout-tiny", "input": "x"}, timeout=30
    )
    assert after.status_code == 200  # and it keeps serving


def test_malformed_json_is_a_400(gateway_url: str) -> None:
    reply = httpx.post(
        f"{gateway_url}/v1/embeddings", content=b'{"model": "turnout-tiny", "input": ', timeout=30
    )
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"


def test_the_metrics_count_embeddings_under_their_endpoint(client: openai.OpenAI, gateway_url: str) -> None:
    def served() -> float:
        page = httpx.get(f"{gateway_url}/metrics", timeout=10).text
        line = 'turnout_requests_total{endpoint="embeddings",route="turnout-tiny-int4",status="200"'
        return sum(float(row.rsplit(" ", 1)[1]) for row in page.splitlines() if row.startswith(line))

    before = served()
    client.embeddings.create(model="turnout-tiny-int4", input="x")
    assert served() == before + 1


def test_a_relayed_embedding_is_the_upstreams(client: openai.OpenAI, relay_url: str) -> None:
    relay = openai.OpenAI(base_url=f"{relay_url}/v1", api_key="x", max_retries=0)
    direct = client.embeddings.create(model="turnout-tiny", input=TEXTS)
    relayed = relay.embeddings.create(model="relay", input=TEXTS)
    assert relayed.model == "relay"
    assert np.array_equal(vectors(relayed), vectors(direct))  # float32 both ways
    assert relayed.usage.prompt_tokens == direct.usage.prompt_tokens
    paired = relay.embeddings.create(model="pair", input=TEXTS)  # a replica set of two
    int8 = client.embeddings.create(model="turnout-tiny-int8", input=TEXTS)
    assert np.array_equal(vectors(paired), vectors(int8))


def test_an_upstreams_refusal_reaches_the_client_as_it_said(relay_url: str) -> None:
    reply = httpx.post(
        f"{relay_url}/v1/embeddings", json={"model": "relay", "input": "x", "dimensions": 8}, timeout=30
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "dimensions" and "leave dimensions unset or 128" in error["message"]
    assert reply.headers["x-turnout-variant"] == "upstream"


def test_a_shadow_of_an_embeddings_route_is_compared_by_its_vectors(tmp_path: Path) -> None:
    """fp32 serves, a second fp32 and int8 are shadows: the twin matches exactly, int8 is close
    (cosine above 0.99) but never equal, and the recent differences show what they were."""
    fp32, int8 = {"kind": "embedded", "precision": "fp32"}, {"kind": "embedded", "precision": "int8"}
    route = {"targets": [{"variant": "fp32"}], "shadows": [{"variant": "twin"}, {"variant": "int8"}]}
    config = write_config(
        tmp_path / "gateway.yaml", {"fp32": fp32, "twin": fp32, "int8": int8}, {"emb": route}
    )
    with running_gateway(config) as gateway:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)
        for _ in range(4):
            client.embeddings.create(model="emb", input=TEXTS)

        def summary() -> dict[str, Any]:
            return dict(
                httpx.get(f"{gateway.url}/admin/routes/emb/shadow", headers=admin(), timeout=10).json()
            )

        eventually(lambda: all(s["compared"] == 4 for s in summary()["shadows"].values()), timeout=10)
        found = summary()
    twin, quantized = found["shadows"]["twin"], found["shadows"]["int8"]
    assert twin["exact_match_rate"] == 1.0 and twin["mean_similarity"] == pytest.approx(1.0)
    assert quantized["exact_matches"] == 0 and 0.99 < quantized["mean_similarity"] < 1.0
    assert quantized["mean_length_ratio"] == 1.0 and quantized["errors"] == 0
    recent = found["recent_differences"]
    assert len(recent) == 4 and all(d["shadow"] == "int8" for d in recent)
    assert recent[0]["primary"]["text"].startswith("3 × 128 dimensions: [0.0447, 0.0475")
