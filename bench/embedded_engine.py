"""Benchmark: the embedded engine through the API (prints figures; not a test).

For each precision (fp32, int8, int4): generated tokens/s at 1 and 16 concurrent
streams, with dynamic batching (max batch 16) and, as the baseline, with batch size 1.
Also the gateway's resident memory with all three models loaded, and, once the gateways
have stopped, each model's decode step alone at batch 1 and 16 (the engine's own share of the
gain). Every stream asks for a fixed number of tokens (``ignore_eos``) so runs compare like
with like.

Both gateways (batched and batch size 1) run at once and take turns, precision by precision,
in ``--turns`` interleaved turns: each figure is the median of its turns', and the batching gain
the median of each turn's batched / batch-1 ratio. Measured once each, one gateway after the
other (~0.5 s a figure), this VM's slow spells put the same code's gains anywhere in 2.2-4.2x
within an hour.

    python bench/embedded_engine.py [--tokens 128] [--rounds 2] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's serving/
from loadgen import Conn
from paired_stats import median_interval, verdict

from serving.launcher import gateway_process

PRECISIONS = ("fp32", "int8", "int4")
TARGET_GAIN = 3.0  # issue 2: dynamic batching gives >= 3x the tokens/s of batch size 1 at 16 streams


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


def stream_request(port: int, model: str, tokens: int) -> bytes:
    """A streamed completion of exactly ``tokens`` tokens (``ignore_eos``) with its usage at the end."""
    body = orjson.dumps(
        {
            "model": model,
            "prompt": "the red",
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def one_stream(conn: Conn, data: bytes) -> int:
    """Generated tokens of one stream, from the usage event near its end."""
    status, _, _ = await conn.request(data)
    if status != 200:
        raise RuntimeError(f"stream answered {status}: {conn.tail[-300:]!r}")
    return int(conn.tail.rsplit(b'"completion_tokens":', 1)[1].split(b",", 1)[0])


async def generate(base: str, model: str, streams: int, tokens: int, rounds: int) -> tuple[int, float]:
    """``rounds`` rounds of ``streams`` concurrent streams on keep-alive connections. The client is
    ``loadgen.Conn`` (asyncio + httptools): httpx's pure-Python parsing of ~7,000 SSE events a
    second took 0.85 of a core here, the gateway 0.8 of the other, so the client set the pace."""
    port = int(base.rsplit(":", 1)[1])
    loop = asyncio.get_running_loop()
    conns = [
        (await loop.create_connection(lambda: Conn(keep_tail=True), "127.0.0.1", port))[1]
        for _ in range(streams)
    ]
    try:
        await one_stream(conns[0], stream_request(port, model, 8))  # warm-up
        data = stream_request(port, model, tokens)
        started = time.perf_counter()
        total = 0
        for _ in range(rounds):
            total += sum(await asyncio.gather(*(one_stream(conn, data) for conn in conns)))
        return total, time.perf_counter() - started
    finally:
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds so far of each thread of ``pid`` (Linux's schedstat; empty elsewhere)."""
    found: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                found[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
    return found


def split_cpu(pid: int, before: dict[int, float], after: dict[int, float]) -> tuple[float, float]:
    """CPU seconds between two snapshots of the event loop (the main thread) and of the busiest
    other thread: the one batcher thread that worked, the engine's."""
    used = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    loop = used.pop(pid, 0.0)
    return loop, max(used.values(), default=0.0)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


Figures = dict[tuple[str, int, int], list[float]]  # (precision, streams, max batch) → tokens/s per turn
CpuPerToken = dict[tuple[str, int], list[tuple[float, float]]]  # (precision, max batch) → (loop, engine) µs


async def measure(
    urls: dict[int, str], pids: dict[int, int], tokens: int, rounds: int, turns: int
) -> tuple[Figures, CpuPerToken]:
    """Tokens/s of every precision at 1 and 16 streams on the batched gateway and at 16 on the
    batch-1 one (``urls``/``pids``: max batch size → base URL / process), turn after turn; and at
    16 streams the CPU each generated token cost the gateway's event loop and its engine thread."""
    figures: Figures = {}
    cpu: CpuPerToken = {}
    plan = [(16, 1), (16, 16), (1, 16)]
    for turn in range(turns):
        for precision in PRECISIONS:
            shift = turn % len(plan)
            for batch, streams in plan[shift:] + plan[:shift]:
                before = thread_cpu_s(pids[batch])
                generated, seconds = await generate(urls[batch], precision, streams, tokens, rounds)
                after = thread_cpu_s(pids[batch])
                figures.setdefault((precision, streams, batch), []).append(generated / seconds)
                if streams == 16 and after:
                    loop, engine = split_cpu(pids[batch], before, after)
                    cpu.setdefault((precision, batch), []).append(
                        (loop / generated * 1e6, engine / generated * 1e6)
                    )
    return figures, cpu


def engine_alone(tokens: int, turns: int) -> dict[tuple[str, int], tuple[float, float]]:
    """Each precision's decode step alone, in this process (no gateway, no HTTP, one ONNX Runtime
    thread as the gateway's): median µs of a step at batch 1 and at batch 16, turn by turn. Their
    ratio × 16 is how much faster a token comes out of a batch-16 step than out of a batch-1 step:
    the engine's own share of the batching gain, before any request or HTTP cost. Beside each, what
    a new batch costs before its first step: making its generator and the prompt pass."""
    import numpy as np

    from backends.ortgenai_capi import Generator
    from backends.ortgenai_runner import GenAIModel
    from deploy.model.artifacts import onnx_dir

    models = {precision: GenAIModel(onnx_dir(precision)) for precision in PRECISIONS}
    steps: dict[tuple[str, int], list[tuple[float, float]]] = {}  # → (µs per step, µs to start)
    for _ in range(turns):
        for precision, model in models.items():
            prompt = model.encode("the red")
            for batch in (1, 16):
                length = len(prompt) + tokens
                begun = time.perf_counter()
                generator = Generator(
                    model.model,
                    {"max_length": length, "min_length": length, "batch_size": batch, "do_sample": False},
                )
                try:
                    generator.append_tokens(np.tile(prompt, (batch, 1)))
                    started = time.perf_counter()
                    for _ in range(tokens):
                        generator.generate_next_token()
                    steps.setdefault((precision, batch), []).append(
                        ((time.perf_counter() - started) / tokens * 1e6, (started - begun) * 1e6)
                    )
                finally:
                    generator.close()
    med = statistics.median
    return {key: (med(r[0] for r in rows), med(r[1] for r in rows)) for key, rows in steps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of concurrent streams per figure")
    parser.add_argument("--turns", type=int, default=5, help="interleaved turns of every figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as running:
        urls: dict[int, str] = {}
        pids: dict[int, int] = {}
        for batch in (16, 1):
            path = Path(tmp) / f"gateway-{batch}.yaml"
            path.write_text(config_yaml(batch))
            gateway = running.enter_context(gateway_process(path))
            urls[batch], pids[batch] = gateway.url, gateway.pid
        figures, cpu = asyncio.run(measure(urls, pids, args.tokens, args.rounds, args.turns))
        rss = rss_mb(pids[16])
    alone = engine_alone(args.tokens, args.turns)  # after the gateways have stopped
    med = statistics.median
    print(
        f"embedded engine, {args.tokens} tokens per stream, {args.rounds} rounds per figure, "
        f"median of {args.turns} turns, tokens/s through the API"
    )
    print(
        f"{'precision':<10}{'1 stream':>10}{'16 streams':>12}{'16, batch=1':>13}{'batching gain':>15}"
        f"{'95% interval':>16}   gain by turn"
    )
    verdicts = {}
    for precision in PRECISIONS:
        many, baseline = figures[(precision, 16, 16)], figures[(precision, 16, 1)]
        gains = [a / b for a, b in zip(many, baseline, strict=True)]
        low, high = median_interval(gains)
        verdicts[precision] = verdict(med(gains), (low, high), TARGET_GAIN, higher_is_better=True)
        print(
            f"{precision:<10}{med(figures[(precision, 1, 16)]):>10.0f}{med(many):>12.0f}"
            f"{med(baseline):>13.0f}{med(gains):>14.2f}x{low:>9.2f} .. {high:.2f}   "
            + " ".join(f"{g:.2f}" for g in gains)
        )
    print(
        f"target: batching gain >= {TARGET_GAIN:.2f}x at 16 streams (the interval: a bootstrap of the "
        "median over turns): " + ", ".join(f"{p} {v}" for p, v in verdicts.items())
    )
    if cpu:
        print(
            "CPU per generated token at 16 streams, µs (gateway event loop / engine thread), median of turns:"
        )
        for precision in PRECISIONS:
            cells = []
            for batch, name in ((16, "batched"), (1, "batch 1")):
                rows = cpu[(precision, batch)]
                cells.append(f"{name} {med(r[0] for r in rows):.0f} / {med(r[1] for r in rows):.0f}")
            print(f"  {precision:<8}" + ", ".join(cells))
    print(
        "the engine alone (no gateway), µs per decode step, median of turns (and to start a batch:"
        " its generator and prompt pass):"
    )
    for precision in PRECISIONS:
        (one, start_one), (sixteen, start_sixteen) = alone[(precision, 1)], alone[(precision, 16)]
        print(
            f"  {precision:<8}batch 1 {one:.0f} ({start_one:.0f}), batch 16 {sixteen:.0f} "
            f"({start_sixteen:.0f}): a token {16 * one / sixteen:.2f}x faster batched"
        )
    print(f"gateway RSS with fp32+int8+int4 loaded, after load: {rss:.0f} MB (target <= 500 MB)")


if __name__ == "__main__":
    main()
