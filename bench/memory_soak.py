"""Benchmark: the embedded gateway's memory under bounded mixed traffic (prints figures; not a test).

Starts ``turnout serve`` with no config (the shipped fp32, int8 and int4 models on the embedded
engine; its store in a temporary ``HOME``), then ``--users`` clients send, for ``--seconds``,
requests drawn at random across the three models: chat (plain, with logprobs, streamed to the
end, streamed and cut after three events), completions of two prompts, embeddings of two
inputs, stored Responses, and a malformed body (``--kinds``: a subset, to find what grows).
Every ``--every`` seconds it prints the gateway's resident memory (``VmRSS``) and the requests
answered so far, by kind; at the end, how much the resident memory grew after the first period
(the allocator's and the caches' warm-up) per 10,000 requests. A gateway that keeps something
per request (a cut stream's state, a finished request's metrics series) shows here as steady
growth.

Each answer is checked: a 200 (a 400 for the malformed body, whose error body must be in the
OpenAI shape); anything else is counted as an error, and the gateway must still answer
``/health`` at the end.

    python bench/memory_soak.py [--seconds 300] [--every 60] [--users 12] [--kinds chat,stream-cut]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's serving/
from embedded_engine import rss_mb

from serving.launcher import gateway_process

MODELS = ("turnout-tiny", "turnout-tiny-int8", "turnout-tiny-int4")
KINDS = (
    "chat",
    "chat-logprobs",
    "stream",
    "stream-cut",
    "completions",
    "embeddings",
    "responses",
    "malformed",
)


async def one(client: httpx.AsyncClient, kind: str, rng: random.Random) -> bool:
    """Send one request of ``kind``; True when it was answered as it should be."""
    model = rng.choice(MODELS)
    messages = [{"role": "user", "content": f"{rng.randint(10, 99)}+{rng.randint(10, 99)}="}]
    if kind in ("stream", "stream-cut"):
        body = {
            "model": model,
            "messages": messages,
            "max_tokens": 32,
            "temperature": 0.8,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
            events, last = 0, ""
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    events, last = events + 1, line
                if kind == "stream-cut" and events == 3:
                    return answer.status_code == 200  # the client leaves mid-stream
            return answer.status_code == 200 and last == "data: [DONE]"
    if kind == "malformed":
        answer = await client.post(
            "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
        )
        return answer.status_code == 400 and set(answer.json()["error"]) >= {
            "message",
            "type",
            "param",
            "code",
        }
    path, body = {
        "chat": ("/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 16}),
        "chat-logprobs": (
            "/v1/chat/completions",
            {"model": model, "messages": messages, "max_tokens": 8, "logprobs": True, "top_logprobs": 3},
        ),
        "completions": (
            "/v1/completions",
            {"model": model, "prompt": ["the cat", "12+34="], "max_tokens": 12},
        ),
        "embeddings": ("/v1/embeddings", {"model": model, "input": ["hello world", "a b c"]}),
        "responses": ("/v1/responses", {"model": model, "input": "12+34=", "max_output_tokens": 16}),
    }[kind]
    return (await client.post(path, json=body)).status_code == 200


async def soak(base: str, pid: int, seconds: float, every: float, users: int, kinds: list[str]) -> None:
    answered: Counter[str] = Counter()
    errors = 0
    samples: list[tuple[int, float]] = []

    async def user(client: httpx.AsyncClient, rng: random.Random, until: float) -> None:
        nonlocal errors
        while time.monotonic() < until:
            kind = rng.choice(kinds)
            try:
                good = await one(client, kind, rng)
            except httpx.HTTPError:
                good = False
            answered[kind] += good
            errors += not good

    headers = {"authorization": "Bearer sk-soak"}
    async with httpx.AsyncClient(base_url=base, timeout=60, headers=headers) as client:
        print(f"start: RSS {rss_mb(pid):.0f} MB", flush=True)
        started = time.monotonic()
        period = 0
        while (elapsed := time.monotonic() - started) < seconds - 1e-3:
            until = time.monotonic() + min(every, seconds - elapsed)
            await asyncio.gather(
                *(user(client, random.Random(period * 1000 + n), until) for n in range(users))
            )
            period += 1
            total = sum(answered.values())
            samples.append((total, rss_mb(pid)))
            by_kind = ", ".join(f"{kind} {answered[kind]}" for kind in kinds)
            print(
                f"{time.monotonic() - started:6.0f} s: RSS {samples[-1][1]:.0f} MB, "
                f"{total} answered, {errors} errors ({by_kind})",
                flush=True,
            )
        healthy = (await client.get("/health")).status_code == 200
    if len(samples) >= 2:
        (first_count, first_rss), (last_count, last_rss) = samples[0], samples[-1]
        per_10k = (last_rss - first_rss) / max(last_count - first_count, 1) * 10_000
        print(
            f"RSS growth after the first period: {last_rss - first_rss:+.1f} MB over "
            f"{last_count - first_count} requests ({per_10k:+.2f} MB per 10,000 requests)"
        )
    print(f"errors: {errors}; gateway answering /health at the end: {'yes' if healthy else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long the traffic runs")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between memory samples")
    parser.add_argument("--users", type=int, default=12, help="concurrent clients")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"the requests to draw from, comma-separated: {','.join(KINDS)}",
    )
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    if not kinds or not set(kinds) <= set(KINDS):
        parser.error(f"--kinds: each of {', '.join(KINDS)}")
    with (
        tempfile.TemporaryDirectory(prefix="turnout-soak-") as home,
        gateway_process(env={"HOME": home}, timeout=120) as gateway,
    ):
        asyncio.run(soak(gateway.url, gateway.pid, args.seconds, args.every, args.users, kinds))


if __name__ == "__main__":
    main()
