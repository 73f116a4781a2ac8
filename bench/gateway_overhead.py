"""Gateway-overhead benchmark: what does Turnout add on the request path, and how does LiteLLM compare?

Path measured: load generator → [gateway] → ``backends/fault.py`` (the fast fake upstream).
The same load runs (a) straight at the fault server, (b) through ``turnout serve`` and (c)
through the LiteLLM proxy, so (b) − (a) and (c) − (a) are the latency each gateway adds. A
``bare`` row (``bench/bare_proxy.py``: uvicorn + Turnout's upstream pool relaying the body, no
gateway logic) shows the floor of the chosen stack on this machine; Turnout minus bare is its own
logic. ``bare-aiohttp`` is the same relay on aiohttp's client, which Turnout used before.

Placement on the 2 cores: gateways run on core 0 (``taskset -c 0``, one uvicorn worker) and
this process (the load generator) on core 1. The fault server moves per phase
(``bench/placement.py``): beside the gateways for the latency phases, so that direct and relayed
requests cross cores equally often (on this VM a cross-core round trip costs ~35-105 µs; with the
fault server beside the load generator, ``--placement split``, a relayed c=1 request makes two
more of them than a direct one, ~0.2 ms on the gateway's bill), and beside the load generator
for c=32, so the gateway has its core to itself. The load generator is a raw asyncio + uvloop +
httptools HTTP/1.1 keep-alive client (no httpx), measured here at well over 10,000 req/s, so
the gateway on core 0 is the bottleneck.

Phases (``bench/overhead_phases.py``), each bounded in count and time: non-streaming chat at
concurrency 1 (p50/p99), concurrency 32 for a fixed duration (req/s), and streaming chat at
concurrency 1 (time to the first body byte). Direct, Turnout and the bare relays (all started
at once) take turns in interleaved rounds: c=1 in 5 rounds of 1,000 requests per server, each
round once with the fault server placed as above and once the other way (``added p50, split``
in the table); c=32 and streaming in 3 rounds of 3 s and 600 requests. Each figure is the median
of its rounds', each added figure the median of its rounds' differences from direct's (this VM
has slow spells, from a tenth of a second to minutes, in which every relay's c=1 latency
doubles or triples: measured once each, one after the other, two back-to-back runs put
Turnout's c=1 p50 at 0.55 and 0.67 ms, and one c=32 figure fell by a third).
LiteLLM lives in its own venv, ``bench/.venv-litellm``, made on first use, and runs alone
afterwards (one c=1 phase); (c) is skipped with a message when it cannot be installed.

    python bench/gateway_overhead.py [--quick] [--skip-litellm] [--skip-bare] [--placement matched|split]
                                     [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from overhead_phases import (  # noqa: E402
    MODEL,
    Sizes,
    c1_rows,
    idle_cpu_ms_per_s,
    litellm_row,
    load_rows,
)
from paired_stats import paired_median  # noqa: E402
from placement import LOADGEN_CORE, UpstreamPlacement, cross_core_rtt_us  # noqa: E402

from backends.fault import FaultServer  # noqa: E402

LITELLM_VENV = ROOT / "bench" / ".venv-litellm"
# 1.107.0 was a compromised release; stay on the line the design notes measured.
LITELLM_REQUIREMENT = "litellm[proxy]>=1.106,<1.107"
TARGETS = {"added_p50_ms": 0.5, "added_p99_ms": 2.0, "rps_c32": 3000.0, "ttfb_added_ms": 1.0}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pinned(cpu: int, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", str(cpu), *cmd] if shutil.which("taskset") else cmd


def _wait_answering(
    port: int, proc: subprocess.Popen[bytes], limit: float, probe: tuple[str, bytes] | None = None
) -> None:
    """Bounded wait until a real request through ``port`` answers 200: ``probe`` (path, body),
    by default a chat request for the fault server's model."""
    path, body = probe or (
        "/v1/chat/completions",
        orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    )
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}",
            data=body,
            headers={"content-type": "application/json", "authorization": "Bearer sk-bench"},
        )
        with contextlib.suppress(OSError), urllib.request.urlopen(req, timeout=5) as resp:
            if resp.status == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"no 200 answer on port {port} within {limit:.0f}s")


@contextlib.contextmanager
def gateway(
    cmd: list[str],
    port: int,
    limit: float,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    cpu: int | None = 0,
    probe: tuple[str, bytes] | None = None,
) -> Any:
    """``cmd`` running (on core ``cpu``; None: not pinned) until the block ends, once it answers
    (``probe``: the (path, body) to ask, see ``_wait_answering``)."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        cmd if cpu is None else _pinned(cpu, cmd),
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_answering(port, proc, limit, probe)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if log:
            out.close()  # type: ignore[union-attr]


def turnout_cmd(fault_url: str, port: int, tmp: Path, shadow_rate: float | None = None) -> list[str] | None:
    """Turnout on one variant; with ``shadow_rate``, an A/B split + fallback + a sampled shadow."""
    if not (ROOT / "serving" / "cli.py").exists():
        return None
    config = tmp / f"turnout-{port}.yaml"
    names = ["fake"] if shadow_rate is None else ["fake", "fake-b", "fake-shadow"]
    variants = "".join(
        f"  {name}:\n    kind: openai_http\n    base_url: {fault_url}/v1\n"
        f"    model: {MODEL}\n    engine: vllm\n"
        for name in names
    )
    if shadow_rate is None:
        route = "    targets: [{variant: fake}]\n"
    else:
        route = (
            "    targets: [{variant: fake, weight: 50}, {variant: fake-b, weight: 50}]\n"
            "    fallbacks: [fake-b]\n"
            f"    shadows: [{{variant: fake-shadow, sample_rate: {shadow_rate}}}]\n"
        )
    config.write_text(
        f"variants:\n{variants}routes:\n  {MODEL}:\n{route}"
        f"store:\n  url: sqlite:///{tmp / f'routes-{port}.db'}\n"
        "auth:\n  anonymous_clients: true\n"
    )
    # This checkout's code (the gateway runs in ROOT), not whatever an installed ``turnout`` points at.
    return [
        sys.executable,
        "-m",
        "serving.cli",
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]


def bare_cmd(fault_url: str, port: int, client: str = "pool") -> list[str]:
    """``bench/bare_proxy.py``: uvicorn relaying the request with ``client`` (Turnout's upstream
    pool or aiohttp), none of Turnout's logic."""
    return [sys.executable, str(ROOT / "bench" / "bare_proxy.py"), fault_url, str(port), "--client", client]


def ensure_litellm() -> Path | None:
    """The ``litellm`` executable in bench/.venv-litellm, installing it on first use."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists():
        return exe
    print(f"installing {LITELLM_REQUIREMENT} into {LITELLM_VENV} (first use, a few minutes)...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True, timeout=120)
        subprocess.run(
            [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", LITELLM_REQUIREMENT],
            check=True,
            timeout=1200,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"LiteLLM skipped: could not install it ({exc})", flush=True)
        return None
    return exe if exe.exists() else None


def litellm_cmd(exe: Path, fault_url: str, port: int, tmp: Path) -> list[str]:
    config = tmp / "litellm.yaml"
    config.write_text(
        f"model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{MODEL}\n"
        f"      api_base: {fault_url}/v1\n      api_key: sk-fake\n"
        "general_settings:\n  master_key: sk-bench\n"
    )  # the load generator sends this key
    return [
        str(exe),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]


LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_TELEMETRY": "False",
    "DISABLE_SCHEMA_UPDATE": "True",
}


# ---------------------------------------------------------------- report
def _beyond(rows: dict[str, dict[str, Any]], name: str, base: str) -> float:
    """``name``'s c=1 p50 minus ``base``'s: paired round by round when both ran in the rounds."""
    a, b = rows[name].get("c1_rounds_p50_ms"), rows[base].get("c1_rounds_p50_ms")
    if a and b:
        return paired_median(a, b)
    return float(rows[name]["p50_ms"] - rows[base]["p50_ms"])


def report(
    rows: dict[str, dict[str, Any]], rtt_us: float | None = None, placement: str = "matched"
) -> dict[str, Any]:
    direct, other = rows["direct"], "split" if placement == "matched" else "matched"
    for name, row in rows.items():
        row["errors"] = row.get("errors", 0) + row.pop("c1_errors", 0)
        if name != "direct":  # set already for the servers of the interleaved c=1 rounds
            row.setdefault("added_p50_ms", row["p50_ms"] - direct["p50_ms"])
            row.setdefault("added_p99_ms", row["p99_ms"] - direct["p99_ms"])
            row.setdefault("ttfb_added_ms", row["ttfb_p50_ms"] - direct["ttfb_p50_ms"])
    lines = [
        ("non-stream c=1 p50 (ms)", "p50_ms", 3),
        ("non-stream c=1 p99 (ms)", "p99_ms", 3),
        ("added p50 (ms)", "added_p50_ms", 3),
        ("added p99 (ms)", "added_p99_ms", 3),
        (f"added p50, {other} (ms)", f"added_p50_{other}_ms", 3),
        (f"added p99, {other} (ms)", f"added_p99_{other}_ms", 3),
        ("c=32 throughput (req/s)", "rps_c32", 0),
        ("c=32 p50 (ms)", "p50_c32_ms", 2),
        ("c=32 p99 (ms)", "p99_c32_ms", 2),
        ("c=32 server CPU (us/req)", "server_cpu_us_c32", 1),
        ("stream TTFB p50 (ms)", "ttfb_p50_ms", 3),
        ("stream TTFB added p50 (ms)", "ttfb_added_ms", 3),
        ("idle CPU (ms per s)", "idle_cpu_ms_per_s", 2),
        ("errors", "errors", 0),
    ]
    names = list(rows)
    print("\n" + f"{'':28}" + "".join(f"{n:>12}" for n in names))
    for label, key, digits in lines:
        cells = [f"{rows[n][key]:>12.{digits}f}" if key in rows[n] else f"{'-':>12}" for n in names]
        print(f"{label:28}" + "".join(cells))
    summary: dict[str, Any] = {"rows": rows, "cross_core_rtt_us": rtt_us, "placement": placement}
    if rtt_us is not None:
        crossings = (
            "one, as does direct" if placement == "matched" else "two; direct makes none (--placement split)"
        )
        print(
            f"\nthis machine: cross-core round trip p50 {rtt_us:.1f} us (the c=1 path through a "
            f"gateway makes {crossings})"
        )
    t = rows.get("turnout", {})
    if f"added_p50_{other}_ms" in t:
        mean = (t["added_p50_ms"] + t[f"added_p50_{other}_ms"]) / 2
        summary["turnout_added_p50_one_crossing_ms"] = mean
        print(
            f"Turnout's added c=1 p50: {t['added_p50_ms']:.3f} ms {placement}, "
            f"{t[f'added_p50_{other}_ms']:.3f} ms {other}; their mean, {mean:.3f} ms, charges a relayed "
            f"request one cross-core round trip more than a direct one, as a hop to another core would"
        )
    if "turnout" in rows and "bare" in rows:
        beyond = _beyond(rows, "turnout", "bare")
        summary["turnout_beyond_bare_p50_ms"] = beyond
        print(
            f"Turnout's own logic (turnout - bare, c=1 p50): {beyond:+.3f} ms; the bare uvicorn + "
            f"upstream-pool relay adds {rows['bare']['added_p50_ms']:.3f} ms by itself"
        )
    if "bare" in rows and "bare-aiohttp" in rows:
        gain = _beyond(rows, "bare-aiohttp", "bare")
        summary["pool_vs_aiohttp_p50_ms"] = gain
        speedup = rows["bare"]["rps_c32"] / rows["bare-aiohttp"]["rps_c32"]
        print(
            f"the same relay on aiohttp's client (bare-aiohttp) is {gain:+.3f} ms slower at c=1 p50; "
            f"the pool serves {speedup:.2f}x its req/s at c=32"
        )
    if "turnout" in rows and "litellm" in rows:
        t, lite = rows["turnout"], rows["litellm"]
        ratios = {
            "added_p50 turnout/litellm": t["added_p50_ms"] / lite["added_p50_ms"],
            "rps_c32 turnout/litellm": t["rps_c32"] / lite["rps_c32"],
        }
        summary["ratios"] = ratios
        print("\nratios: " + ", ".join(f"{k} = {v:.3g}" for k, v in ratios.items()))
    if "turnout" in rows:
        t = rows["turnout"]
        checks = {
            "added p50 <= 0.5 ms": t["added_p50_ms"] <= TARGETS["added_p50_ms"],
            "added p99 <= 2 ms": t["added_p99_ms"] <= TARGETS["added_p99_ms"],
            "c=32 >= 3,000 req/s": t["rps_c32"] >= TARGETS["rps_c32"],
            "stream TTFB added <= 1 ms": t["ttfb_added_ms"] <= TARGETS["ttfb_added_ms"],
        }
        summary["targets"] = checks
        verdicts = (f"{k}: {'PASS' if ok else 'MISS'}" for k, ok in checks.items())
        print("targets (Turnout): " + ", ".join(verdicts))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short phases (a smoke run)")
    parser.add_argument("--skip-turnout", action="store_true")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--skip-bare", action="store_true", help="leave out the bare relay rows")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--placement",
        choices=("matched", "split"),
        default="matched",
        help="where the fault server runs in latency phases (bench/placement.py)",
    )
    args = parser.parse_args(argv)
    quick = Sizes(150, 5, 2, 200, 50, 50, 2, 20, 1, load_rounds=1)
    full = Sizes(1000, 20, 3, 600, 300, 2000, 5, 100, 5, load_rounds=3)
    sizes = quick if args.quick else full
    rtt_us = cross_core_rtt_us(rounds=500 if args.quick else 5000)
    with contextlib.suppress(AttributeError, OSError):
        if len(os.sched_getaffinity(0)) > 1:
            os.sched_setaffinity(0, {LOADGEN_CORE})  # the fault server moves per phase (placement.py)
    rows: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmpdir,
        FaultServer(process=True, cpu=LOADGEN_CORE, chunks=8) as fault,
    ):
        tmp = Path(tmpdir)
        assert fault.proc is not None
        place = UpstreamPlacement(fault.proc.pid, args.placement)
        print(f"placement: {place.describe()}", flush=True)
        with contextlib.ExitStack() as running:  # every server under test, started at once
            servers = {"direct": (fault.port, fault.proc.pid)}
            cmd = None if args.skip_turnout else turnout_cmd(fault.url, port := _free_port(), tmp)
            if cmd is None and not args.skip_turnout:
                print("Turnout skipped: serving/cli.py is not there yet", flush=True)
            elif cmd is not None:
                try:
                    proc = running.enter_context(gateway(cmd, port, 60, log=tmp / "turnout.log"))
                    servers["turnout"] = (port, proc.pid)
                except RuntimeError as exc:
                    print(f"Turnout failed: {exc}\n{(tmp / 'turnout.log').read_text()[-3000:]}", flush=True)
            clients: tuple[str, ...] = () if args.skip_bare else ("pool", "aiohttp")
            if "aiohttp" in clients and importlib.util.find_spec("aiohttp") is None:
                print(
                    "bare-aiohttp skipped: aiohttp is not installed (pip install 'turnout[bench]')",
                    flush=True,
                )
                clients = ("pool",)
            for client in clients:
                port, name = _free_port(), "bare" if client == "pool" else "bare-aiohttp"
                proc = running.enter_context(gateway(bare_cmd(fault.url, port, client), port, 60))
                servers[name] = (port, proc.pid)
            idle = idle_cpu_ms_per_s({name: pid for name, (_, pid) in servers.items()}, sizes.idle_seconds)
            other = "split" if place.mode == "matched" else "matched"
            rows = c1_rows(servers, sizes, [place, UpstreamPlacement(place.pid, other)])
            for name, ms_per_s in idle.items():
                rows[name]["idle_cpu_ms_per_s"] = ms_per_s
            for name, found in load_rows(servers, sizes, place).items():
                rows[name].update(found)
        exe = None if args.skip_litellm else ensure_litellm()
        if exe is not None:
            port = _free_port()
            try:
                with gateway(
                    litellm_cmd(exe, fault.url, port, tmp), port, 240, LITELLM_ENV, log=tmp / "litellm.log"
                ) as proc:
                    rows["litellm"] = litellm_row(port, sizes, proc.pid, place)
            except RuntimeError as exc:
                print(f"LiteLLM skipped: {exc}\n{(tmp / 'litellm.log').read_text()[-3000:]}", flush=True)
    summary = report(rows, rtt_us, args.placement)
    if args.json:
        args.json.write_text(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
