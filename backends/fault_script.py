"""The fault server's scripts and server-wide state: what each request should suffer, and counters.

Part of ``backends/fault.py``'s fake upstream (failure injection for tests and benchmarks):
:func:`parse_script` turns an ``x-fault`` directive string into a :class:`Script`;
:class:`FaultApp` holds the server's defaults, request counters and the load it reports on
``GET /metrics`` in vLLM's names. ``backends/fault_protocol.py`` does the wire side.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import orjson

DEFAULT_REPLY = "The quick brown fox jumps over the lazy dog."


@dataclass(frozen=True, slots=True)
class Script:
    echo: bool = False
    latency_ms: float = 0.0
    error: int = 0
    retry_after: int = 1
    cut: int = -1
    stall_ms: float = 0.0
    slow_chunks_ms: float = 0.0
    corrupt: bool = False
    error_event: int = -1
    drop: bool = False
    close: bool = False
    usage_every: bool = False
    bad_content: bool = False

    @property
    def instant(self) -> bool:
        """True when the answer can be written at once, without a task."""
        return not (self.latency_ms or self.stall_ms or self.slow_chunks_ms or self.drop)


_FLOAT_KEYS = {"latency": "latency_ms", "stall": "stall_ms", "slow_chunks": "slow_chunks_ms"}
_INT_KEYS = {"error": "error", "retry_after": "retry_after", "cut": "cut", "error_event": "error_event"}
_FLAGS = {"echo", "corrupt", "drop", "close", "usage_every", "bad_content"}
_script_cache: dict[str, Script] = {}


def parse_script(text: str) -> Script:
    """``"latency=5,error=500"`` → :class:`Script`; raises ValueError on an unknown directive."""
    cached = _script_cache.get(text)
    if cached is not None:
        return cached
    values: dict[str, Any] = {}
    for part in text.replace(";", ",").split(","):
        key, _, value = part.strip().partition("=")
        if key in ("", "ok"):
            continue
        if key in _FLAGS:
            values[key] = True
        elif key in _FLOAT_KEYS:
            values[_FLOAT_KEYS[key]] = float(value)
        elif key in _INT_KEYS:
            values[_INT_KEYS[key]] = int(value)
        else:
            raise ValueError(f"unknown fault directive {part.strip()!r}")
    script = Script(**values)
    if len(_script_cache) < 4096:
        _script_cache[text] = script
    return script


def split_reply(text: str, chunks: int) -> list[str]:
    """Split ``text`` into ``chunks`` near-equal non-empty pieces (fewer if it is short)."""
    n = max(1, min(chunks, len(text) or 1))
    step, rest = divmod(len(text), n)
    pieces, pos = [], 0
    for i in range(n):
        end = pos + step + (1 if i < rest else 0)
        pieces.append(text[pos:end])
        pos = end
    return pieces


class Stats:
    __slots__ = ("connections", "open_connections", "paths", "requests")

    def __init__(self) -> None:
        self.open_connections = 0
        self.reset()

    def reset(self) -> None:
        self.requests = 0  # POSTs to the two generation endpoints
        self.connections = 0  # connections accepted since start / reset
        self.paths: dict[str, int] = {}

    def as_json(self) -> bytes:
        return orjson.dumps(
            {
                "requests": self.requests,
                "connections": self.connections,
                "open_connections": self.open_connections,
                "paths": self.paths,
            }
        )


_METRICS_TEMPLATE = (
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{{engine="0",model_name="{model}"}} {waiting}\n'
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{{engine="0",model_name="{model}"}} {running}\n'
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    'vllm:kv_cache_usage_perc{{engine="0",model_name="{model}"}} {kv}\n'
)
_LOAD_FIELDS = {"waiting": float, "running": float, "kv": float}


class FaultApp:
    """Server-wide settings and counters, shared by every connection."""

    def __init__(
        self, *, default: str = "ok", reply: str = DEFAULT_REPLY, chunks: int = 8, model: str = "fake-model"
    ) -> None:
        self.default = parse_script(default)
        self.reply = reply
        self.pieces = split_reply(reply, chunks)
        self.chunks = chunks
        self.model = model
        self.stats = Stats()
        # What ``GET /metrics`` reports, in vLLM's names; ``POST /load?waiting=&running=&kv=`` sets it.
        self.load: dict[str, float] = {"waiting": 0.0, "running": 0.0, "kv": 0.0}
        self.conns: set[asyncio.Transport] = set()
        self.models_body = orjson.dumps(
            {
                "object": "list",
                "data": [{"id": model, "object": "model", "created": int(time.time()), "owned_by": "fault"}],
            }
        )

    def metrics_body(self) -> bytes:
        return _METRICS_TEMPLATE.format(model=self.model, **self.load).encode()

    def set_load(self, query: bytes) -> bytes:
        """Apply ``waiting=N&running=M&kv=F`` (any subset); raises ValueError on a bad field."""
        for key, value in urllib.parse.parse_qsl(query.decode(), strict_parsing=bool(query)):
            convert = _LOAD_FIELDS.get(key)
            if convert is None:
                raise ValueError(f"unknown load field {key!r}")
            self.load[key] = convert(value)
        return orjson.dumps(self.load)
