"""The gateway-overhead bench's placement of its upstream double (bench/placement.py): a real
child process moved between the two cores, phase by phase."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.placement import GATEWAY_CORE, LOADGEN_CORE, UpstreamPlacement


def _cores_of_threads(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(tid)) for tid in sorted(os.listdir(f"/proc/{pid}/task"))]


TWO_CORES = hasattr(os, "sched_getaffinity") and {GATEWAY_CORE, LOADGEN_CORE} <= os.sched_getaffinity(0)


@pytest.mark.skipif(not TWO_CORES, reason="needs cores 0 and 1 and sched_setaffinity (Linux, 2+ cores)")
@pytest.mark.parametrize(("mode", "latency_core"), [("matched", GATEWAY_CORE), ("split", LOADGEN_CORE)])
def test_the_fault_server_moves_beside_the_gateway_only_for_latency_phases(
    mode: str, latency_core: int
) -> None:
    code = (
        "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); "
        "print(1, flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline()  # both threads exist now
    try:
        place = UpstreamPlacement(child.pid, mode)
        place.for_latency()
        assert _cores_of_threads(child.pid) == [{latency_core}] * 2
        place.for_throughput()
        assert _cores_of_threads(child.pid) == [{LOADGEN_CORE}] * 2
        assert ("beside the gateways" in place.describe()) == (mode == "matched")
    finally:
        child.kill()
        child.wait()
