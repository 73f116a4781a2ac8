"""Where the benchmarks' upstream double runs on the 2 cores, phase by phase (bench-side only).

``gateway_overhead.py`` measures each gateway as (through it) − (straight at the fault server).
On this VM a round trip between processes on two cores costs ~35–105 µs (the bench prints it),
many times what it costs on one core. So where the fault server sits decides how many of those
the subtraction charges to the gateway:

* latency phases (c=1, streaming TTFB): the fault server runs on the gateways' core and the load
  generator alone on the other, so the direct path and every relayed path cross cores the same
  number of times (load generator → server → load generator) and the difference is what the
  gateway itself does. With the fault server beside the load generator instead (``split``, the
  layout before 2026-11-24) direct crosses no core and a relayed request crosses four times, two
  extra round trips on the gateway's bill;
* throughput phases (c=32): the fault server goes back beside the load generator, so the gateway
  has its core to itself ("one uvicorn worker pinned to one core").
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

GATEWAY_CORE, LOADGEN_CORE = 0, 1


def move_process(pid: int, core: int) -> None:
    """Every thread of ``pid`` onto ``core`` (no-op where affinity can't be set)."""
    tasks = Path(f"/proc/{pid}/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.exists() else [pid]
    for tid in tids:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setaffinity(tid, {core})


@dataclass
class UpstreamPlacement:
    """Moves the fault server (``pid``) for latency and throughput phases; ``matched`` as the
    module docstring says, ``split`` keeps it beside the load generator throughout."""

    pid: int
    mode: str = "matched"

    def for_latency(self) -> None:
        move_process(self.pid, GATEWAY_CORE if self.mode == "matched" else LOADGEN_CORE)

    def for_throughput(self) -> None:
        move_process(self.pid, LOADGEN_CORE)

    def describe(self) -> str:
        if self.mode == "matched":
            return (
                "the fault server beside the gateways for c=1 and streaming (direct and relayed "
                "paths cross cores alike), beside the load generator for c=32"
            )
        return "the fault server beside the load generator throughout (relayed c=1 paths cross cores 4 times)"


def cross_core_rtt_us(cores: tuple[int, int] = (0, 1), rounds: int = 5000) -> float | None:
    """p50 µs of a 1-byte ping-pong between two processes pinned to ``cores`` (None: can't pin).

    Context for the c=1 figures: a request crosses cores twice (one such round trip) straight
    or through a gateway with ``--placement matched``; with ``split``, direct crosses none and
    relayed four times."""
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return None
    except (AttributeError, OSError):
        return None
    here, there = socket.socketpair()
    child = os.fork()
    if child == 0:  # the echoing side
        try:
            os.sched_setaffinity(0, {cores[1]})
            for _ in range(rounds):
                there.recv(1)
                there.send(b"x")
        finally:
            os._exit(0)
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cores[0]})
    times = []
    try:
        for _ in range(rounds):
            start = time.perf_counter_ns()
            here.send(b"x")
            here.recv(1)
            times.append(time.perf_counter_ns() - start)
    finally:
        os.sched_setaffinity(0, previous)
        os.waitpid(child, 0)
        here.close()
        there.close()
    return sorted(times)[len(times) // 2] / 1e3
