"""Turnout in front of the real ``tritonserver``: ``backends/triton.py`` over HTTP generate and gRPC.

One Turnout gateway process (``turnout serve --config``) for the module, with a ``triton``
variant per (tensor convention × protocol) pointing at the session's Triton server
(``tests/integration/engines.py``): the shipped ``turnout_tiny`` / ``turnout_tiny_stream``,
TensorRT-LLM's ensemble face (``preset: trtllm-ensemble`` → ``ensemble`` / ``ensemble_stream``)
and the vLLM-backend face (``turnout_tiny_vllm``). Each answers chat, completions and streams
with usage and finish reasons through the official ``openai`` client; Triton's refusals come
back as OpenAI 400s with Triton's message, fields of the wrong type as 400s naming them that
leave the variant's breaker shut; a Triton that is not there is a 503.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from deploy.triton_runtime import TritonServer
from serving.launcher import Launched, free_port
from tests.integration.control_plane import metric_value, running_gateway, write_config

FACES: dict[str, dict[str, Any]] = {
    "turnout": {"preset": "turnout-tiny"},
    "trtllm": {"preset": "trtllm-ensemble", "stream_model": "ensemble_stream", "accelerator": "h100"},
    "vllm": {
        "preset": "triton-vllm",
        "model": "turnout_tiny_vllm",
        "vendor": "cpu",
        "accelerator": "cpu-x86",
    },
}
VARIANTS = [f"{face}-{protocol}" for face in FACES for protocol in ("generate", "grpc")]


def triton_variants(triton: TritonServer) -> dict[str, dict[str, Any]]:
    """Every face over both protocols, pointing at ``triton``."""
    variants = {}
    for face, settings in FACES.items():
        variants[f"{face}-generate"] = {"kind": "triton", "url": triton.http_url, **settings}
        grpc = {"kind": "triton", "protocol": "grpc", "grpc_url": triton.grpc_url, **settings}
        variants[f"{face}-grpc"] = grpc
    return variants


@pytest.fixture(scope="module")
def gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    variants = triton_variants(triton)
    variants["down"] = {
        "kind": "triton",
        "preset": "turnout-tiny",
        "url": f"http://127.0.0.1:{free_port()}",  # nothing listens there
        "timeouts": {"connect": 1.0, "read": 5.0, "pool": 1.0},
    }
    routes = {name: {"targets": [{"variant": name}]} for name in variants}
    config = write_config(tmp_path_factory.mktemp("triton-adapter") / "gateway.yaml", variants, routes)
    with running_gateway(config) as launched:
        yield launched


def _client(gateway: Launched) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_chat_and_completions(gateway: Launched, variant: str) -> None:
    client = _client(gateway)
    chat = client.chat.completions.create(
        model=variant, messages=[{"role": "user", "content": "03+45="}], temperature=0, max_tokens=8
    )
    assert chat.choices[0].message.content == "840"
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage is not None
    # 8 4 0 </s>: the end token counts, as vLLM counts it; TensorRT-LLM reports no end_id.
    counted = 3 if variant.startswith("trtllm") else 4
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (10, counted)
    cut = client.completions.create(model=variant, prompt="12+34=", temperature=0, max_tokens=2)
    assert cut.choices[0].text == "64" and cut.choices[0].finish_reason == "length"
    assert cut.usage is not None and (cut.usage.prompt_tokens, cut.usage.completion_tokens) == (7, 2)
    whole = client.completions.create(model=variant, prompt="27+68=", max_tokens=8)
    assert whole.choices[0].text == "590"  # no echo of the prompt, whatever the convention's default


@pytest.mark.parametrize("variant", VARIANTS)
def test_streaming_chat_with_usage(gateway: Launched, variant: str) -> None:
    stream = _client(gateway).chat.completions.create(
        model=variant,
        messages=[{"role": "user", "content": "21+13="}],
        temperature=0,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "430" and len(pieces) >= 3  # token by token, new text only
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    counted = 3 if variant.startswith("trtllm") else 4  # the end token, as above
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == counted


@pytest.mark.parametrize("variant", VARIANTS)
def test_stop_strings_and_length_while_streaming(gateway: Launched, variant: str) -> None:
    client = _client(gateway)
    stopped = client.completions.create(model=variant, prompt="the red", max_tokens=20, stop=["bird"])
    assert stopped.choices[0].text == " new white " and stopped.choices[0].finish_reason == "stop"
    # The gateway cuts TensorRT-LLM's text at the stop itself, so it can say which one (as vLLM's
    # stop_reason); the other faces' models cut it and do not say.
    said = "bird" if variant.startswith("trtllm") else None
    assert (stopped.choices[0].model_extra or {}).get("stop_reason") == said
    stream = client.completions.create(
        model=variant, prompt="the red", max_tokens=20, stop="bird", stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == " new white "
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].choices[0].model_extra or {}).get("stop_reason") == said
    cut = list(client.completions.create(model=variant, prompt="12+34=", max_tokens=2, stream=True))
    assert "".join(c.choices[0].text for c in cut) == "64" and cut[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_request_triton_refuses_is_an_openai_400(gateway: Launched, variant: str) -> None:
    body = {"model": variant, "prompt": "03+45=", "max_tokens": 8, "bad_words": ["8"]}
    for stream in (False, True):
        reply = httpx.post(f"{gateway.url}/v1/completions", json={**body, "stream": stream}, timeout=30)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        if variant.startswith("trtllm"):  # the ensemble's own refusal, word for word
            assert "bad_words is not supported by this engine" in error["message"]
        elif variant.startswith("vllm"):  # passed in sampling_parameters; the model refuses it
            assert "not supported here: bad_words" in error["message"]
        else:  # no bad_words tensor in this convention: Turnout refuses it before sending
            assert error["message"] == "Unrecognized request argument supplied: bad_words"
        assert reply.headers["x-turnout-variant"] == variant


@pytest.mark.parametrize("variant", [v for v in VARIANTS if not v.startswith("turnout")])
def test_a_field_of_the_wrong_type_is_a_400_that_leaves_the_variant_up(
    gateway: Launched, variant: str
) -> None:
    """A value that cannot become its tensor is refused before Triton sees it, as a 400 naming the
    field, on both protocols alike (it was a 502 TypeError): five in a row would have opened the
    variant's breaker (5 consecutive failures), taking it away from every client for its cooldown."""
    body = {"model": variant, "prompt": "the red", "max_tokens": 4}
    for _ in range(5):
        reply = httpx.post(f"{gateway.url}/v1/completions", json={**body, "bad_words": 5}, timeout=30)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == "bad_words"
        assert error["message"].startswith("bad_words must be a string or a list of strings")
    for wrong in ("abc", {}, True, [1.2]):
        penalty = {**body, "repetition_penalty": wrong}
        reply = httpx.post(f"{gateway.url}/v1/completions", json=penalty, timeout=30)
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["param"] == "repetition_penalty"
    reply = httpx.post(f"{gateway.url}/v1/completions", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"]  # served: the breaker is still shut


def test_fields_a_convention_cannot_express_are_refused(gateway: Launched) -> None:
    body = {"model": "turnout-grpc", "prompt": "03+45=", "max_tokens": 8, "logprobs": 2}
    reply = httpx.post(f"{gateway.url}/v1/completions", json=body, timeout=30)
    assert reply.status_code == 400
    assert (
        reply.json()["error"]["message"]
        == "'logprobs' is not supported by Triton models with turnout tensors"
    )
    eos = {"model": "trtllm-generate", "prompt": "03+45=", "max_tokens": 8, "ignore_eos": True}
    reply = httpx.post(f"{gateway.url}/v1/completions", json=eos, timeout=30)
    assert reply.status_code == 400 and "ignore_eos" in reply.json()["error"]["message"]


def test_seeded_sampling_repeats(gateway: Launched) -> None:
    client = _client(gateway)
    answers = {
        client.completions.create(model=variant, prompt="the red", max_tokens=12, temperature=0.9, seed=7)
        .choices[0]
        .text
        for variant in ("turnout-generate", "turnout-grpc", "turnout-generate")
    }
    assert len(answers) == 1 and answers.pop()


def test_an_unreachable_triton_is_a_503(gateway: Launched) -> None:
    body = {"model": "down", "messages": [{"role": "user", "content": "03+45="}], "max_tokens": 8}
    for stream in (False, True):
        reply = httpx.post(f"{gateway.url}/v1/chat/completions", json={**body, "stream": stream}, timeout=30)
        assert reply.status_code == 503, reply.text
        assert reply.json()["error"]["code"] == "backend_unavailable"


def test_engine_and_vendor_labels(gateway: Launched) -> None:
    trtllm = {"engine": "triton-trtllm", "vendor": "nvidia", "accelerator": "h100"}
    assert (
        metric_value(gateway.url, "turnout_variant_info", variant="trtllm-grpc", kind="triton", **trtllm) == 1
    )
    cpu = {"engine": "triton", "vendor": "cpu", "accelerator": "cpu-x86"}
    assert metric_value(gateway.url, "turnout_variant_info", variant="turnout-generate", **cpu) == 1
    assert metric_value(gateway.url, "turnout_requests_total", variant="vllm-grpc", status="200") >= 3
