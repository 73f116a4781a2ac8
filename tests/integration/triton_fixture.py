"""Small ``tritonclient`` helpers for tests against the real ``tritonserver``.

The server itself is the session's one: the ``triton`` fixture of ``tests/integration/engines.py``,
started once per test session and shared by every module. Here: build inputs from plain values,
read text outputs, read an SSE stream; ``distinct_ports`` for tests that start another server.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
from tritonclient.utils import np_to_triton_dtype

from tests.integration.engines import distinct_ports

__all__ = ["distinct_ports", "infer_inputs", "sse_events", "text_of"]


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
