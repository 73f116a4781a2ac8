"""A real ``tritonserver`` (PyPI ``nvidia-pytriton``) serving the project's model repository.

Talks to it the way ``backends/triton.py`` will: ``tritonclient`` over HTTP and gRPC (sync
and aio), KServe v2 ``infer``, ``generate`` and ``generate_stream`` (SSE), gRPC bidirectional
streaming on decoupled models, the TensorRT-LLM-shaped ensemble and the vLLM-backend-shaped
model. The server is the session's one (``triton``, ``tests/integration/engines.py``); the
last tests prove that Triton's dynamic batcher formed batches larger than 1, from its own
statistics and metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio

from deploy.model.tasks import addition_answer, addition_prompt
from deploy.triton_repo import MODEL_NAMES
from deploy.triton_runtime import TritonServer
from tests.integration.foreground_cli import read_lines, stop_like_a_user, wait_for_line
from tests.integration.triton_fixture import distinct_ports, infer_inputs, sse_events, text_of


def test_server_and_every_model_ready(triton: TritonServer) -> None:
    with (
        httpclient.InferenceServerClient(url=triton.http_url.removeprefix("http://")) as http,
        grpcclient.InferenceServerClient(url=triton.grpc_url) as grpc,
    ):
        assert http.is_server_live() and http.is_server_ready() and grpc.is_server_ready()
        for name in MODEL_NAMES:
            assert http.is_model_ready(name) and grpc.is_model_ready(name), name
        config = grpc.get_model_config("turnout_tiny").config
    assert config.dynamic_batching.max_queue_delay_microseconds > 0
    assert triton.started_in_s < 80  # the fixture allows 90


def test_infer_over_http_answers_the_addition(triton: TritonServer) -> None:
    inputs = infer_inputs(httpclient, {"text_input": "03+45=", "max_tokens": 8})
    with httpclient.InferenceServerClient(url=triton.http_url.removeprefix("http://")) as client:
        result = client.infer("turnout_tiny", inputs)
    assert text_of(result) == "840"
    assert text_of(result, "finish_reason") == "stop"
    assert int(result.as_numpy("completion_tokens").item()) == 4  # 8 4 0 </s>
    assert int(result.as_numpy("prompt_tokens").item()) == 7  # BOS + 6


async def test_infer_over_grpc_aio_with_sampling_and_stop(triton: TritonServer) -> None:
    client = grpcaio.InferenceServerClient(url=triton.grpc_url)
    try:
        greedy = await client.infer(
            "turnout_tiny", infer_inputs(grpcaio, {"text_input": "12+34=", "max_tokens": 8})
        )
        assert text_of(greedy) == addition_answer(12, 34)
        seeded = {"text_input": "the red", "max_tokens": 12, "temperature": 0.9, "seed": 7}
        first = await client.infer("turnout_tiny", infer_inputs(grpcaio, seeded))
        again = await client.infer("turnout_tiny", infer_inputs(grpcaio, seeded))
        assert text_of(first) == text_of(again) and text_of(first)
        stopped = await client.infer(
            "turnout_tiny", infer_inputs(grpcaio, {"text_input": "03+45=", "max_tokens": 8, "stop": ["4"]})
        )
        assert text_of(stopped) == "8" and text_of(stopped, "finish_reason") == "stop"
    finally:
        await client.close()


def test_generate_json_endpoint(triton: TritonServer) -> None:
    reply = httpx.post(
        f"{triton.http_url}/v2/models/turnout_tiny/generate", json={"text_input": "03+45=", "max_tokens": 8}
    )
    assert reply.status_code == 200
    body = reply.json()
    assert body["text_output"] == "840" and body["finish_reason"] == "stop"
    bad = httpx.post(f"{triton.http_url}/v2/models/turnout_tiny/generate", json={"max_tokens": 8})
    assert bad.status_code == 400 and "text_input" in bad.json()["error"]


def test_top_p_or_top_k_without_a_temperature_samples_as_on_the_embedded_engine(triton: TritonServer) -> None:
    """They were greedy here while the embedded engine sampled: an A/B of the same model across
    the two differed for a request setting only top_p."""

    def text(**sampling: object) -> str:
        body = {"text_input": "", "max_tokens": 40, "seed": 5, **sampling}
        reply = httpx.post(f"{triton.http_url}/v2/models/turnout_tiny/generate", json=body)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["text_output"])

    greedy = text()
    assert text(top_p=0.9) == text(top_p=0.9, temperature=1.0) != greedy
    assert text(top_k=100) == text(top_k=100, temperature=1.0) != greedy

    def vllm_shaped(**sampling: object) -> str:  # the tensors: vllm face reads the same rule
        params = json.dumps({"max_tokens": 40, "seed": 5, **sampling})
        url = f"{triton.http_url}/v2/models/turnout_tiny_vllm/generate_stream"
        events = sse_events(url, {"text_input": "", "sampling_parameters": params, "stream": True})
        return "".join(str(event["text_output"]) for event in events)

    assert vllm_shaped(top_p=0.9) == vllm_shaped(top_p=0.9, temperature=1.0) != vllm_shaped()


def test_generate_stream_sends_one_event_per_piece(triton: TritonServer) -> None:
    url = f"{triton.http_url}/v2/models/turnout_tiny_stream/generate_stream"
    events = sse_events(url, {"text_input": "03+45=", "max_tokens": 8, "stream": True})
    assert len(events) >= 3
    assert "".join(e["text_output"] for e in events) == "840"
    assert events[-1]["finish_reason"] == "stop" and events[-1]["completion_tokens"] == 4
    whole = sse_events(url, {"text_input": "03+45=", "max_tokens": 8})  # stream=false: one final event
    assert [e["text_output"] for e in whole] == ["840"]


def test_generate_on_a_decoupled_model_is_an_error_with_status_200(triton: TritonServer) -> None:
    """Triton's quirk: /generate on a model that sends several responses answers 200 + error body."""
    reply = httpx.post(
        f"{triton.http_url}/v2/models/turnout_tiny_stream/generate",
        json={"text_input": "03+45=", "max_tokens": 8, "stream": True},
    )
    assert reply.status_code == 200
    assert "generate stream" in reply.json()["error"]


def test_grpc_bidirectional_stream_on_the_decoupled_model(triton: TritonServer) -> None:
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url=triton.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        for request_id, (a, b) in enumerate([(3, 45), (27, 68)]):
            client.async_stream_infer(
                "turnout_tiny_stream",
                infer_inputs(
                    grpcclient, {"text_input": addition_prompt(a, b), "max_tokens": 8, "stream": True}
                ),
                request_id=str(request_id),
                enable_empty_final_response=True,
            )
        pieces: dict[str, list[str]] = {"0": [], "1": []}
        finished: set[str] = set()
        deadline = time.monotonic() + 30
        while len(finished) < 2 and time.monotonic() < deadline:
            result, error = responses.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            if result.as_numpy("text_output") is not None:
                pieces[response.id].append(text_of(result))
            if response.parameters["triton_final_response"].bool_param:
                finished.add(response.id)
    finally:
        client.stop_stream()
        client.close()
    assert "".join(pieces["0"]) == addition_answer(3, 45) and len(pieces["0"]) >= 3
    assert "".join(pieces["1"]) == addition_answer(27, 68)


def test_ensemble_with_tensorrt_llm_tensor_names(triton: TritonServer) -> None:
    with httpclient.InferenceServerClient(url=triton.http_url.removeprefix("http://")) as client:
        _ensemble_answers(client)


def _ensemble_answers(client: httpclient.InferenceServerClient) -> None:
    request = {
        "text_input": "03+45=",
        "max_tokens": 8,
        "bad_words": [""],
        "stop_words": [""],
        "end_id": 2,
        "pad_id": 0,
        "temperature": 0.0,
        "top_p": 0.0,
        "stream": False,
    }
    echoed = client.infer("ensemble", infer_inputs(httpclient, request))
    assert text_of(echoed) == "03+45=840"  # TensorRT-LLM's default: the prompt comes back too
    answer = client.infer("ensemble", infer_inputs(httpclient, {**request, "exclude_input_in_output": True}))
    assert text_of(answer) == "840"
    assert int(answer.as_numpy("num_output_tokens").item()) == 3
    stopped = client.infer(
        "ensemble",
        infer_inputs(httpclient, {**request, "stop_words": ["4"], "exclude_input_in_output": True}),
    )
    assert text_of(stopped) == "84"  # a stop word ends generation and stays in the output, as in TRT-LLM
    with pytest.raises(Exception, match="decoupled"):
        client.infer("ensemble", infer_inputs(httpclient, {**request, "stream": True}))
    with pytest.raises(Exception, match="bad_words"):
        client.infer("ensemble", infer_inputs(httpclient, {**request, "bad_words": ["8"]}))


async def test_streaming_ensemble_over_grpc_aio(triton: TritonServer) -> None:
    client = grpcaio.InferenceServerClient(url=triton.grpc_url)
    request = {"text_input": "03+45=", "max_tokens": 8, "stream": True, "bad_words": [""], "stop_words": [""]}

    async def requests() -> Any:
        yield {
            "model_name": "ensemble_stream",
            "inputs": infer_inputs(grpcaio, request),
            "request_id": "s1",
            "enable_empty_final_response": True,
        }

    pieces = []
    try:
        async with asyncio.timeout(30):
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                if result.as_numpy("text_output") is not None:
                    pieces.append(text_of(result))
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
    finally:
        await client.close()
    assert "".join(pieces) == "840" and len([p for p in pieces if p]) >= 3


def test_vllm_backend_shaped_model(triton: TritonServer) -> None:
    url = f"{triton.http_url}/v2/models/turnout_tiny_vllm"
    params = json.dumps({"max_tokens": 8, "temperature": 0})
    echoed = sse_events(f"{url}/generate_stream", {"text_input": "03+45=", "sampling_parameters": params})
    assert [e["text_output"] for e in echoed] == ["03+45=840"]
    streamed = sse_events(
        f"{url}/generate_stream", {"text_input": "03+45=", "sampling_parameters": params, "stream": True}
    )
    assert "".join(e["text_output"] for e in streamed) == "840" and len(streamed) >= 3
    bad = httpx.post(f"{url}/generate_stream", json={"text_input": "x", "sampling_parameters": '{"n": 2}'})
    assert bad.status_code == 400 and "not supported here: n" in bad.text  # an SSE error event


def _stats(triton: TritonServer) -> tuple[int, int]:
    with httpclient.InferenceServerClient(url=triton.http_url.removeprefix("http://")) as client:
        stats = client.get_inference_statistics("turnout_tiny")["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def _metric(text: str, name: str) -> float:
    match = re.search(rf'^{name}{{model="turnout_tiny",version="1"}} (\S+)$', text, re.MULTILINE)
    assert match, name
    return float(match[1])


async def test_dynamic_batcher_forms_batches_under_concurrent_load(triton: TritonServer) -> None:
    before = _stats(triton)
    pairs = [(a, (a * 37 + 11) % 100) for a in range(32)]
    client = httpaio.InferenceServerClient(url=triton.http_url.removeprefix("http://"))
    try:
        results = await asyncio.gather(
            *(
                client.infer(
                    "turnout_tiny",
                    infer_inputs(httpaio, {"text_input": addition_prompt(a, b), "max_tokens": 8}),
                )
                for a, b in pairs
            )
        )
    finally:
        await client.close()
    assert [text_of(r) for r in results] == [addition_answer(a, b) for a, b in pairs]
    inferences, executions = (now - then for now, then in zip(_stats(triton), before, strict=True))
    print(f"turnout_tiny: {inferences} inferences in {executions} executions")
    assert inferences == 32
    assert executions < inferences  # some execute() calls got several requests: batches > 1
    metrics = httpx.get(triton.metrics_url).text
    assert _metric(metrics, "nv_inference_exec_count") < _metric(metrics, "nv_inference_count")


def test_cli_runs_triton_in_the_foreground_until_ctrl_c(triton: TritonServer, tmp_path: Path) -> None:
    http, grpc, metrics = distinct_ports(3)
    cmd = [sys.executable, "-m", "serving.cli", "backends", "up", "triton"]
    args = ["--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    args += ["--log", str(tmp_path / "tritonserver.log")]
    proc = subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: list[bytes] = []
    try:
        lines = read_lines(proc)
        # the CLI's own line, not the server's health: Ctrl-C before it is the start-up case below
        assert wait_for_line(lines, b"triton ready", seen, 60), b"".join(seen)
        reply = httpx.post(
            f"http://127.0.0.1:{http}/v2/models/turnout_tiny/generate",
            json={"text_input": "03+45=", "max_tokens": 8},
        )
        assert reply.json()["text_output"] == "840"
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    finally:
        stop_like_a_user(proc)
    assert wait_for_line(lines, None, seen, 30)  # the rest of the output, until it ends
    out = b"".join(seen)
    assert proc.returncode == 0, out
    assert b"triton ready" in out
    staged = re.search(rb"models from (\S+) ", out)
    assert staged and not Path(staged[1].decode()).exists()  # the staged repository is removed
    shm = re.search(rb"shared memory /dev/shm/(\S+)\*", out)
    assert shm and shm[1].decode() != triton.shm_prefix
    assert not list(Path("/dev/shm").glob(f"{shm[1].decode()}*"))  # the CLI's server left none behind


def _has_text(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0


def test_ctrl_c_while_triton_starts_stops_it_cleanly(triton: TritonServer, tmp_path: Path) -> None:
    http, grpc, metrics = distinct_ports(3)
    log = tmp_path / "tritonserver.log"
    cmd = [sys.executable, "-m", "serving.cli", "backends", "up", "triton", "--port", str(http)]
    cmd += ["--grpc-port", str(grpc), "--metrics-port", str(metrics), "--log", str(log)]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the CLI stages its model repository
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not _has_text(log) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # tritonserver is running and logging; loading the model takes seconds more
        assert _has_text(log) and proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        stop_like_a_user(proc)
    assert proc.returncode == 0, out
    assert b"stopped tritonserver before it was ready" in out and b"Traceback" not in out
    assert not list(tmp_path.glob("turnout-triton-*"))  # the staged repository is removed
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{http}/v2/health/live", timeout=1)


def test_cli_bad_log_and_repo_paths_are_messages_and_leave_no_staged_repository(
    triton: TritonServer, tmp_path: Path
) -> None:
    """(The ``triton`` fixture: the install is there, so nothing is downloaded.)"""
    http, grpc, metrics = distinct_ports(3)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cmd = [sys.executable, "-m", "serving.cli", "backends", "up", "triton", "--port", str(http)]
    cmd += ["--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the CLI stages its model repository
    for extra, code, said in (
        (["--log", str(a_file / "x.log")], 1, f"cannot write the log {a_file / 'x.log'}"),
        (["--log", str(tmp_path)], 1, f"cannot write the log {tmp_path}"),
        (["--repo-dir", str(a_file)], 2, f"--repo-dir {a_file} is a file, not a folder"),
        (["--metrics-port", str(grpc)], 1, f"port {grpc} is given for two of its listeners"),
    ):
        done = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == code and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("turnout-triton-*"))
