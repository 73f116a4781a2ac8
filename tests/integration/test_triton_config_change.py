"""A Triton model reloaded with another config is served by a running gateway, without a restart.

The adapter reads each model's config once (batch dimension, decoupled, input types) and shapes
inputs by it. A Triton restarted with a changed config refused every request after that (400
``unexpected shape for input 'max_tokens' … Expected [1], got [1,1]``) until the gateway was
restarted (QA). Now a request Triton refuses has the config read again and, if it changed, is
sent once more, shaped for the new one. Here a real ``tritonserver`` in explicit model-control
mode reloads the shipped ``turnout_tiny`` with ``max_batch_size: 0`` (no batch dimension).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from backends.base import GenerateRequest, SamplingParams
from backends.settings import TritonSettings
from backends.triton import TritonBackend
from deploy.triton_repo import stage_repository
from deploy.triton_runtime import start_triton
from tests.integration.engines import distinct_ports, triton_install_or_skip

REQUEST = GenerateRequest(
    kind="completion", params=SamplingParams(max_tokens=4, temperature=0), prompt="12+34="
)


def _reload_unbatched(http_url: str, model: str) -> None:
    config = httpx.get(f"{http_url}/v2/models/{model}/config", timeout=10).json()
    assert config["max_batch_size"] > 0
    config["max_batch_size"] = 0
    config.pop("dynamic_batching", None)  # needs a batch dimension
    body = {"parameters": {"config": json.dumps(config)}}
    reply = httpx.post(f"{http_url}/v2/repository/models/{model}/load", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert httpx.get(f"{http_url}/v2/models/{model}/config", timeout=10).json()["max_batch_size"] == 0


async def test_a_model_reloaded_with_another_config_is_served_without_a_gateway_restart(
    tmp_path: Path,
) -> None:
    install = triton_install_or_skip()
    repo = stage_repository(tmp_path / "repo")
    http, grpc, metrics = distinct_ports(3)
    explicit = (
        "--model-control-mode=explicit",
        "--load-model=turnout_tiny",
        "--load-model=turnout_tiny_stream",
    )
    server = start_triton(
        install, repo, http, grpc, metrics, timeout=90, log=tmp_path / "t.log", extra_args=explicit
    )
    backends = [
        TritonBackend(
            f"tiny-{protocol}",
            TritonSettings.model_validate(
                {
                    "preset": "turnout-tiny",
                    "protocol": protocol,
                    "grpc_url": f"127.0.0.1:{grpc}",
                    "url": server.http_url,
                }
            ),
        )
        for protocol in ("grpc", "generate")
    ]
    try:
        before = []
        for backend in backends:
            await backend.start()
            before.append(await backend.complete(REQUEST))  # the batched config, read and cached
        grpc_backend = backends[0]
        streamed = "".join([chunk.text async for chunk in grpc_backend.stream(REQUEST)])
        _reload_unbatched(server.http_url, "turnout_tiny")
        _reload_unbatched(server.http_url, "turnout_tiny_stream")
        assert "".join([chunk.text async for chunk in grpc_backend.stream(REQUEST)]) == streamed
        for backend, first in zip(backends, before, strict=True):
            after = await backend.complete(REQUEST)
            assert (after.text, after.finish_reason) == (first.text, first.finish_reason), backend.name
        # gRPC shapes the tensors itself: it read the config again. (Triton's generate endpoint
        # shapes them from the JSON, so HTTP was never refused.)
        assert (await grpc_backend.facts("turnout_tiny")).batched is False
    finally:
        for backend in backends:
            await backend.close()
        server.stop()
