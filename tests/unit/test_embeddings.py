"""/v1/embeddings without a server: the wire model, the answer's two encodings, an upstream's
body both ways, the embedding graph's batching, and the gateway's choice of variant."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import AsyncIterator

import numpy as np
import orjson
import pytest

from backends.base import (
    Chunk,
    Completion,
    Embeddings,
    EmbedRequest,
    GenerateRequest,
    embedder,
    token_counter,
)
from backends.embedded_embeddings import EmbeddingGraph, EmbeddingRunner
from backends.openai_embeddings import embeddings_body as upstream_body
from backends.openai_embeddings import read_embeddings
from backends.settings import BatchingSettings
from deploy.model.artifacts import onnx_dir
from serving.api.wire_errors import parse_wire
from serving.config import GatewayConfig
from serving.embeddings_protocol import MAX_INPUTS, EmbeddingsRequest, embeddings_body
from serving.errors import ClientError, Overloaded
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics
from tests.unit.inprocess_backend import InProcessBackend


def wire(**fields: object) -> EmbeddingsRequest:
    return parse_wire(EmbeddingsRequest, orjson.dumps({"model": "m", **fields}))


@pytest.mark.parametrize(
    ("given", "inputs"),
    [
        ("hello", ("hello",)),
        (["a", "b"], ("a", "b")),
        ([1, 5, 6], ((1, 5, 6),)),
        ([[1, 5], [7]], ((1, 5), (7,))),
    ],
)
def test_every_input_shape_becomes_texts_or_token_tuples(given: object, inputs: tuple[object, ...]) -> None:
    request = wire(input=given, user="u-1", truncate_prompt_tokens=8).to_embed_request("rid")
    assert request.inputs == inputs
    assert request.extra == {"truncate_prompt_tokens": 8, "user": "u-1"}  # for upstreams that take them
    assert request.request_id == "rid" and request.dimensions is None


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"input": ""}, "input", "input must not be an empty text"),
        ({"input": []}, "input", "input must not be an empty list"),
        ({"input": ["a", ""]}, "input", "empty text (input 1)"),
        ({"input": [[1], []]}, "input", "empty list of token ids (input 1)"),
        ({"input": ["a"] * (MAX_INPUTS + 1)}, "input", f"at most {MAX_INPUTS} inputs"),
        ({"input": 5}, "input", "a list of lists of integers; got a number"),
        ({"input": ["a", 1]}, "input", "got a list"),
        ({"input": "a", "encoding_format": "hex"}, "encoding_format", "'float' or 'base64'"),
        ({"input": "a", "dimensions": 0}, "dimensions", "greater than or equal to 1"),
        ({"input": "a", "dimensions": "8"}, "dimensions", "integer"),
        ({}, "input", "required"),
    ],
)
def test_bad_requests_name_their_field(fields: dict[str, object], param: str, says: str) -> None:
    with pytest.raises(ClientError) as caught:
        wire(**fields).to_embed_request("rid")
    assert caught.value.status == 400 and caught.value.param == param
    assert says in caught.value.message


def test_the_answer_as_numbers_and_as_base64_carries_the_same_float32s() -> None:
    vectors = np.array([[0.25, -1.5, 3.0e-8], [1.0, 0.0, -0.1]], dtype=np.float32)
    result = Embeddings(vectors, prompt_tokens=7)
    as_numbers = orjson.loads(embeddings_body("route", result, "float"))
    as_base64 = orjson.loads(embeddings_body("route", result, "base64"))
    for answer in (as_numbers, as_base64):
        assert answer["object"] == "list" and answer["model"] == "route"
        assert answer["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
        assert [(item["object"], item["index"]) for item in answer["data"]] == [
            ("embedding", 0),
            ("embedding", 1),
        ]
    numbers = np.array([item["embedding"] for item in as_numbers["data"]], dtype=np.float32)
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(i["embedding"]), dtype="<f4") for i in as_base64["data"]]
    )
    assert np.array_equal(numbers, vectors) and np.array_equal(decoded, vectors)
    assert orjson.loads(embeddings_body("route", result, None))["data"] == as_numbers["data"]


def test_an_upstream_is_asked_for_floats_with_the_clients_other_fields() -> None:
    request = EmbedRequest(("a",), None, {"truncate_prompt_tokens": 4, "model": "theirs"}, "rid")
    assert orjson.loads(upstream_body("served", request)) == {
        "truncate_prompt_tokens": 4,
        "model": "served",
        "input": "a",
        "encoding_format": "float",
    }
    several = EmbedRequest(("a", (1, 2)), 64)
    assert orjson.loads(upstream_body("served", several)) == {
        "model": "served",
        "input": ["a", [1, 2]],
        "encoding_format": "float",
        "dimensions": 64,
    }


def test_an_upstreams_answer_is_read_by_index() -> None:
    answer = {
        "data": [{"index": 1, "embedding": [3.0, 4.0]}, {"index": 0, "embedding": [1.0, 2.0]}],
        "usage": {"prompt_tokens": 9, "total_tokens": 9},
    }
    read = read_embeddings(orjson.dumps(answer), 2)
    assert read.vectors.tolist() == [[1.0, 2.0], [3.0, 4.0]] and read.vectors.dtype == np.float32
    assert read.prompt_tokens == 9


@pytest.mark.parametrize(
    "answer",
    [
        {"data": [{"index": 0, "embedding": [1.0]}]},  # one short
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]},  # twice the same
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [2.0]}]},
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [2.0, 3.0]}]},  # ragged
        {"data": [{"index": 0, "embedding": "AACAPw=="}, {"index": 1, "embedding": "AACAPw=="}]},
        {"data": "nothing"},
    ],
)
def test_an_upstreams_answer_of_the_wrong_shape_is_refused(answer: dict[str, object]) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        read_embeddings(orjson.dumps(answer), 2)


def test_a_triton_models_outputs_are_read_flat_or_nested_and_refused_in_another_shape() -> None:
    from backends.triton_embed import embedding_inputs, read_embeddings
    from serving.errors import BackendError

    nested = read_embeddings("t", {"embedding": [[1.0, 0.0], [0.0, 1.0]], "prompt_tokens": [3, 4]}, 2)
    flat = read_embeddings("t", {"embedding": [1.0, 0.0, 0.0, 1.0], "prompt_tokens": [3, 4]}, 2)  # /generate
    assert np.array_equal(nested.vectors, flat.vectors) and flat.vectors.shape == (2, 2)
    assert nested.prompt_tokens == flat.prompt_tokens == 7
    assert read_embeddings("t", {"embedding": [[0.5, 0.5]]}, 1).prompt_tokens == 0  # not said: 0
    for outputs in ({}, {"embedding": [1.0, 2.0, 3.0]}, {"embedding": [[1.0, 2.0]]}, {"embedding": "x"}):
        with pytest.raises(BackendError):
            read_embeddings("t", outputs, 2)
    assert embedding_inputs(EmbedRequest(("a", "b"))) == {"text_input": ["a", "b"]}
    with pytest.raises(ClientError, match="token-id inputs are not supported by Triton variants"):
        embedding_inputs(EmbedRequest(("a", (1, 2))))


def test_the_graph_embeds_a_padded_batch_as_it_does_each_input_alone() -> None:
    graph = EmbeddingGraph(onnx_dir("fp32"))
    rows = [np.array(ids, dtype=np.int64) for ids in ([1, 40, 41, 42, 43, 44, 45], [1, 7], [1, 9, 9, 9])]
    together = graph.embed(rows)
    alone = np.concatenate([graph.embed([row]) for row in rows])
    assert together.shape == (3, graph.dimensions) and together.dtype == np.float32
    assert np.allclose(together, alone, atol=1e-6)  # right padding never leaks into the last token
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-6)
    assert not np.allclose(together[0], together[2])


class Generates(InProcessBackend):
    """A variant that generates and nothing else (a Triton one, as far as embeddings go)."""

    async def complete(self, request: GenerateRequest) -> Completion:
        raise AssertionError("not called")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        raise AssertionError("not called")
        yield Chunk()


class Embeds(Generates):
    async def embed(self, request: EmbedRequest) -> Embeddings:
        return Embeddings(np.ones((len(request.inputs), 2), dtype=np.float32), prompt_tokens=5)


def gateway() -> Gateway:
    upstream = {"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    config = GatewayConfig.model_validate(
        {
            "variants": {"gen": upstream, "emb": upstream},
            "routes": {
                "gen-only": {"targets": [{"variant": "gen"}]},
                "emb": {"targets": [{"variant": "emb"}]},
            },
        }
    )
    return Gateway(config, {"gen": Generates(), "emb": Embeds()}, GatewayMetrics())


async def test_a_variant_that_only_generates_is_a_400_naming_it() -> None:
    gw = gateway()
    with pytest.raises(ClientError) as caught:
        await gw.embed(gw.choose("gen-only", None, None), EmbedRequest(("a",)))
    assert caught.value.status == 400 and caught.value.code == "model_not_supported"
    assert "variant 'gen' (openai_http, vllm) does not serve embeddings" in caught.value.message
    with pytest.raises(ClientError):
        embedder(Generates(), "gen")


async def test_embeddings_are_counted_under_their_endpoint_with_their_prompt_tokens() -> None:
    gw = gateway()
    result = await gw.embed(gw.choose("emb", None, None), EmbedRequest(("a", "b")))
    assert result.vectors.shape == (2, 2)
    await asyncio.sleep(0)  # the metrics are written once the answer is out
    requests = gw.metrics.requests.labels("emb", "emb", "embeddings", "200")._value.get()
    prompt = gw.metrics.tokens.labels("emb", "emb", "prompt")._value.get()
    assert (requests, prompt) == (1, 5)


class HeldGraph(EmbeddingGraph):
    """The shipped fp32 graph, whose first pass waits for ``release`` (so requests pile up behind
    it, as they do behind a long pass); records the rows of every pass."""

    def __init__(self) -> None:
        super().__init__(onnx_dir("fp32"))
        self.release = threading.Event()
        self.passes: list[int] = []

    def embed(self, rows: list[np.ndarray]) -> np.ndarray:
        if not self.passes:
            self.release.wait(10)
        self.passes.append(len(rows))
        return super().embed(rows)


def rows_of(*lengths: int) -> list[np.ndarray]:
    return [np.arange(1, 1 + n, dtype=np.int64) for n in lengths]


async def test_requests_waiting_behind_a_pass_share_the_next_and_each_gets_its_own_rows() -> None:
    graph = HeldGraph()
    runner = EmbeddingRunner("v", graph, BatchingSettings(max_batch_size=8, max_queue_size=8))
    try:
        first = asyncio.ensure_future(runner.embed(rows_of(3)))
        await asyncio.sleep(0.05)  # the first pass is running (held)
        asks = [rows_of(2, 5), rows_of(4), rows_of(6, 7, 8)]
        waiting = [asyncio.ensure_future(runner.embed(rows)) for rows in asks]
        left = asyncio.ensure_future(runner.embed(rows_of(9)))
        await asyncio.sleep(0.05)
        left.cancel()  # its client left while it waited: dropped, not embedded
        graph.release.set()
        answers = await asyncio.gather(first, *waiting)
    finally:
        runner.close()
    assert graph.passes == [1, 6]  # the three waiting requests in one pass, the cancelled one out
    for rows, answer in zip([rows_of(3), *asks], answers, strict=True):
        assert np.allclose(answer, graph.embed(rows), atol=1e-6)


async def test_a_full_embedding_queue_is_a_429() -> None:
    graph = HeldGraph()
    runner = EmbeddingRunner("v", graph, BatchingSettings(max_batch_size=8, max_queue_size=2))
    try:
        running = asyncio.ensure_future(runner.embed(rows_of(3)))
        await asyncio.sleep(0.05)
        queued = [asyncio.ensure_future(runner.embed(rows_of(2))) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded) as refused:
            await runner.embed(rows_of(2))
        assert refused.value.status == 429 and refused.value.headers["retry-after"]
        graph.release.set()
        await asyncio.gather(running, *queued)
    finally:
        runner.close()


def test_a_variant_that_cannot_count_tokens_says_so() -> None:
    with pytest.raises(ClientError) as caught:
        token_counter(Generates(), "gen")
    assert caught.value.status == 400 and caught.value.code == "model_not_supported"
    assert "variant 'gen'" in caught.value.message and "/tokenize" in caught.value.message
