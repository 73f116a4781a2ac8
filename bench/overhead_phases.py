"""The measuring phases of ``bench/gateway_overhead.py`` (and its CPU readers, which
``control_plane_overhead.py`` shares): servers already running, the load generator here.

Every phase runs on all servers in interleaved rounds, the first server rotating, and each figure
is the median of its rounds' (each added figure the median of its rounds' differences from
direct's in the same round): this VM has slow spells, from a tenth of a second to minutes, in
which every relay's latency doubles or triples and its throughput drops by a third; measured once
each, one after the other, a spell that fell on one server made its figure say nothing of it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from loadgen import PhaseResult, interleaved, run_loop, run_phase
from paired_stats import paired_median
from placement import UpstreamPlacement

MODEL = "fake-model"


def http_request(port: int, stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 16,
    }
    if stream:
        body["stream"] = True
    raw = orjson.dumps(body)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer sk-bench\r\n"
        f"Content-Length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


@dataclass
class Sizes:
    c1_count: int
    c1_seconds: float
    c32_seconds: float  # per round
    stream_count: int  # per round
    warmup: int
    # The first phase on a fresh server warms it longer: a gateway's c=1 p50 keeps falling for
    # its first ~2,000 requests (median of 6 launches: 0.51 ms over requests 300-2,300, 0.47 ms
    # over the next 2,000; the bare relay 0.39 / 0.37 ms), and the targets are steady-state ones.
    c1_warmup: int
    rounds: int  # interleaved c=1 rounds, each ``c1_count`` answers per server after
    round_warmup: int  # these unmeasured ones (it idled while the others were measured)
    idle_seconds: float  # how long each server's CPU is watched with no traffic
    load_rounds: int  # interleaved rounds of the c=32 and streaming phases


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its children so far, all threads (0 where /proc is missing): the
    scheduler's nanosecond count (``schedstat``) where there is one, else clock ticks."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(stat.parent.name) != pid and int(fields[1]) != pid:
                continue
            threads = list((stat.parent / "task").glob("*/schedstat"))
            if threads:
                total += sum(int(t.read_text().split()[0]) for t in threads) / 1e9
            else:
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def idle_cpu_ms_per_s(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each server's CPU while nobody sends it anything (timers, pollers), ms per second."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: 1e3 * (cpu_seconds(pid) - before[name]) / seconds for name, pid in pids.items()}


def load_note(name: str) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    print(f"[{name}] measuring (load average {load:.2f})...", flush=True)
    if load > 1.0:
        print(f"[{name}] warning: the machine is busy; tail latencies will be noisy", flush=True)


def _rotated(names: list[str], index: int) -> list[str]:
    shift = index % len(names)
    return names[shift:] + names[:shift]


def c1_rows(
    servers: dict[str, tuple[int, int]], sizes: Sizes, places: list[UpstreamPlacement]
) -> dict[str, dict[str, Any]]:
    """Concurrency 1 on every server (``direct`` first among them) in interleaved rounds, each
    round once per placement of the fault server in ``places`` (the first is the headline, the
    others give ``added_p50_<mode>_ms``): each row's p50/p99 is the median of its rounds', its
    added p50/p99 the median of its rounds' differences from direct's in the same round."""
    load_note("c=1, " + ", ".join(servers))
    targets = {name: (port, http_request(port, False)) for name, (port, _) in servers.items()}
    by_mode: dict[str, dict[str, list[PhaseResult]]] = {
        place.mode: {name: [] for name in servers} for place in places
    }
    for index in range(sizes.rounds):
        for place in places:
            place.for_latency()
            first = sizes.c1_warmup if index == 0 else sizes.round_warmup
            found = run_loop(
                interleaved(
                    targets, 1, sizes.c1_count, sizes.c1_seconds, sizes.round_warmup, first, rotate=index
                )
            )
            for name, results in found.items():
                by_mode[place.mode][name].extend(results)
    rows: dict[str, dict[str, Any]] = {}
    for mode_index, (mode, rounds) in enumerate(by_mode.items()):
        p50s = {name: [r.pct("lat", 0.5) for r in results] for name, results in rounds.items()}
        p99s = {name: [r.pct("lat", 0.99) for r in results] for name, results in rounds.items()}
        for name, results in rounds.items():
            added = (
                {}
                if name == "direct"
                else {
                    "added_p50_ms": paired_median(p50s[name], p50s["direct"]),
                    "added_p99_ms": paired_median(p99s[name], p99s["direct"]),
                }
            )
            if mode_index:
                rows[name].update({f"{key[:-3]}_{mode}_ms": value for key, value in added.items()})
                continue
            rows[name] = {
                "p50_ms": statistics.median(p50s[name]),
                "p99_ms": statistics.median(p99s[name]),
                "n_c1": sum(len(r.latencies_ns) for r in results),
                "c1_errors": sum(r.errors for r in results),
                "c1_rounds_p50_ms": p50s[name],
                **added,
            }
        for name in rounds:
            print(
                f"[{name}] c=1 p50 by round ({mode}): {' '.join(f'{v:.3f}' for v in p50s[name])} ms",
                flush=True,
            )
    return rows


def load_rows(
    servers: dict[str, tuple[int, int]], sizes: Sizes, place: UpstreamPlacement
) -> dict[str, dict[str, Any]]:
    """Concurrency 32 (req/s, and each server's CPU per request) and streaming at c=1 (time to
    the first body byte), both in ``sizes.load_rounds`` interleaved rounds: medians over rounds,
    and TTFB added as the median of each round's difference from direct's where direct ran."""
    load_note("c=32 and streaming, " + ", ".join(servers))
    names = list(servers)
    c32: dict[str, list[PhaseResult]] = {name: [] for name in names}
    streams: dict[str, list[PhaseResult]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for index in range(sizes.load_rounds):
        place.for_throughput()
        for name in _rotated(names, index):
            port, pid = servers[name]
            before = cpu_seconds(pid)
            result = run_loop(
                run_phase(port, http_request(port, False), 32, 10**9, sizes.c32_seconds, sizes.warmup)
            )
            served = len(result.latencies_ns) + sizes.warmup
            cpu[name].append(1e6 * (cpu_seconds(pid) - before) / served if served else float("nan"))
            c32[name].append(result)
        place.for_latency()
        for name in _rotated(names, index):
            port, _ = servers[name]
            streams[name].append(
                run_loop(
                    run_phase(
                        port, http_request(port, True), 1, sizes.stream_count, sizes.c1_seconds, sizes.warmup
                    )
                )
            )
    med = statistics.median
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        ttfbs = [r.pct("ttfb", 0.5) for r in streams[name]]
        rows[name] = {
            "rps_c32": med(r.rps for r in c32[name]),
            "p50_c32_ms": med(r.pct("lat", 0.5) for r in c32[name]),
            "p99_c32_ms": med(r.pct("lat", 0.99) for r in c32[name]),
            "server_cpu_us_c32": med(cpu[name]),
            "ttfb_p50_ms": med(ttfbs),
            "ttfb_p99_ms": med(r.pct("ttfb", 0.99) for r in streams[name]),
            "stream_p50_ms": med(r.pct("lat", 0.5) for r in streams[name]),
            "rps_c32_rounds": [r.rps for r in c32[name]],
            "ttfb_rounds_p50_ms": ttfbs,
            "errors": sum(r.errors for r in c32[name] + streams[name]),
        }
        print(
            f"[{name}] c=32 req/s by round: {' '.join(f'{r.rps:.0f}' for r in c32[name])}; "
            f"stream TTFB p50 by round: {' '.join(f'{v:.3f}' for v in ttfbs)} ms",
            flush=True,
        )
    direct = rows.get("direct")
    for name, row in rows.items():
        if name != "direct" and direct is not None:
            row["ttfb_added_ms"] = paired_median(row["ttfb_rounds_p50_ms"], direct["ttfb_rounds_p50_ms"])
    return rows


def litellm_row(port: int, sizes: Sizes, pid: int, place: UpstreamPlacement) -> dict[str, Any]:
    """LiteLLM alone (its c=1 is ~40x slower: one phase, no rounds), then the load phases."""
    load_note("litellm")
    place.for_latency()
    c1 = run_loop(
        run_phase(
            port,
            http_request(port, False),
            1,
            sizes.c1_count * sizes.rounds,
            sizes.c1_seconds,
            sizes.c1_warmup,
        )
    )
    row: dict[str, Any] = {
        "p50_ms": c1.pct("lat", 0.5),
        "p99_ms": c1.pct("lat", 0.99),
        "n_c1": len(c1.latencies_ns),
        "c1_errors": c1.errors,
    }
    return {**row, **load_rows({"litellm": (port, pid)}, sizes, place)["litellm"]}
