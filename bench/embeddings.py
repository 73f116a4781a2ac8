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

    python bench/embeddings.py [--seconds 2] [--turns 3] [--words 16] [--batch 32]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's serving/
from embedded_engine import PRECISIONS, config_yaml
from loadgen import PhaseResult, closed_loop, run_loop

from loadtests.shapes import prompt_of
from serving.launcher import gateway_process


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


async def measure(port: int, args: argparse.Namespace) -> dict[tuple[str, str], list[float]]:
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.turns):
        for model in PRECISIONS:
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measured phase")
    parser.add_argument("--turns", type=int, default=3, help="interleaved turns of every figure")
    parser.add_argument("--words", type=int, default=16, help="words (tokens) per input")
    parser.add_argument("--batch", type=int, default=32, help="inputs per request in the batched phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gateway.yaml"
        config.write_text(config_yaml(16))
        with gateway_process(config) as gateway:
            figures = run_loop(measure(int(gateway.url.rsplit(":", 1)[1]), args))
    med = statistics.median
    print(
        f"embeddings on the embedded engine through the API, {args.words} words (+BOS) per input, "
        f"median of {args.turns} turns of {args.seconds:g} s"
    )
    print(
        f"{'precision':<10}{'c1 p50 ms':>10}{'c1 p99 ms':>10}{'inputs/s c1':>13}{'c16':>8}"
        f"{f'{args.batch}/request':>13}{'batched / c16':>15}"
    )
    for model in PRECISIONS:
        cell = {name: med(figures[(model, name)]) for name in ("p50", "p99", "c1", "c16", "batched")}
        print(
            f"{model:<10}{cell['p50']:>10.2f}{cell['p99']:>10.2f}{cell['c1']:>13.0f}{cell['c16']:>8.0f}"
            f"{cell['batched']:>13.0f}{cell['batched'] / cell['c16']:>14.2f}x"
        )


if __name__ == "__main__":
    main()
