"""Benchmark: the embedded engine through the API (prints figures; not a test).

For each precision (fp32, int8, int4): generated tokens/s at 1 and 16 concurrent
streams, with dynamic batching (max batch 16) and, as the baseline, with batch size 1.
Also the gateway's resident memory with all three models loaded. Every stream asks for
a fixed number of tokens (``ignore_eos``) so runs compare like with like.

    python bench/embedded_engine.py [--tokens 128] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from serving.launcher import gateway_process

PRECISIONS = ("fp32", "int8", "int4")


def config_yaml(max_batch_size: int) -> str:
    lines = ["variants:"]
    for precision in PRECISIONS:
        lines += [
            f"  {precision}:",
            "    kind: embedded",
            f"    precision: {precision}",
            f"    batching: {{max_batch_size: {max_batch_size}, max_queue_delay_ms: 5,"
            " max_queue_size: 1024}",
        ]
    lines.append("routes:")
    lines += [f"  {p}: {{targets: [{{variant: {p}}}]}}" for p in PRECISIONS]
    lines += ["auth: {anonymous_clients: true}", 'store: {url: "sqlite://"}']  # no state left behind
    return "\n".join(lines) + "\n"


async def one_stream(client: httpx.AsyncClient, url: str, model: str, tokens: int) -> int:
    body = {
        "model": model,
        "prompt": "the red",
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    generated = 0
    async with client.stream("POST", url, json=body) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if line.startswith('data: {"id"') and '"usage":{' in line:
                generated = int(line.split('"completion_tokens":')[1].split(",")[0])
    return generated


async def tokens_per_second(base: str, model: str, streams: int, tokens: int, rounds: int) -> float:
    url = f"{base}/v1/completions"
    async with httpx.AsyncClient(timeout=300) as client:
        await one_stream(client, url, model, 8)  # warm-up
        started = time.perf_counter()
        total = 0
        for _ in range(rounds):
            counts = await asyncio.gather(*(one_stream(client, url, model, tokens) for _ in range(streams)))
            total += sum(counts)
        return total / (time.perf_counter() - started)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(max_batch_size: int, tokens: int, rounds: int) -> tuple[dict[tuple[str, int], float], float]:
    results: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gateway.yaml"
        path.write_text(config_yaml(max_batch_size))
        with gateway_process(path) as gateway:
            for precision in PRECISIONS:
                for streams in (1, 16):
                    results[(precision, streams)] = asyncio.run(
                        tokens_per_second(gateway.url, precision, streams, tokens, rounds)
                    )
            rss = rss_mb(gateway.pid)
    return results, rss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of concurrent streams")
    args = parser.parse_args()
    batched, rss = measure(16, args.tokens, args.rounds)
    unbatched, _ = measure(1, args.tokens, args.rounds)
    print(f"embedded engine, {args.tokens} tokens per stream, {args.rounds} rounds, tokens/s through the API")
    print(f"{'precision':<10}{'1 stream':>10}{'16 streams':>12}{'16, batch=1':>13}{'batching gain':>15}")
    for precision in PRECISIONS:
        single = batched[(precision, 1)]
        many = batched[(precision, 16)]
        baseline = unbatched[(precision, 16)]
        print(f"{precision:<10}{single:>10.0f}{many:>12.0f}{baseline:>13.0f}{many / baseline:>14.2f}x")
    print("target: batching gain >= 3.00x at 16 streams")
    print(f"gateway RSS with fp32+int8+int4 loaded, after load: {rss:.0f} MB (target <= 500 MB)")


if __name__ == "__main__":
    main()
