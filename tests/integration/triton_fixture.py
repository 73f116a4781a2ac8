"""One real ``tritonserver`` per test module, serving the shipped model repository.

Installs Triton once into its cached venv (``deploy/triton_runtime.py``: ~30 s the first
time, then reused), stages ``deploy/triton_repo`` into the module's temp directory and
starts the server on free 127.0.0.1 ports (ready in ~4 s); it is always stopped (SIGTERM,
shared memory cleared). With no way to reach PyPI the tests skip and say what installs it.
Also small ``tritonclient`` helpers: build inputs from plain values, read text, read SSE.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from tritonclient.utils import np_to_triton_dtype

from deploy.triton_repo import stage_repository
from deploy.triton_runtime import (
    INSTALL_HINT,
    REQUIREMENTS,
    TritonError,
    TritonInstall,
    TritonServer,
    ensure_triton,
    installed,
    triton_server,
)
from serving.launcher import free_port


def triton_install_or_skip() -> TritonInstall:
    found = installed()
    if found is not None:
        return found
    try:
        return ensure_triton()
    except TritonError as exc:
        if not exc.offline:
            raise
        lines = str(exc).splitlines()
        pytest.skip(
            f"Triton is not installed and PyPI is unreachable ({lines[0]} {lines[-1]}); "
            f"install it with: {INSTALL_HINT}"
            f"  or pip install {' '.join(REQUIREMENTS)} into a venv"
        )


def distinct_ports(count: int) -> tuple[int, ...]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return tuple(ports)


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    install = triton_install_or_skip()
    work = tmp_path_factory.mktemp("triton")
    repo = stage_repository(work / "repo")
    ports = distinct_ports(3)
    with triton_server(install, repo, *ports, timeout=90, log=work / "tritonserver.log") as server:
        yield server


# --- client helpers --------------------------------------------------------------------------


def infer_inputs(module: Any, values: dict[str, Any]) -> list[Any]:
    """InferInputs for ``values`` (str → BYTES, bool → BOOL, int → INT32, float → FP32, list → BYTES)."""
    made = []
    for name, value in values.items():
        if isinstance(value, list):
            array = np.array([[v.encode() for v in value]], dtype=np.object_)
        elif isinstance(value, str):
            array = np.array([[value.encode()]], dtype=np.object_)
        elif isinstance(value, bool):
            array = np.array([[value]], dtype=np.bool_)
        elif isinstance(value, int):
            array = np.array([[value]], dtype=np.uint64 if name == "seed" else np.int32)
        else:
            array = np.array([[value]], dtype=np.float32)
        item = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        item.set_data_from_numpy(array)
        made.append(item)
    return made


def text_of(result: Any, name: str = "text_output") -> str:
    return "".join(v.decode() for v in result.as_numpy(name).reshape(-1))


def sse_events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    with httpx.stream("POST", url, json=body, timeout=30) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    return events
