"""Benchmark: a Batch API batch against the same requests sent over HTTP (prints figures; not a test).

Starts ``turnout serve`` on the shipped models (each with its dynamic batcher: max batch 16,
5 ms), then, for ``--precision``, takes turns between:

* **HTTP**: ``--requests`` completions of ``--tokens`` generated tokens each (``ignore_eos``)
  sent by ``--concurrency`` keep-alive connections (``loadgen``: asyncio + httptools), as a
  client's own script would send a job;
* **batch**: the same requests as one batch (``batches.concurrency`` = ``--concurrency``), timed
  from ``POST /v1/batches`` until ``GET /v1/batches/{id}`` says ``completed`` (polled every
  20 ms; the file's upload is not counted), then the output file downloaded and checked.

Prints requests/s and generated tokens/s of each (the median over ``--turns`` turns) and the
ratio batch / HTTP: what handing a job to the gateway as a batch costs or saves against
sending it yourself at the same concurrency. A batch's requests skip HTTP (each goes into the
gateway's app in-process), but each pays for being kept in the store.

    python bench/batch_throughput.py [--requests 256] [--tokens 32] [--concurrency 16] [--turns 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's serving/
from embedded_engine import config_yaml
from loadgen import closed_loop, run_loop

from serving.launcher import gateway_process


def _body(model: str, tokens: int) -> dict[str, Any]:
    return {"model": model, "prompt": "the red", "max_tokens": tokens, "ignore_eos": True, "temperature": 0}


def _http(port: int, body: dict[str, Any], requests: int, concurrency: int) -> float:
    """Seconds to answer ``requests`` over HTTP at ``concurrency``."""
    data = orjson.dumps(body)
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    result = run_loop(closed_loop(port, head.encode() + data, concurrency, requests, 600.0))
    if result.errors or len(result.latencies_ns) != requests:
        raise SystemExit(f"HTTP phase: {result.errors} errors, {len(result.latencies_ns)} answers")
    return result.seconds


def _batch(client: httpx.Client, body: dict[str, Any], requests: int, tokens: int) -> float:
    """Seconds from a batch of ``requests`` being made to its completion (the upload apart)."""
    lines = [
        {"custom_id": str(n), "method": "POST", "url": "/v1/completions", "body": body}
        for n in range(requests)
    ]
    content = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    uploaded = client.post("/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"})
    made = {"input_file_id": uploaded.json()["id"], "endpoint": "/v1/completions", "completion_window": "24h"}
    started = time.perf_counter()
    batch = client.post("/v1/batches", json=made).json()
    while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
        time.sleep(0.02)
        batch = client.get(f"/v1/batches/{batch['id']}").json()
    seconds = time.perf_counter() - started
    if batch["status"] != "completed" or batch["request_counts"]["completed"] != requests:
        raise SystemExit(f"batch phase: {batch}")
    output = client.get(f"/v1/files/{batch['output_file_id']}/content").content.splitlines()
    generated = [orjson.loads(line)["response"]["body"]["usage"]["completion_tokens"] for line in output]
    if generated != [tokens] * requests:
        raise SystemExit("batch phase: an answer without all its tokens")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--precision", default="fp32", choices=("fp32", "int8", "int4"))
    parser.add_argument("--requests", type=int, default=256, help="requests in the job")
    parser.add_argument("--tokens", type=int, default=32, help="generated tokens per request")
    parser.add_argument("--concurrency", type=int, default=16, help="in flight at once, both ways")
    parser.add_argument("--turns", type=int, default=3, help="interleaved turns of each figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = yaml.safe_load(config_yaml(16))
        config["batches"] = {"concurrency": args.concurrency}
        path = Path(tmp) / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        body = _body(args.precision, args.tokens)
        http_s: list[float] = []
        batch_s: list[float] = []
        with gateway_process(path) as gateway, httpx.Client(base_url=gateway.url, timeout=60) as client:
            port = int(gateway.url.rsplit(":", 1)[1])
            _http(port, body, 2 * args.concurrency, args.concurrency)  # warm-up
            for _ in range(args.turns):
                http_s.append(_http(port, body, args.requests, args.concurrency))
                batch_s.append(_batch(client, body, args.requests, args.tokens))
    http, batch = statistics.median(http_s), statistics.median(batch_s)
    print(
        f"{args.requests} completions of {args.tokens} tokens ({args.precision}), "
        f"{args.concurrency} in flight, median of {args.turns} turns"
    )
    print(f"{'way':<8}{'seconds':>9}{'requests/s':>12}{'tokens/s':>10}")
    for name, seconds in (("HTTP", http), ("batch", batch)):
        rate = args.requests / seconds
        print(f"{name:<8}{seconds:>9.2f}{rate:>12.1f}{rate * args.tokens:>10.0f}")
    turns = [round(h / b, 2) for h, b in zip(http_s, batch_s, strict=True)]
    print(f"batch / HTTP throughput: {http / batch:.2f}x (each turn: {turns})")


if __name__ == "__main__":
    main()
