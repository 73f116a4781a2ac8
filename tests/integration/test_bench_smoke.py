"""The benchmarks still run end to end (tiny settings; their figures are not asserted here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from deploy.triton_runtime import TritonServer
from deploy.vllm_runtime import VllmServer
from tests.integration.engines import triton_install_or_skip

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


SCRIPTS = sorted(
    path.name for path in (ROOT / "bench").glob("*.py") if "argparse" in path.read_text(encoding="utf-8")
)


def test_every_bench_script_at_least_starts() -> None:
    """The benches not run below (Ray, LiteLLM, long ones) must still import: `--help` each."""
    assert "ray_scaleout.py" in SCRIPTS and "gateway_overhead.py" in SCRIPTS
    for script in SCRIPTS:
        assert "usage:" in run(f"bench/{script}", "--help"), script


def test_embedded_engine_bench_prints_its_table() -> None:
    out = run("bench/embedded_engine.py", "--tokens", "8", "--rounds", "1")
    for precision in ("fp32", "int8", "int4"):
        assert any(
            line.startswith(precision) and re.search(r"\d\.\d\dx +\d\.\d\d \.\. \d\.\d\d ", line)
            for line in out.splitlines()
        )
        assert re.search(rf"^  {precision} +batched \d+ / \d+, batch 1 \d+ / \d+$", out, re.MULTILINE)
        assert re.search(
            rf"^  {precision} +batch 1 \d+ \(\d+\), batch 16 \d+ \(\d+\): a token \d\.\d\dx faster batched$",
            out,
            re.MULTILINE,
        )
    assert re.search(
        r"^target: batching gain >= 3\.00x .*: fp32 (PASS|MISS).*, int8 (PASS|MISS).*, int4 ", out, re.M
    )
    assert "gateway RSS" in out


def test_embeddings_bench_prints_its_table() -> None:
    triton_install_or_skip()  # --triton starts the shipped repository in a real tritonserver
    out = run("bench/embeddings.py", "--seconds", "0.2", "--turns", "1", "--batch", "4", "--triton")
    for row in ("fp32", "int8", "int4", "triton-http", "triton-grpc"):
        assert re.search(rf"^{row} +\d+\.\d\d +\d+\.\d\d +\d+ +\d+ +\d+ +\d+\.\d\dx$", out, re.M), out


def test_batch_throughput_bench_prints_its_ratio() -> None:
    out = run("bench/batch_throughput.py", "--requests", "32", "--tokens", "4", "--turns", "1")
    assert re.search(r"batch / HTTP throughput: \d+\.\d\dx", out), out


def test_memory_soak_bench_prints_its_growth() -> None:
    out = run("bench/memory_soak.py", "--seconds", "4", "--every", "2", "--users", "4")
    assert re.search(r"RSS growth after the first period: [+-]\d+\.\d MB over \d+ requests", out), out
    assert "errors: 0; gateway answering /health at the end: yes" in out, out


def test_gateway_overhead_bench_prints_its_table() -> None:
    out = run("bench/gateway_overhead.py", "--quick", "--skip-litellm")
    assert "added p50 (ms)" in out
    assert "c=32 throughput (req/s)" in out
    assert "targets (Turnout)" in out
    assert "Turnout's own logic (turnout - bare, c=1 p50)" in out  # the bare relay rows ran
    assert "the same relay on aiohttp's client (bare-aiohttp)" in out
    if len(os.sched_getaffinity(0)) >= 2:  # one core: nothing to ping-pong between
        assert "this machine: cross-core round trip p50" in out


def test_control_plane_bench_prints_its_ratios() -> None:
    out = run("bench/control_plane_overhead.py", "--quick")
    assert "round 2/2" in out
    for name in ("plain", "routed+shadow10%", "routed+shadow100%"):
        assert any(line.startswith(name) and "x" in line for line in out.splitlines())
    assert "target routed p50 <= 1.10x plain" in out


def test_prefix_affinity_bench_prints_its_table(vllm: VllmServer) -> None:
    """The session's one vLLM server as both replicas (two names for it: the figures mean nothing
    here, the bench's path runs); the bench starts two servers of its own when not given URLs."""
    other = vllm.base_url.replace("127.0.0.1", "localhost")
    out = run("bench/prefix_affinity.py", "--documents", "2", "--questions", "2", "--words", "150",
              "--vllm-url", vllm.base_url, "--vllm-url", other)  # fmt: skip
    for policy in ("spread", "affinity"):
        assert re.search(rf"^{policy} +\d+ +\d+\.\d% +\d+ +\d+\.\d +\d+ / \d+$", out, re.M), out
    assert re.search(r"^prompt tokens computed, affinity / spread: \d+\.\d\dx$", out, re.M), out


def test_real_backends_bench_prints_its_table(vllm: VllmServer, triton: TritonServer) -> None:
    """Against the session's vLLM and Triton (the bench starts its own when not given URLs)."""
    out = run(
        "bench/real_backends.py", "--quick", "--vllm-url", vllm.base_url, "--triton-url", triton.http_url
    )
    assert "added p50 (ms)" in out and "throughput ratio" in out
    for engine in ("vllm", "triton"):
        assert [line.split()[1] for line in out.splitlines() if line.startswith(engine + " ")] == ["1", "16"]
        assert re.search(
            rf"^targets \({engine}\): added p50 <= 1 ms \(c=1\): (PASS|MISS)[^,]*, "
            r"throughput ratio >= 0\.97 \(c=16\): (PASS|MISS)",
            out,
            re.MULTILINE,
        )
        assert f"c=1 added p50 of {engine}: " in out  # with its bootstrap interval
        assert f"c=16 throughput ratio of {engine} through Turnout: " in out
        assert f"c=16 throughput ratio of {engine} through the bare relay: " in out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("control ")][:1] == ["1"]
    assert "targets (control)" not in out and "control (fault server answering after 5 ms" in out
    for where in ("vllm", "triton", "the control"):  # the bare relay ran in front of each
        assert (
            f"bare relay (bench/bare_proxy.py: uvicorn + upstream pool, no gateway logic) in front of {where}"
            in out
        )
