"""Control-plane overhead: what do an A/B split, a fallback and a shadow tee add at concurrency 1?

Path measured: load generator → Turnout → ``backends/fault.py``, three Turnout gateways at
once, all pinned to core 0 (one uvicorn worker each; an idle one costs nothing):

- ``plain``: one route, one variant (the gateway-overhead benchmark's setup);
- ``routed+shadow10%``: a 50/50 A/B split, a fallback, and a shadow sampled at 10%;
- ``routed+shadow100%``: the same with every request mirrored.

Single runs on this 2-core machine drift by 10–20% between minutes, so the three are
measured in interleaved rounds (plain, 10%, 100%, plain, …) and each one's figure is the
median of its rounds' p50s. Target (control-plane issue): routed p50 ≤ 1.10× plain.

    python bench/control_plane_overhead.py [--quick] [--rounds N] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_overhead import _free_port, gateway, turnout_cmd
from loadgen import run_loop, run_phase
from overhead_phases import cpu_seconds, http_request

from backends.fault import FaultServer

CONFIGS = {"plain": None, "routed+shadow10%": 0.1, "routed+shadow100%": 1.0}
TARGET_RATIO = 1.10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    count, rounds = (300, 2) if args.quick else (1000, args.rounds)
    with contextlib.suppress(AttributeError, OSError):
        if len(os.sched_getaffinity(0)) > 1:
            os.sched_setaffinity(0, {1})  # the load generator shares core 1 with the fault server
    p50s: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpu_us: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmpdir,
        FaultServer(process=True, cpu=1, chunks=8) as fault,
        contextlib.ExitStack() as stack,
    ):
        tmp = Path(tmpdir)
        ports: dict[str, int] = {}
        pids: dict[str, int] = {}
        for name, rate in CONFIGS.items():
            ports[name] = _free_port()
            cmd = turnout_cmd(fault.url, ports[name], tmp, rate)
            assert cmd is not None
            pids[name] = stack.enter_context(gateway(cmd, ports[name], 60, log=tmp / f"{name}.log")).pid
        for round_ in range(rounds):
            for name, port in ports.items():
                result = run_loop(run_phase(port, http_request(port, False), 1, count, 60.0, 50))
                p50s[name].append(result.pct("lat", 0.5))
            cells = ", ".join(f"{name} {values[-1]:.3f}" for name, values in p50s.items())
            print(f"round {round_ + 1}/{rounds}: c=1 p50 ms: {cells}", flush=True)
        for name, port in ports.items():  # CPU per request at c=32, for the record
            before = cpu_seconds(pids[name])
            result = run_loop(run_phase(port, http_request(port, False), 32, 10**9, 3.0, 50))
            cpu_us[name] = 1e6 * (cpu_seconds(pids[name]) - before) / (len(result.latencies_ns) + 50)
    medians = {name: statistics.median(values) for name, values in p50s.items()}
    print(f"\n{'':22}{'c=1 p50 (ms)':>14}{'vs plain':>10}{'CPU us/req c=32':>17}")
    summary: dict[str, Any] = {"rounds": p50s, "median_p50_ms": medians, "cpu_us_per_request": cpu_us}
    for name, value in medians.items():
        ratio = value / medians["plain"]
        summary.setdefault("ratio_to_plain", {})[name] = ratio
        print(f"{name:22}{value:>14.3f}{ratio:>9.3f}x{cpu_us[name]:>17.1f}")
    verdicts = {name: summary["ratio_to_plain"][name] <= TARGET_RATIO for name in CONFIGS if name != "plain"}
    summary["targets"] = verdicts
    print(
        "target routed p50 <= 1.10x plain: "
        + ", ".join(f"{name} {'PASS' if ok else 'MISS'}" for name, ok in verdicts.items())
    )
    if args.json:
        args.json.write_text(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
