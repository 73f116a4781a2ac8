"""Triton over gRPC with ``tritonclient.grpc.aio``: ``ModelInfer`` and bidirectional ``ModelStreamInfer``.

The transport under ``backends/triton.py`` for ``protocol: grpc``: one aio channel per variant
(HTTP/2 multiplexes every request on it); ``infer`` for a model that sends one response,
``stream_infer`` for a decoupled one (each request's stream ends with the response Triton flags
``triton_final_response``). Inputs become typed numpy tensors from the model's declared datatypes
and batch dimension. Errors: a status Triton gives the request (any but the transport's own) →
400 with Triton's message, as Triton's HTTP generate endpoint answers them; UNAVAILABLE / NOT_FOUND
→ 503; DEADLINE_EXCEEDED → 504; an error inside a stream after output began → 502.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np

from backends.settings import TritonSettings
from backends.triton_tensors import ModelFacts
from serving.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    ClientError,
    ConfigError,
    TurnoutError,
)

INSTALL_HINT = "pip install 'turnout[triton]'"


def _client_modules() -> tuple[Any, Any, Any]:
    """(``tritonclient.grpc.aio``, ``tritonclient.utils``, ``grpc``), or a ConfigError with the hint."""
    try:
        aio = importlib.import_module("tritonclient.grpc.aio")
        return aio, importlib.import_module("tritonclient.utils"), importlib.import_module("grpc")
    except ImportError as exc:
        raise ConfigError(
            f"Triton's gRPC protocol needs tritonclient ({exc.name or exc} is missing): {INSTALL_HINT}"
        ) from None


_TRANSPORT_STATUSES = {
    "StatusCode.UNAVAILABLE": BackendUnavailable,
    "StatusCode.NOT_FOUND": BackendUnavailable,
    "StatusCode.RESOURCE_EXHAUSTED": BackendUnavailable,
    "StatusCode.DEADLINE_EXCEEDED": BackendTimeout,
    "StatusCode.CANCELLED": BackendError,
    "StatusCode.UNAUTHENTICATED": BackendError,
    "StatusCode.PERMISSION_DENIED": BackendError,
}


# What Triton says, in a stream error that carries no gRPC status, when the model cannot serve at
# all (not loaded, unloaded, not ready): the variant is down for everyone, as HTTP's 404 says.
_MODEL_UNAVAILABLE = ("unknown model", "has no available versions", "is not ready", "is not found")


def grpc_error(name: str, status: str | None, message: str) -> TurnoutError:
    """A gRPC status (``StatusCode.X``) from Triton → the gateway's typed error."""
    kind = _TRANSPORT_STATUSES.get(status or "")
    if kind is None and not status and any(words in message for words in _MODEL_UNAVAILABLE):
        kind = BackendUnavailable
    if kind is not None:
        return kind(f"Triton variant {name} ({status or 'stream'}): {message}")
    return ClientError(message or f"Triton refused the request ({status})", code="triton_rejected")


def to_array(value: Any, datatype: str, batched: bool, np_dtype: Any) -> np.ndarray:
    """One input value as the tensor Triton expects: ``[1, n]`` with a batch dimension, else ``[n]``."""
    values = value if isinstance(value, list) else [value]
    if datatype == "BYTES":
        array = np.array([str(v).encode("utf-8") for v in values], dtype=np.object_)
    else:
        try:
            array = np.array(values, dtype=np_dtype)
        except OverflowError:  # the request's value does not fit the model's input: the client's to fix
            raise ClientError(f"{values[0]} does not fit the model's {datatype} input") from None
    return array.reshape((1, len(values)) if batched else (len(values),))


def guess_datatype(name: str, value: Any) -> str:
    """A datatype for an input the model's config did not list."""
    if isinstance(value, list | str):
        return "BYTES"
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, int):
        return "UINT64" if name == "seed" else "INT32"
    return "FP32"


# gRPC's reconnect backoff defaults (1 s, x1.6, up to 120 s) suit a far server; after a Triton
# restart they left calls failing fast with UNAVAILABLE for seconds after it was back, enough to
# open the variant's breaker. A server beside the gateway is retried every 0.1-1 s instead.
RECONNECT_BACKOFF_MS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
}


def channel_options(aio: Any) -> list[tuple[str, Any]]:
    """tritonclient's own channel options (message sizes, keepalive) plus the reconnect backoff."""
    keepalive = aio.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", aio.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", aio.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        *RECONNECT_BACKOFF_MS.items(),
    ]


class TritonGrpc:
    """One Triton server's gRPC endpoint."""

    def __init__(self, name: str, settings: TritonSettings) -> None:
        assert settings.grpc_url is not None  # the settings validator makes sure
        self.name = name
        self.settings = settings
        self._aio, self._utils, self._grpc = _client_modules()
        self._client: Any = None

    @property
    def started(self) -> bool:
        return self._client is not None

    async def start(self) -> None:
        if self._client is None:
            self._client = self._aio.InferenceServerClient(
                url=self.settings.grpc_url, channel_args=channel_options(self._aio)
            )

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _live(self) -> Any:
        if self._client is None:
            raise BackendUnavailable(f"backend {self.name} is not started")
        return self._client

    def _error(self, exc: Exception) -> TurnoutError:
        status = exc.status() if hasattr(exc, "status") else None
        message = exc.message() if hasattr(exc, "message") else str(exc)
        return grpc_error(self.name, status, message or str(exc))

    async def model_config(self, model: str) -> dict[str, Any]:
        client = self._live()
        try:
            reply = await client.get_model_config(
                model, as_json=True, client_timeout=self.settings.timeouts.read
            )
        except self._utils.InferenceServerException as exc:
            raise self._error(exc) from exc
        config = reply.get("config") if isinstance(reply, dict) else None
        if not isinstance(config, dict):
            raise BackendError(f"Triton variant {self.name}: malformed model config")
        return config

    def _inputs(self, facts: ModelFacts, inputs: dict[str, Any]) -> list[Any]:
        made = []
        for name, value in inputs.items():
            datatype = facts.inputs.get(name) or guess_datatype(name, value)
            array = to_array(value, datatype, facts.batched, self._utils.triton_to_np_dtype(datatype))
            tensor = self._aio.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            made.append(tensor)
        return made

    @staticmethod
    def _outputs(result: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for output in result.get_response().outputs:
            array = result.as_numpy(output.name)
            if array is not None:
                found[output.name] = array.tolist()
        return found

    async def infer(self, facts: ModelFacts, inputs: dict[str, Any], request_id: str) -> dict[str, Any]:
        client = self._live()
        try:
            async with asyncio.timeout(self.settings.timeouts.read):
                result = await client.infer(facts.name, self._inputs(facts, inputs), request_id=request_id)
        except TimeoutError as exc:
            raise BackendTimeout(f"Triton variant {self.name}: read timeout") from exc
        except self._utils.InferenceServerException as exc:
            raise self._error(exc) from exc
        return self._outputs(result)

    async def stream(
        self, facts: ModelFacts, inputs: dict[str, Any], request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        client = self._live()
        request = {"model_name": facts.name, "inputs": self._inputs(facts, inputs), "request_id": request_id}

        async def requests() -> AsyncGenerator[dict[str, Any], None]:
            yield request  # then half-close: Triton ends the call after this request's last response

        responses = client.stream_infer(requests())
        began = False
        try:
            while True:
                try:
                    async with asyncio.timeout(self.settings.timeouts.read):
                        result, error = await responses.__anext__()
                except StopAsyncIteration:
                    if began:
                        return
                    raise BackendError(
                        f"Triton variant {self.name} ended the stream without a response"
                    ) from None
                except TimeoutError as exc:
                    raise BackendTimeout(f"Triton variant {self.name}: read timeout") from exc
                if error is not None:
                    if began:
                        raise BackendError(f"Triton variant {self.name} failed mid-stream: {error.message()}")
                    raise self._error(error)
                began = True
                yield self._outputs(result)
                final = result.get_response().parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    return
        except self._utils.InferenceServerException as exc:
            raise self._error(exc) from exc
        except self._grpc.aio.AioRpcError as exc:  # the stream call itself failed (e.g. unreachable)
            if began:  # output had begun: a broken stream, a bad gateway (as over HTTP)
                raise BackendError(f"Triton variant {self.name} failed mid-stream: {exc.details()}") from exc
            raise grpc_error(self.name, str(exc.code()), str(exc.details())) from exc
        finally:
            responses.cancel()
