"""The embedded engine behind the API: dynamic batching, cancellation, bounded queue, metrics."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from deploy.model.artifacts import onnx_dir
from serving.launcher import gateway_process


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape(base: str) -> str:
    return httpx.get(f"{base}/metrics").text


async def _many(base: str, count: int, body: dict[str, object]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as client:
        return await asyncio.gather(*(client.post(f"{base}/v1/completions", json=body) for _ in range(count)))


def test_concurrent_requests_are_batched(gateway_url: str) -> None:
    before = scrape(gateway_url)
    body = {"model": "turnout-tiny-int8", "prompt": "the", "max_tokens": 32, "ignore_eos": True}
    replies = asyncio.run(_many(gateway_url, 16, body))
    assert all(r.status_code == 200 for r in replies)
    assert all(r.json()["usage"]["completion_tokens"] == 32 for r in replies)
    after = scrape(gateway_url)
    batches = metric(after, "turnout_batch_size_count", variant="turnout-tiny-int8") - metric(
        before, "turnout_batch_size_count", variant="turnout-tiny-int8"
    )
    sequences = metric(after, "turnout_batch_size_sum", variant="turnout-tiny-int8") - metric(
        before, "turnout_batch_size_sum", variant="turnout-tiny-int8"
    )
    assert sequences == 16
    assert sequences / batches > 1.5, f"{sequences} sequences in {batches} batches"


async def _open_and_leave(base: str, body: dict[str, object], streams: int, lines: int) -> list[str]:
    """Open ``streams`` streams, read ``lines`` lines of each, then hang up on all of them."""

    async def one(client: httpx.AsyncClient) -> str:
        async with client.stream("POST", f"{base}/v1/completions", json=body) as reply:
            received = []
            async for line in reply.aiter_lines():
                received.append(line)
                if len(received) == lines:
                    break
            return received[0]

    async with httpx.AsyncClient(timeout=30) as client:
        return await asyncio.gather(*(one(client) for _ in range(streams)))


def test_client_disconnect_cancels_generation(gateway_url: str) -> None:
    variant = "turnout-tiny-int4"
    before = metric(scrape(gateway_url), "turnout_engine_generated_tokens_total", variant=variant)
    body = {"model": variant, "prompt": "the", "max_tokens": 480, "ignore_eos": True, "stream": True}
    streams = 16  # one batch: ~7,700 tokens of work if nobody cancelled
    firsts = asyncio.run(_open_and_leave(gateway_url, body, streams, lines=6))
    assert all(line.startswith("data: ") for line in firsts)
    deadline = time.monotonic() + 10
    cancelled = 0.0
    while time.monotonic() < deadline:
        cancelled = metric(scrape(gateway_url), "turnout_requests_total", route=variant, status="499")
        if cancelled == streams:
            break
        time.sleep(0.05)
    assert cancelled == streams
    time.sleep(0.3)
    generated = metric(scrape(gateway_url), "turnout_engine_generated_tokens_total", variant=variant) - before
    assert streams * 3 <= generated < 0.6 * streams * 480, f"engine decoded {generated} tokens"


async def _ask_and_leave(base: str, body: dict[str, object], requests: int, after: float) -> int:
    """Send non-streamed requests and hang up on each after ``after`` seconds; count the hang-ups."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=after)) as client:
        replies = await asyncio.gather(
            *(client.post(f"{base}/v1/completions", json=body) for _ in range(requests)),
            return_exceptions=True,
        )
    return sum(isinstance(r, httpx.ReadTimeout) for r in replies)


def test_client_disconnect_cancels_a_non_streamed_request(gateway_url: str) -> None:
    variant = "turnout-tiny-int8"
    before = scrape(gateway_url)
    body = {"model": variant, "prompt": "the", "max_tokens": 480, "ignore_eos": True}
    requests = 16
    assert asyncio.run(_ask_and_leave(gateway_url, body, requests, after=0.1)) == requests
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        after = scrape(gateway_url)
        if metric(after, "turnout_requests_total", route=variant, status="499") == requests:
            break
        time.sleep(0.05)
    assert metric(after, "turnout_requests_total", route=variant, status="499") == requests
    time.sleep(0.3)
    name = "turnout_engine_generated_tokens_total"
    generated = metric(scrape(gateway_url), name, variant=variant) - metric(before, name, variant=variant)
    assert generated < 0.6 * requests * 480, f"engine decoded {generated} tokens"


def test_request_metrics_per_route_and_variant(gateway_url: str) -> None:
    labels = {"route": "turnout-tiny", "variant": "turnout-tiny", "endpoint": "completions"}
    paced = metric(scrape(gateway_url), "turnout_time_per_output_token_seconds_count", **labels)
    body = {"model": "turnout-tiny", "prompt": "12+34=", "max_tokens": 8}
    assert httpx.post(f"{gateway_url}/v1/completions", json=body).status_code == 200
    stream = {**body, "stream": True, "ignore_eos": True}
    assert httpx.post(f"{gateway_url}/v1/completions", json=stream).status_code == 200
    text = scrape(gateway_url)
    # one observation per finished stream of 2+ tokens: its pace after the first token
    assert metric(text, "turnout_time_per_output_token_seconds_count", **labels) == paced + 1
    assert 0 < metric(text, "turnout_time_per_output_token_seconds_sum", **labels) < 8
    assert metric(text, "turnout_requests_total", status="200", **labels) >= 2
    assert metric(text, "turnout_request_latency_seconds_count", **labels) >= 2
    assert metric(text, "turnout_time_to_first_token_seconds_count", **labels) >= 1
    assert metric(text, "turnout_tokens_total", route="turnout-tiny", kind="completion") >= 6
    assert metric(text, "turnout_tokens_total", route="turnout-tiny", kind="prompt") >= 14
    assert "turnout_queue_depth{" in text
    assert 'turnout_circuit_open{variant="turnout-tiny-int4"} 0.0' in text  # present before any trip


@contextmanager
def _one_embedded_route(tmp_path_factory: pytest.TempPathFactory, name: str, batching: str) -> Iterator[str]:
    """A gateway serving the shipped fp32 model as route ``name`` with these batching settings."""
    config = tmp_path_factory.mktemp("cfg") / "gateway.yaml"
    config.write_text(
        f"variants:\n  {name}: {{kind: embedded, batching: {{{batching}}}}}\n"
        f"routes:\n  {name}: {{targets: [{{variant: {name}}}]}}\n"
        "auth: {anonymous_clients: true}\n"
    )
    with gateway_process(Path(config)) as gateway:
        yield gateway.url


@pytest.fixture(scope="module")
def tiny_queue_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _one_embedded_route(
        tmp_path_factory, "small", "max_batch_size: 1, max_queue_size: 2, max_queue_delay_ms: 0"
    ) as url:
        yield url


def test_full_queue_answers_429_with_retry_after(tiny_queue_gateway: str) -> None:
    body = {"model": "small", "prompt": "the", "max_tokens": 200, "ignore_eos": True}
    replies = asyncio.run(_many(tiny_queue_gateway, 10, body))
    statuses = sorted(r.status_code for r in replies)
    assert statuses.count(200) >= 2  # the queue holds two (a third may already be running)
    refused = [r for r in replies if r.status_code == 429]
    assert refused, statuses
    for reply in refused:
        assert int(reply.headers["retry-after"]) >= 1
        assert reply.json()["error"]["type"] == "rate_limit_error"
    assert set(statuses) <= {200, 429}
    after = httpx.post(f"{tiny_queue_gateway}/v1/completions", json={**body, "max_tokens": 2})
    assert after.status_code == 200


@pytest.fixture(scope="module")
def lazy_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A lone request waits a whole second in the queue for batch mates: time to leave it there."""
    with _one_embedded_route(
        tmp_path_factory, "lazy", "max_batch_size: 4, max_queue_size: 2, max_queue_delay_ms: 1000"
    ) as url:
        yield url


@pytest.mark.parametrize("stream", [True, False])
def test_requests_abandoned_in_the_queue_free_their_place_at_once(lazy_gateway: str, stream: bool) -> None:
    body = {"model": "lazy", "prompt": "the", "max_tokens": 4, "stream": stream}
    before = metric(scrape(lazy_gateway), "turnout_requests_total", route="lazy", status="499")
    started = time.monotonic()
    assert asyncio.run(_ask_and_leave(lazy_gateway, body, 2, after=0.2)) == 2  # still queued
    time.sleep(0.2)
    text = scrape(lazy_gateway)
    assert time.monotonic() - started < 0.9  # their batch would only have started at 1 s
    assert metric(text, "turnout_queue_depth", variant="lazy") == 0  # the queue of two is free
    assert metric(text, "turnout_requests_total", route="lazy", status="499") == before + 2
    assert httpx.post(f"{lazy_gateway}/v1/completions", json={**body, "stream": False}).status_code == 200


def test_a_batch_of_prompts_never_fills_its_own_queue(tiny_queue_gateway: str) -> None:
    """Six prompts against a queue of two, on an idle gateway: they take turns, no 429."""
    prompts = [f"{a:02d}+{a + 1:02d}=" for a in range(6)]
    body = {"model": "small", "prompt": prompts, "max_tokens": 4}
    reply = httpx.post(f"{tiny_queue_gateway}/v1/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    choices = reply.json()["choices"]
    assert [c["index"] for c in choices] == list(range(6))
    assert all(c["text"].isdigit() for c in choices)


@pytest.fixture(scope="module")
def sampling_model_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A copy of the shipped fp32 folder whose generation config says to sample by default."""
    folder = tmp_path_factory.mktemp("model") / "fp32-sampling"
    shutil.copytree(onnx_dir("fp32"), folder)
    genai_config = json.loads((folder / "genai_config.json").read_text())
    genai_config["search"].update(do_sample=True, temperature=1.0, top_k=0)
    (folder / "genai_config.json").write_text(json.dumps(genai_config))
    config = folder.parent / "gateway.yaml"
    config.write_text(
        f"variants:\n  s: {{kind: embedded, model_dir: {folder}}}\n"
        "routes:\n  s: {targets: [{variant: s}]}\n"
        "auth: {anonymous_clients: true}\n"
    )
    with gateway_process(config) as gateway:
        yield gateway.url


def test_unset_temperature_follows_the_model_default(sampling_model_gateway: str, gateway_url: str) -> None:
    def texts(base: str, model: str, **extra: object) -> set[str]:
        body = {"model": model, "prompt": "the", "max_tokens": 40, "ignore_eos": True, **extra}
        return {
            httpx.post(f"{base}/v1/completions", json=body).json()["choices"][0]["text"] for _ in range(3)
        }

    assert len(texts(gateway_url, "turnout-tiny")) == 1  # the shipped model defaults to greedy
    assert len(texts(sampling_model_gateway, "s")) > 1  # this copy defaults to sampling
    assert len(texts(sampling_model_gateway, "s", temperature=0)) == 1  # 0 is always greedy
