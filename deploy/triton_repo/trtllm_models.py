"""TensorRT-LLM-shaped python-backend models: preprocessing, tensorrt_llm(_stream), postprocessing.

Runs inside ``tritonserver`` (the engine at the far end of ``backends/triton.py``'s TensorRT-LLM
ensemble face). The ``ensemble`` (and ``ensemble_stream``) models chain these three steps with
the tensor names of NVIDIA's inflight-batcher layout, so a client written for a real
TensorRT-LLM deployment talks to the project's model unchanged:

* ``preprocessing``: ``QUERY`` → ``INPUT_ID`` (BOS + tokens), ``REQUEST_INPUT_LEN``, and the
  ``STOP_WORDS_DICT``/``BAD_WORDS_DICT`` strings as ``[2, N]`` word lists (flat ids; end offsets
  padded with -1), ``OUT_END_ID``/``OUT_PAD_ID`` (the tokenizer's unless given);
* ``tensorrt_llm``: ``input_ids``, ``input_lengths``, ``request_output_len``, ``end_id``, ``pad_id``,
  ``stop_words_list``, ``temperature``, ``runtime_top_k``, ``runtime_top_p``, ``seed``,
  ``exclude_input_in_output``, ``streaming`` → ``output_ids`` ``[beam, len]``, ``sequence_length``
  ``[beam]``, ``num_input_tokens``, ``num_output_tokens``; decoded with ORT GenAI, batched like
  ``turnout_tiny``. Output ids include the prompt unless ``exclude_input_in_output`` (the
  ``exclude_input_in_output`` parameter is the default), stop words are kept, ``end_id`` is not.
  Streaming needs the decoupled ``tensorrt_llm_stream`` and sends only new tokens each time.
  Not supported here (refused, not ignored): non-empty ``bad_words``, ``beam_width`` > 1;
* ``postprocessing``: ``TOKENS_BATCH``, ``SEQUENCE_LENGTH`` → ``OUTPUT`` text, special tokens skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.ortgenai_runner import Event, GenAIModel
from deploy.triton_repo.pb_common import (
    BadRequest,
    BatchDriver,
    ModelContext,
    TokenEngine,
    TokenSequence,
    bytes_tensor,
    error_response,
    int_tensor,
    pb,
    sampling,
    scalar,
    tensor,
    texts,
)


def word_list(encoded: list[np.ndarray]) -> np.ndarray:
    """TensorRT-LLM's ``[2, N]`` word list: flat ids (0-padded), end offsets (-1-padded)."""
    flat = [int(t) for ids in encoded for t in ids]
    offsets = list(np.cumsum([len(ids) for ids in encoded])) if encoded else []
    width = max(len(flat), 1)
    return np.array([flat + [0] * (width - len(flat)), offsets + [-1] * (width - len(offsets))], np.int32)


def words_of(array: np.ndarray | None) -> tuple[tuple[int, ...], ...]:
    """The token sequences of a ``[2, N]`` (or ``[1, 2, N]``) word list."""
    if array is None or array.size == 0:
        return ()
    rows = array.reshape(2, -1)
    words, start = [], 0
    for end in (int(e) for e in rows[1] if e >= 0):
        if end > start:
            words.append(tuple(int(t) for t in rows[0][start:end]))
        start = end
    return tuple(words)


class Preprocessing:
    def __init__(self, args: dict[str, str]) -> None:
        self.ctx = ModelContext.from_args(args)
        self.tok = GenAIModel(self.ctx.path("tokenizer_dir"))
        self.add_bos = self.ctx.flag("add_special_tokens", True)

    def _encode_words(self, words: list[str]) -> np.ndarray:
        return word_list([self.tok.encode(w) for w in words])[np.newaxis]

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(request) for request in requests]

    def _one(self, request: Any) -> Any:
        query = scalar(request, "QUERY")
        if not isinstance(query, str):
            return error_response("input QUERY (text_input) is required")
        ids = self.tok.encode(query)
        if self.add_bos:
            ids = np.concatenate([np.array([self.tok.bos_id], np.int32), ids])
        out_len = int(scalar(request, "REQUEST_OUTPUT_LEN", 16))
        end_id = int(scalar(request, "END_ID", min(self.tok.eos_ids)))
        pad_id = int(scalar(request, "PAD_ID", self.tok.pad_id))
        utils = pb()
        return utils.InferenceResponse(
            output_tensors=[
                int_tensor("INPUT_ID", ids, (1, len(ids))),
                int_tensor("REQUEST_INPUT_LEN", [len(ids)], (1, 1)),
                utils.Tensor("STOP_WORDS_IDS", self._encode_words(texts(request, "STOP_WORDS_DICT"))),
                utils.Tensor("BAD_WORDS_IDS", self._encode_words(texts(request, "BAD_WORDS_DICT"))),
                int_tensor("REQUEST_OUTPUT_LEN", [out_len], (1, 1)),
                int_tensor("OUT_END_ID", [end_id], (1, 1)),
                int_tensor("OUT_PAD_ID", [pad_id], (1, 1)),
            ]
        )

    def finalize(self) -> None:
        return None


@dataclass(slots=True)
class _TokenJob:
    prompt: np.ndarray
    exclude_input: bool
    streaming: bool
    sender: Any
    seq: TokenSequence | None = None
    sent: int = 0  # tokens already streamed
    finish: str | None = None

    def receive(self, event: Event) -> None:
        _, finish, generated = event
        assert self.seq is not None
        if finish is None and not self.streaming:
            return
        self.finish = finish
        if self.sender is None:
            return
        final = finish is not None
        new: list[int] = []
        if self.streaming:
            # The tokens of the steps up to this event (the worker may already be further on).
            new = self.seq.tokens[self.sent : max(generated, len(self.seq.tokens) if final else 0)]
            self.sent += len(new)
            response = self.response(new)
        else:
            response = self.response(self.output())
        flags = pb().TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        if finish == "error":
            response = error_response(self.seq.error or "generation failed")
        if final or new:
            try:
                self.sender.send(response, flags=flags)
            except Exception:  # the client went away
                self.seq.cancel_requested = True

    def output(self) -> list[int]:
        assert self.seq is not None
        generated = list(self.seq.tokens)
        return generated if self.exclude_input else [int(t) for t in self.prompt] + generated

    def response(self, ids: list[int]) -> Any:
        assert self.seq is not None
        return pb().InferenceResponse(
            output_tensors=[
                int_tensor("output_ids", ids, (1, 1, len(ids))),
                int_tensor("sequence_length", [len(ids)], (1, 1)),
                int_tensor("num_input_tokens", [len(self.prompt)], (1, 1)),
                int_tensor("num_output_tokens", [len(self.seq.tokens)], (1, 1)),
            ]
        )


class TensorRTLLM:
    """``tensorrt_llm`` (one response per request) and ``tensorrt_llm_stream`` (decoupled)."""

    def __init__(self, args: dict[str, str]) -> None:
        self.ctx = ModelContext.from_args(args)
        self.engine = TokenEngine(
            self.ctx.path("gpt_model_path"), int(self.ctx.param("intra_op_threads", "1"))
        )
        self.driver = BatchDriver(self.engine)
        self.exclude_input = self.ctx.flag("exclude_input_in_output", False)

    def _job(self, request: Any, sender: Any) -> _TokenJob:
        ids = tensor(request, "input_ids")
        if ids is None:
            raise BadRequest("input_ids is required")
        ids = ids.reshape(-1).astype(np.int32)
        ids = ids[: int(scalar(request, "input_lengths", len(ids)))]
        if words_of(tensor(request, "bad_words_list")):
            raise BadRequest("bad_words is not supported by this engine (ONNX Runtime GenAI here)")
        if int(scalar(request, "beam_width", 1)) != 1:
            raise BadRequest("beam_width > 1 is not supported by this engine")
        streaming = bool(scalar(request, "streaming", False))
        if streaming and not self.ctx.decoupled:
            raise BadRequest("streaming is only supported if the model is decoupled (use ensemble_stream)")
        exclude = bool(scalar(request, "exclude_input_in_output", self.exclude_input))
        job = _TokenJob(ids, exclude, streaming, sender)
        end_id = scalar(request, "end_id")
        job.seq = self.driver.sequence(
            ids,
            sampling(request, top_p="runtime_top_p", top_k="runtime_top_k"),
            int(scalar(request, "request_output_len", 16)),
            job.receive,
            stop_ids=words_of(tensor(request, "stop_words_list")),
            end_id=None if end_id is None else int(end_id),
        )
        return job

    def execute(self, requests: list[Any]) -> list[Any] | None:
        jobs: list[_TokenJob | str] = []
        final = pb().TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            sender = request.get_response_sender() if self.ctx.decoupled else None
            try:
                jobs.append(self._job(request, sender))
            except (BadRequest, ValueError, TypeError) as exc:
                jobs.append(str(exc))
                if sender is not None:
                    sender.send(error_response(str(exc)), flags=final)
        self.driver.run([job.seq for job in jobs if isinstance(job, _TokenJob) and job.seq is not None])
        if self.ctx.decoupled:
            return None
        return [error_response(job) if isinstance(job, str) else self._answer(job) for job in jobs]

    @staticmethod
    def _answer(job: _TokenJob) -> Any:
        if job.finish == "error":
            return error_response((job.seq.error if job.seq else None) or "generation failed")
        return job.response(job.output())

    def finalize(self) -> None:
        self.driver.close()


class Postprocessing:
    def __init__(self, args: dict[str, str]) -> None:
        self.ctx = ModelContext.from_args(args)
        self.tok = GenAIModel(self.ctx.path("tokenizer_dir"))

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            tokens = tensor(request, "TOKENS_BATCH")
            lengths = tensor(request, "SEQUENCE_LENGTH")
            if tokens is None or lengths is None:
                responses.append(error_response("TOKENS_BATCH and SEQUENCE_LENGTH are required"))
                continue
            beams = tokens.reshape(-1, tokens.shape[-1]) if tokens.size else np.zeros((1, 0), np.int32)
            lens = lengths.reshape(-1)
            text = [self.tok.decode(beams[b][: int(lens[b])]) for b in range(len(lens))]
            responses.append(
                pb().InferenceResponse(output_tensors=[bytes_tensor("OUTPUT", text, (1, len(text)))])
            )
        return responses

    def finalize(self) -> None:
        return None
