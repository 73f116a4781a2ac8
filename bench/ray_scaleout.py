"""Ray Serve scale-out benchmark: 1 vs 2 gateway replicas under Ray, and what Ray's proxy adds.

The same fast fake upstream (``backends/fault.py``) behind three gateways started one after the
other: plain ``turnout serve`` (uvicorn, one process) and ``turnout serve --ray --replicas N``
for N = 1 and 2 (Ray Serve's HTTP proxy → gateway replicas). For each: latency at concurrency 1
(p50, p99) and throughput at concurrency 32, with the closed-loop load generator of
``bench/gateway_overhead.py``. During the concurrency-32 phase it also reads how much CPU each
kind of process used (the uvicorn gateway; Ray's proxy, the gateway replicas, Ray's own
processes), which is what explains the figures on a small machine. Everything runs unpinned on
this machine's cores, the load generator and the fake upstream included. Ray's files go to a
temp folder that is removed at the end. Prints the figures and the ratios; not a test.

    python bench/ray_scaleout.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # the sibling modules import each other by bare name

from loadgen import run_loop, run_phase  # noqa: E402
from overhead_phases import MODEL, http_request  # noqa: E402

from backends.fault import FaultServer  # noqa: E402
from serving.launcher import gateway_process  # noqa: E402


def _config(folder: Path, fault_url: str) -> Path:
    path = folder / "gateway.yaml"
    path.write_text(
        f"variants:\n  fake:\n    kind: openai_http\n    base_url: {fault_url}/v1\n    model: {MODEL}\n"
        f"routes:\n  {MODEL}:\n    targets: [{{variant: fake}}]\n"
        f"store:\n  url: sqlite:///{folder / 'routes.db'}\nauth:\n  anonymous_clients: true\n"
    )
    return path


def _role(proc: psutil.Process) -> str:
    """What a process under the gateway is: the gateway itself, Ray's proxy, a replica, Ray."""
    try:
        title = " ".join(proc.cmdline())
    except psutil.Error:
        return "gone"
    if "ServeReplica" in title:
        return "gateway replicas" if "TurnoutGateway" in title else "other replicas"
    if "ProxyActor" in title:
        return "ray proxy"
    if "serving.cli" in title:
        return "driver / uvicorn"
    return "ray system (gcs, raylet, controller, workers)"


def _cpu_by_role(pid: int) -> dict[str, float]:
    root = psutil.Process(pid)
    seconds: dict[str, float] = collections.defaultdict(float)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            seconds[_role(proc)] += times.user + times.system
        except psutil.Error:
            continue
    return dict(seconds)


def _measure(name: str, port: int, pid: int, quick: bool) -> dict[str, float]:
    data = http_request(port, False)
    c1 = run_loop(run_phase(port, data, 1, 300 if quick else 1500, 5 if quick else 15, 50))
    before, started = _cpu_by_role(pid), time.monotonic()
    c32 = run_loop(run_phase(port, data, 32, 10**9, 3 if quick else 10, 200))
    wall = time.monotonic() - started
    after = _cpu_by_role(pid)
    row = {
        "p50_ms": c1.pct("lat", 0.5),
        "p99_ms": c1.pct("lat", 0.99),
        "rps_c32": c32.rps,
        "p50_c32_ms": c32.pct("lat", 0.5),
        "errors": float(c1.errors + c32.errors),
    }
    cores = {role: (after[role] - before.get(role, 0.0)) / wall for role in after}
    row.update({f"cores:{role}": used for role, used in cores.items() if used >= 0.01})
    busy = sum(cores.values())
    row["cpu_ms_per_request"] = 1000 * busy / row["rps_c32"] if row["rps_c32"] else 0.0
    used = ", ".join(f"{role} {share:.2f}" for role, share in sorted(cores.items()) if share >= 0.01)
    print(f"[{name}] c=1 p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms, "
          f"c=32 {row['rps_c32']:.0f} req/s (p50 {row['p50_c32_ms']:.1f} ms), errors {row['errors']:.0f}; "
          f"cores busy at c=32: {used}; {row['cpu_ms_per_request']:.2f} CPU-ms per request",
          flush=True)  # fmt: skip
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short phases (a smoke run)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="trb-", dir="/tmp") as tmp, FaultServer() as fault:
        config = _config(Path(tmp), fault.base_url.removesuffix("/v1"))
        env = {"RAY_TMPDIR": tmp}  # Ray's session files, removed with the folder
        runs = {"uvicorn": (), "ray x1": ("--ray", "--replicas", "1"), "ray x2": ("--ray", "--replicas", "2")}
        for name, extra in runs.items():
            with gateway_process(config, timeout=150, env=env, extra_args=extra) as launched:
                port = int(launched.url.rsplit(":", 1)[1])
                rows[name] = _measure(name, port, launched.pid, args.quick)
    plain, one, two = rows["uvicorn"], rows["ray x1"], rows["ray x2"]
    print(f"\n{'':28}{'uvicorn':>10}{'ray x1':>10}{'ray x2':>10}")
    for key, label in (
        ("p50_ms", "c=1 p50 (ms)"),
        ("p99_ms", "c=1 p99 (ms)"),
        ("rps_c32", "c=32 throughput (req/s)"),
        ("p50_c32_ms", "c=32 p50 (ms)"),
        ("cpu_ms_per_request", "c=32 CPU-ms per request"),
    ):
        print(f"{label:28}{plain[key]:>10.2f}{one[key]:>10.2f}{two[key]:>10.2f}")  # fmt: skip
    print(f"\nRay proxy adds at c=1 p50: {one['p50_ms'] - plain['p50_ms']:+.2f} ms over uvicorn")
    print(
        f"2 vs 1 Ray gateway replicas, throughput: {two['rps_c32'] / one['rps_c32']:.2f}x; "
        f"Ray x2 vs uvicorn: {two['rps_c32'] / plain['rps_c32']:.2f}x (cores: {os.cpu_count()})"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
