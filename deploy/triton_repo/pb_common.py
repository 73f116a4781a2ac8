"""What the python-backend models share: model-config parameters, tensors, and the batch driver.

Runs inside Triton's python-backend stub (``tritonserver``, the engine at the far end of
``backends/triton.py``), in the Triton venv (numpy<2), never in the gateway. Decoding is the
project's own: :class:`TokenEngine` is ``backends.ortgenai_runner.GenAIModel`` (right
padding, greedy/sampling options, EOS, stop strings, ``max_tokens``) that also records the
generated token ids and honours token-level stop words and ``end_id`` (TensorRT-LLM's
conventions). :class:`BatchDriver` runs ``GenAIModel.run_batch`` on a worker thread, as the
embedded engine does, while the calling thread's event loop hands each step's events to the
requests (so a decoupled model sends its responses while the batch decodes).
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import SamplingParams
from backends.ortgenai_runner import Event, GenAIModel, Sequence


def pb() -> Any:
    """``triton_python_backend_utils``: only importable inside the python-backend stub."""
    return importlib.import_module("triton_python_backend_utils")


class BadRequest(ValueError):
    """A request the model refuses (its message goes back to the client as a Triton error)."""


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What ``initialize(args)`` says about the model: its config, parameters and folder."""

    name: str
    config: dict[str, Any]
    folder: Path  # the model's folder in the repository (<repo>/<name>)

    @classmethod
    def from_args(cls, args: dict[str, str]) -> ModelContext:
        return cls(args["model_name"], json.loads(args["model_config"]), Path(args["model_repository"]))

    def param(self, key: str, default: str | None = None) -> str:
        value = self.config.get("parameters", {}).get(key, {}).get("string_value")
        if value is None or value.startswith("${"):
            if default is None:
                raise ValueError(f"model {self.name}: config.pbtxt has no parameter {key!r}")
            return default
        return str(value)

    def path(self, key: str) -> Path:
        """A path parameter; a relative one is relative to the model's folder."""
        return (self.folder / self.param(key)).resolve()

    def flag(self, key: str, default: bool) -> bool:
        return self.param(key, str(default)).strip().lower() in ("1", "true", "yes")

    @property
    def decoupled(self) -> bool:
        return bool(self.config.get("model_transaction_policy", {}).get("decoupled", False))


@dataclass(slots=True)
class TokenSequence(Sequence):
    """A :class:`Sequence` that keeps its generated token ids (TensorRT-LLM's ``output_ids``)."""

    tokens: list[int] = field(default_factory=list)
    stop_ids: tuple[tuple[int, ...], ...] = ()
    end_id: int | None = None
    error: str | None = None  # why the batch it was in failed

    def hits_stop_word(self) -> bool:
        return any(len(s) <= len(self.tokens) and tuple(self.tokens[-len(s) :]) == s for s in self.stop_ids)


class TokenEngine(GenAIModel):
    """``GenAIModel`` whose :class:`TokenSequence` rows record tokens and stop on stop words."""

    def _advance(self, seq: Sequence, token: int) -> None:
        if not isinstance(seq, TokenSequence):
            super()._advance(seq, token)
            return
        if token == seq.end_id and not seq.params.ignore_eos:
            seq.finish("stop")
            return
        if seq.params.ignore_eos or token not in self.eos_ids:
            seq.tokens.append(token)
        super()._advance(seq, token)
        if not seq.finished and seq.hits_stop_word():
            seq.finish("stop")


def load_engine(ctx: ModelContext) -> TokenEngine:
    cap = int(ctx.param("max_model_len", "0")) or None  # a rendered spec's kv_cache.max_model_len
    return TokenEngine(
        ctx.path("model_dir"), intra_op_threads=int(ctx.param("intra_op_threads", "1")), max_model_len=cap
    )


class BatchDriver:
    """Decode a list of sequences as ORT GenAI batches, grouped by compatible sampling settings."""

    def __init__(self, engine: GenAIModel) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="ortgenai")

    def sequence(
        self,
        prompt_ids: np.ndarray,
        params: SamplingParams,
        max_new_tokens: int,
        receive: Callable[[Event], None],
        **token_fields: Any,
    ) -> TokenSequence:
        budget = self.engine.context_length - len(prompt_ids)
        if budget < 1:
            raise BadRequest(
                f"the prompt has {len(prompt_ids)} tokens; the context length is {self.engine.context_length}"
            )
        return TokenSequence(
            prompt_ids, params, min(max_new_tokens, budget), self.loop, receive, **token_fields
        )

    def run(self, sequences: list[TokenSequence]) -> None:
        """Decode all of ``sequences``; each one's ``receive`` runs on this thread, step by step."""
        groups: dict[Any, list[TokenSequence]] = {}
        for index, seq in enumerate(sequences):
            groups.setdefault(seq.batch_key or ("alone", index), []).append(seq)
        for group in groups.values():
            rows: list[Sequence] = list(group)
            future = self.loop.run_in_executor(self._worker, self.engine.run_batch, rows)
            try:
                self.loop.run_until_complete(future)
            except Exception as exc:
                for seq in group:
                    seq.error = f"{type(exc).__name__}: {exc}"
                    seq.fail(exc)
            self.loop.run_until_complete(asyncio.sleep(0))  # the events delivered last

    def close(self) -> None:
        self._worker.shutdown(wait=True)
        self.loop.close()


# --- tensors ---------------------------------------------------------------------------------


def tensor(request: Any, name: str) -> np.ndarray | None:
    found = pb().get_input_tensor_by_name(request, name)
    return None if found is None else np.asarray(found.as_numpy())


def scalar(request: Any, name: str, default: Any = None) -> Any:
    """The one value of an optional ``[1]`` input (any batch dimension), or ``default``."""
    array = tensor(request, name)
    if array is None or array.size == 0:
        return default
    value = array.reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value.item()


def texts(request: Any, name: str) -> list[str]:
    """Every string of an optional BYTES input (``stop_words``, ``bad_words``, ``stop``)."""
    array = tensor(request, name)
    if array is None:
        return []
    values = (v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.reshape(-1))
    return [v for v in values if v]


def required_text(request: Any, name: str) -> str:
    value = scalar(request, name)
    if not isinstance(value, str):
        raise BadRequest(f"input {name!r} (a UTF-8 string) is required")
    return value


def bytes_tensor(name: str, values: list[str], shape: tuple[int, ...]) -> Any:
    array = np.array([v.encode("utf-8") for v in values], dtype=np.object_).reshape(shape)
    return pb().Tensor(name, array)


def int_tensor(name: str, values: list[int] | np.ndarray, shape: tuple[int, ...]) -> Any:
    return pb().Tensor(name, np.asarray(values, dtype=np.int32).reshape(shape))


def error_response(message: str) -> Any:
    utils = pb()
    return utils.InferenceResponse(output_tensors=[], error=utils.TritonError(message))


def sampling(
    request: Any, stop: tuple[str, ...] = (), top_p: str = "top_p", top_k: str = "top_k"
) -> SamplingParams:
    """``temperature`` (0: greedy; absent: greedy, except that a ``top_p`` or ``top_k`` asks to
    sample, at temperature 1, as the embedded engine, OpenAI and vLLM read it), ``top_p``/``top_k``
    (≤ 0: unset), ``seed``, ``ignore_eos``."""
    temperature = scalar(request, "temperature")
    p = scalar(request, top_p)
    k = scalar(request, top_k)
    seed = scalar(request, "seed")
    if temperature is not None and temperature < 0:
        raise BadRequest("temperature must be >= 0")
    return SamplingParams(
        temperature=None if temperature is None else float(temperature),
        top_p=float(p) if p is not None and p > 0 else None,
        top_k=int(k) if k is not None and k > 0 else None,
        seed=None if seed is None else int(seed),
        stop=stop,
        ignore_eos=bool(scalar(request, "ignore_eos", False)),
    ).with_default_temperature(0.0)
