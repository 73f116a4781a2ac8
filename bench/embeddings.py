"""Benchmark: /v1/embeddings on the embedded engine through the API (prints figures; not a test).

Starts ``turnout serve`` with the shipped fp32, int8 and int4 models, then for each precision
measures, on keep-alive connections (``loadgen``: asyncio + httptools, not httpx):

* one input per request at concurrency 1: latency p50 and p99;
* one input per request at concurrency 16: inputs/s (requests queue for the variant's one
  embedding thread, each a forward pass of its own);
* ``--batch`` inputs per request at concurrency 1: inputs/s (one padded forward pass per
  32 inputs), and the ratio to one input per request.

Every input is ``--words`` short English words (the load tests' words, one token each to the
shipped model; BOS on top), the same text each time. Phases take turns, precision by
precision, ``--turns`` times; figures are medians.

``--triton`` adds two rows: the same fp32 vectors from a real ``tritonserver`` (the shipped
repository's ``turnout_tiny_embed``, started here: ``deploy/triton_runtime.py``, installed on
first use) through ``triton`` variants over HTTP generate and over gRPC. Triton's model has no
batch dimension, so requests are embedded one call each, one at a time on its one instance.

    python bench/embeddings.py [--seconds 2] [--turns 3] [--words 16] [--batch 32] [--triton]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's serving/
import yaml
from embedded_engine import PRECISIONS, config_yaml
from loadgen import PhaseResult, closed_loop, run_loop

from loadtests.shapes import prompt_of
from serving.launcher import free_port, gateway_process

TRITON_ROWS = ("triton-http", "triton-grpc")


def request(port: int, model: str, words: int, inputs: int) -> bytes:
    text = prompt_of(words, random.Random(0))  # the load tests' words: one token each
    body = orjson.dumps({"model": model, "input": [text] * inputs, "encoding_format": "base64"})
    head = (
        f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def phase(port: int, data: bytes, concurrency: int, seconds: float) -> PhaseResult:
    await closed_loop(port, data, concurrency, 20, 10.0)  # warm-up
    result = await closed_loop(port, data, concurrency, 10**9, seconds)
    if result.errors:
        raise RuntimeError(f"{result.errors} requests failed")
    return result


async def measure(
    port: int, args: argparse.Namespace, models: tuple[str, ...]
) -> dict[tuple[str, str], list[float]]:
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.turns):
        for model in models:
            one, many = request(port, model, args.words, 1), request(port, model, args.words, args.batch)
            alone = await phase(port, one, 1, args.seconds)
            crowd = await phase(port, one, 16, args.seconds)
            batched = await phase(port, many, 1, args.seconds)
            for name, value in (
                ("p50", alone.pct("total", 0.5)),
                ("p99", alone.pct("total", 0.99)),
                ("c1", alone.rps),
                ("c16", crowd.rps),
                ("batched", batched.rps * args.batch),
            ):
                figures.setdefault((model, name), []).append(value)
    return figures


@contextlib.contextmanager
def _triton(work: Path) -> Iterator[tuple[str, str]]:
    """The shipped repository in a real tritonserver: its HTTP URL and gRPC address."""
    from deploy.triton_repo import stage_repository
    from deploy.triton_runtime import ensure_triton, triton_server

    repo = stage_repository(work / "repo")
    ports: set[int] = set()
    while len(ports) < 3:  # HTTP, gRPC, metrics: three different ones
        ports.add(free_port())
    log = work / "tritonserver.log"
    with triton_server(ensure_triton(), repo, *sorted(ports), timeout=120, log=log) as server:
        yield server.http_url, server.grpc_url


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measured phase")
    parser.add_argument("--turns", type=int, default=3, help="interleaved turns of every figure")
    parser.add_argument("--words", type=int, default=16, help="words (tokens) per input")
    parser.add_argument("--batch", type=int, default=32, help="inputs per request in the batched phase")
    parser.add_argument("--triton", action="store_true", help="add fp32 through a real Triton, HTTP and gRPC")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        config = yaml.safe_load(config_yaml(16))
        models: tuple[str, ...] = PRECISIONS
        if args.triton:
            http, grpc = stack.enter_context(_triton(Path(tmp)))
            config["variants"]["triton-http"] = {"kind": "triton", "preset": "turnout-tiny", "url": http}
            grpc_variant = {"kind": "triton", "preset": "turnout-tiny", "protocol": "grpc", "grpc_url": grpc}
            config["variants"]["triton-grpc"] = grpc_variant
            config["routes"] |= {name: {"targets": [{"variant": name}]} for name in TRITON_ROWS}
            models += TRITON_ROWS
        path = Path(tmp) / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        with gateway_process(path) as gateway:
            figures = run_loop(measure(int(gateway.url.rsplit(":", 1)[1]), args, models))
    med = statistics.median
    print(
        f"embeddings through the API, {args.words} words (+BOS) per input, "
        f"median of {args.turns} turns of {args.seconds:g} s"
    )
    print(
        f"{'variant':<12}{'c1 p50 ms':>10}{'c1 p99 ms':>10}{'inputs/s c1':>13}{'c16':>8}"
        f"{f'{args.batch}/request':>13}{'batched / c16':>15}"
    )
    for model in models:
        cell = {name: med(figures[(model, name)]) for name in ("p50", "p99", "c1", "c16", "batched")}
        print(
            f"{model:<12}{cell['p50']:>10.2f}{cell['p99']:>10.2f}{cell['c1']:>13.0f}{cell['c16']:>8.0f}"
            f"{cell['batched']:>13.0f}{cell['batched'] / cell['c16']:>14.2f}x"
        )


if __name__ == "__main__":
    main()
