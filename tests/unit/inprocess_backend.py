"""The part every in-process test backend of the gateway shares (tests/unit/test_gateway_*.py).

Those tests hold a request at a chosen point (across a breaker's cooldown, a cancellation,
a mid-stream bug), which a real server's timing cannot pin down; each subclass says what its
``complete`` and ``stream`` do.
"""

from __future__ import annotations

from backends.base import BackendInfo, GenerateRequest, SamplingParams

REQUEST = GenerateRequest(kind="chat", params=SamplingParams(), messages=[{"role": "user", "content": "hi"}])


class InProcessBackend:
    """Started, ready, an OpenAI-compatible vLLM as far as the gateway can tell."""

    info = BackendInfo(kind="openai_http", engine="vllm")

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def ready(self) -> bool:
        return True
