"""Embeddings on the embedded engine: the shipped model's last hidden state, in-process.

``/v1/embeddings`` → ``serving.gateway`` → ``EmbeddedBackend.embed`` → here. Each GenAI folder
holds ``embed.onnx``, written by ``deploy.model.export``: the generation graph (``model.onnx``,
reading the same weights file) with the final norm's output as its only output. An input's
embedding is the hidden state of its last token, L2-normalized, which is what vLLM's
``--convert embed`` makes of a causal LM (LAST pooling, normalized), so both serve the same
vectors. Inputs run in right-padded passes of up to 32, sorted by length, with plain ONNX
Runtime on the worker thread of the variant's own embedding batcher
(``backends.dynamic_batcher``), off the event loop: requests that arrive while a pass runs share
the next one (no wait is added to gather them), and a full queue gets a 429, as the generation
queue does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from backends.dynamic_batcher import DynamicBatcher
from backends.settings import BatchingSettings
from deploy.model.artifacts import EMBEDDING_GRAPH, EMBEDDING_OUTPUT
from serving.errors import BackendError

_ROWS_PER_RUN = 32  # inputs in one forward pass: the padding of a sorted batch stays small


class EmbeddingGraph:
    """``embed.onnx`` of one GenAI folder, loaded in an ONNX Runtime session."""

    def __init__(self, folder: Path, intra_op_threads: int = 1) -> None:
        import onnxruntime as ort  # installed with onnxruntime-genai

        graph = folder / EMBEDDING_GRAPH
        if not graph.is_file():
            raise BackendError(
                f"{folder} has no {EMBEDDING_GRAPH}, so its model cannot serve embeddings; rebuild it "
                "with: turnout model build"
            )
        decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
        self.dimensions = int(decoder["hidden_size"])
        self._kv_shape = (int(decoder["num_key_value_heads"]), 0, int(decoder["head_size"]))
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        self._past = [i.name for i in self._session.get_inputs() if i.name.startswith("past_key_values.")]

    def embed(self, rows: list[NDArray[np.integer]]) -> NDArray[np.float32]:
        """One normalized vector per row of token ids, in the rows' order."""
        out = np.empty((len(rows), self.dimensions), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), _ROWS_PER_RUN):
            picked = order[start : start + _ROWS_PER_RUN]
            out[picked] = self._last_hidden([rows[i] for i in picked])
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out

    def _last_hidden(self, rows: list[NDArray[np.integer]]) -> NDArray[np.float32]:
        lengths = np.array([len(row) for row in rows])
        ids = np.zeros((len(rows), int(lengths.max())), dtype=np.int64)  # right padding
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
        mask = (np.arange(ids.shape[1]) < lengths[:, None]).astype(np.int64)
        feed: dict[str, NDArray[np.int64] | NDArray[np.float32]] = {"input_ids": ids, "attention_mask": mask}
        empty = np.zeros((len(rows), *self._kv_shape), dtype=np.float32)
        for name in self._past:
            feed[name] = empty
        (hidden,) = self._session.run([EMBEDDING_OUTPUT], feed)
        result: NDArray[np.float32] = hidden[np.arange(len(rows)), lengths - 1]
        return result


@dataclass(eq=False, slots=True)
class EmbeddingJob:
    """One request's rows, waiting in the variant's embedding batcher (a ``BatchJob``)."""

    rows: list[NDArray[np.integer]]
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[NDArray[np.float32]]
    enqueued_at: float = 0.0
    queued: bool = False

    @property
    def batch_key(self) -> Hashable | None:
        return "embed"  # any two requests' inputs can share a pass

    @property
    def cancelled(self) -> bool:
        return self.done.cancelled()

    def succeed(self, vectors: NDArray[np.float32]) -> None:
        """From the worker thread: hand the vectors to the waiting request."""
        self.loop.call_soon_threadsafe(self._hand_over, vectors, None)

    def fail(self, error: BaseException) -> None:
        """From the worker thread: the pass this job was in raised."""
        failure = BackendError(f"embedding failed: {type(error).__name__}: {error}")
        self.loop.call_soon_threadsafe(self._hand_over, None, failure)

    def _hand_over(self, vectors: NDArray[np.float32] | None, failure: BackendError | None) -> None:
        if self.done.done():  # its client left meanwhile
            return
        if vectors is not None:
            self.done.set_result(vectors)
        else:
            self.done.set_exception(failure or BackendError("embedding failed"))


class EmbeddingRunner:
    """One variant's embedding work: requests queue (bounded: a full queue is a 429), and those
    waiting while a pass runs share the next one, with no wait added to gather more."""

    def __init__(self, name: str, graph: EmbeddingGraph, batching: BatchingSettings) -> None:
        self.graph = graph
        settings = batching.model_copy(update={"max_queue_delay_ms": 0.0})
        self._batcher = DynamicBatcher[EmbeddingJob](f"{name}-embeddings", settings, self._run)
        self._batcher.start()

    def _run(self, jobs: list[EmbeddingJob]) -> None:
        live = [job for job in jobs if not job.cancelled]
        vectors = self.graph.embed([row for job in live for row in job.rows])
        start = 0
        for job in live:
            job.succeed(vectors[start : start + len(job.rows)])
            start += len(job.rows)

    async def embed(self, rows: list[NDArray[np.integer]]) -> NDArray[np.float32]:
        loop = asyncio.get_running_loop()
        job = EmbeddingJob(rows, loop, loop.create_future())
        self._batcher.submit(job)  # a full queue: Overloaded (429)
        try:
            return await job.done
        finally:
            self._batcher.withdraw(job)  # if still queued (its client left)

    def close(self) -> None:
        self._batcher.stop()
