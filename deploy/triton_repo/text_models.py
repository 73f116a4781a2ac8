"""Text-in, text-out python-backend models: ``turnout_tiny`` (+ ``_stream``) and ``turnout_tiny_vllm``.

Runs inside ``tritonserver`` (the engine at the far end of ``backends/triton.py``). Triton's
dynamic batcher hands ``execute`` several requests at once; they are decoded together as
ORT GenAI batches (:class:`pb_common.BatchDriver`), prompts right-padded with BOS prepended,
as the embedded engine does. Tensors: ``text_input`` (BYTES), ``max_tokens`` (INT32), and
optional ``temperature``, ``top_p``, ``top_k``, ``seed``, ``stop``, ``ignore_eos``, ``stream``
→ ``text_output`` (BYTES) plus ``finish_reason``, ``prompt_tokens``, ``completion_tokens``.

A decoupled model sends, when ``stream`` is true, one response per piece of text and a last
one (possibly empty text, with ``finish_reason``) flagged ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``;
with ``stream`` false it sends the whole answer in that one final response.
``turnout_tiny_vllm`` takes the tensors of Triton's vLLM backend: ``text_input``, ``stream``,
``sampling_parameters`` (JSON) and ``exclude_input_in_output`` (default false: the prompt is
echoed before the answer when not streaming, as that backend does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.base import SamplingParams
from backends.ortgenai_runner import Event
from deploy.triton_repo.pb_common import (
    BadRequest,
    BatchDriver,
    ModelContext,
    TokenSequence,
    bytes_tensor,
    error_response,
    int_tensor,
    load_engine,
    pb,
    required_text,
    sampling,
    scalar,
    texts,
)

_VLLM_SAMPLING_KEYS = frozenset({"max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos"})


@dataclass(slots=True)
class _Job:
    """One request in flight: where its answer goes and what has been generated so far."""

    request: Any
    prompt: str
    prompt_tokens: int
    stream: bool
    sender: Any  # the response sender of a decoupled model, else None
    batched: bool  # responses carry the batch dimension (max_batch_size > 0)
    echo: str = ""  # text put before the answer in the final response (vLLM's prompt echo)
    pieces: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    generated: int = 0
    seq: TokenSequence | None = None
    error: str | None = None

    def receive(self, event: Event) -> None:
        text, finish, generated = event
        self.generated = generated
        if finish is None:
            if self.stream:
                self._send(self.response(text), 0)
            else:
                self.pieces.append(text)
            return
        self.finish_reason = finish
        self.pieces.append(text)
        if self.sender is not None:
            last = self.pieces[-1] if self.stream else self.echo + "".join(self.pieces)
            self._send(self.final_response(last), pb().TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _send(self, response: Any, flags: int) -> None:
        if self.sender is None:
            return
        try:
            self.sender.send(response, flags=flags)
        except Exception:  # the client went away: stop decoding this row
            if self.seq is not None:
                self.seq.cancel_requested = True

    def _shape(self) -> tuple[int, ...]:
        return (1, 1) if self.batched else (1,)

    def response(self, text: str) -> Any:
        return pb().InferenceResponse(output_tensors=[bytes_tensor("text_output", [text], self._shape())])

    def final_response(self, text: str) -> Any:
        if self.finish_reason == "error":
            return error_response((self.seq.error if self.seq else None) or "generation failed")
        shape = self._shape()
        return pb().InferenceResponse(
            output_tensors=[
                bytes_tensor("text_output", [text], shape),
                bytes_tensor("finish_reason", [self.finish_reason or "stop"], shape),
                int_tensor("prompt_tokens", [self.prompt_tokens], shape),
                int_tensor("completion_tokens", [self.generated], shape),
            ]
        )


class TextModel:
    """``turnout_tiny`` (one response per request) and ``turnout_tiny_stream`` (decoupled)."""

    def __init__(self, args: dict[str, str]) -> None:
        self.ctx = ModelContext.from_args(args)
        self.engine = load_engine(self.ctx)
        self.driver = BatchDriver(self.engine)
        self.batched = int(self.ctx.config.get("max_batch_size", 0)) > 0
        self.default_max_tokens = int(self.ctx.param("default_max_tokens", "16"))

    def parse(self, request: Any) -> tuple[str, SamplingParams, int, bool, str]:
        """(prompt, sampling, max_tokens, stream, echo) of one request."""
        prompt = required_text(request, "text_input")
        max_tokens = int(scalar(request, "max_tokens", self.default_max_tokens))
        stream = bool(scalar(request, "stream", False))
        if stream and not self.ctx.decoupled:
            raise BadRequest(f"model {self.ctx.name} is not decoupled: use {self.ctx.name}_stream to stream")
        return prompt, sampling(request, stop=tuple(texts(request, "stop"))), max_tokens, stream, ""

    def execute(self, requests: list[Any]) -> list[Any] | None:
        jobs: list[_Job] = []
        for request in requests:
            sender = request.get_response_sender() if self.ctx.decoupled else None
            try:
                prompt, params, max_tokens, stream, echo = self.parse(request)
                if max_tokens < 1:
                    raise BadRequest("max_tokens must be at least 1")
                ids = self.engine.encode(prompt)
                ids = np.concatenate([np.array([self.engine.bos_id], dtype=np.int32), ids])
                job = _Job(request, prompt, len(ids), stream, sender, self.batched, echo)
                job.seq = self.driver.sequence(ids, params, max_tokens, job.receive)
                jobs.append(job)
            except (BadRequest, ValueError, TypeError) as exc:
                if sender is not None:
                    sender.send(error_response(str(exc)), flags=pb().TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                jobs.append(_Job(request, "", 0, False, None, self.batched, error=str(exc)))
        self.driver.run([job.seq for job in jobs if job.seq is not None])
        if self.ctx.decoupled:
            return None
        return [self._answer(job) for job in jobs]

    @staticmethod
    def _answer(job: _Job) -> Any:
        if job.seq is None:
            return error_response(job.error or "bad request")
        return job.final_response(job.echo + "".join(job.pieces))

    def finalize(self) -> None:
        self.driver.close()


class VllmShapedModel(TextModel):
    """``turnout_tiny_vllm``: the tensors of Triton's vLLM backend, decoupled, no batch dimension."""

    def parse(self, request: Any) -> tuple[str, SamplingParams, int, bool, str]:
        prompt = required_text(request, "text_input")
        stream = bool(scalar(request, "stream", False))
        raw = scalar(request, "sampling_parameters", "{}") or "{}"
        try:
            options = json.loads(raw)
        except ValueError as exc:
            raise BadRequest(f"sampling_parameters is not JSON: {exc}") from None
        if not isinstance(options, dict):
            raise BadRequest("sampling_parameters must be a JSON object")
        unknown = sorted(set(options) - _VLLM_SAMPLING_KEYS)
        if unknown:
            raise BadRequest(f"sampling_parameters: not supported here: {', '.join(unknown)}")
        stop = options.get("stop") or ()
        temperature, top_p, top_k = options.get("temperature"), options.get("top_p"), options.get("top_k")
        params = SamplingParams(
            temperature=None if temperature is None else float(temperature),
            top_p=float(top_p) if top_p is not None and 0 < float(top_p) <= 1 else None,
            top_k=int(top_k) if top_k is not None and int(top_k) > 0 else None,
            seed=None if options.get("seed") is None else int(options["seed"]),
            stop=(stop,) if isinstance(stop, str) else tuple(str(s) for s in stop),
            ignore_eos=bool(options.get("ignore_eos", False)),
        ).with_default_temperature(0.0)  # a top_p/top_k alone samples, as in pb_common.sampling
        exclude_input = bool(scalar(request, "exclude_input_in_output", False))
        echo = "" if stream or exclude_input else prompt
        return prompt, params, int(options.get("max_tokens", self.default_max_tokens)), stream, echo
