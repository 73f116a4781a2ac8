"""Embeddings on the embedded engine: the shipped model's last hidden state, in-process.

``/v1/embeddings`` → ``serving.gateway`` → ``EmbeddedBackend.embed`` → here. Each GenAI folder
holds ``embed.onnx``, written by ``deploy.model.export``: the generation graph (``model.onnx``,
reading the same weights file) with the final norm's output as its only output. An input's
embedding is the hidden state of its last token, L2-normalized, which is what vLLM's
``--convert embed`` makes of a causal LM (LAST pooling, normalized), so both serve the same
vectors. Inputs run in right-padded batches, sorted by length, with plain ONNX Runtime on this
variant's own thread, off the event loop; at most ``max_waiting`` requests wait for it, and the
next one gets a 429, as a full generation queue does.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from deploy.model.artifacts import EMBEDDING_GRAPH, EMBEDDING_OUTPUT
from serving.errors import BackendError, Overloaded

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

    def embed(self, rows: list[NDArray[np.int64]]) -> NDArray[np.float32]:
        """One normalized vector per row of token ids, in the rows' order."""
        out = np.empty((len(rows), self.dimensions), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), _ROWS_PER_RUN):
            picked = order[start : start + _ROWS_PER_RUN]
            out[picked] = self._last_hidden([rows[i] for i in picked])
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out

    def _last_hidden(self, rows: list[NDArray[np.int64]]) -> NDArray[np.float32]:
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


class EmbeddingRunner:
    """One variant's embedding work: its own thread, and a bound on the requests waiting for it."""

    def __init__(self, name: str, graph: EmbeddingGraph, max_waiting: int) -> None:
        self.name = name
        self.graph = graph
        self.max_waiting = max_waiting
        self._waiting = 0
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"embed-{name}")

    async def embed(self, rows: list[NDArray[np.int64]]) -> NDArray[np.float32]:
        if self._waiting >= self.max_waiting:
            raise Overloaded(
                f"variant '{self.name}' has {self._waiting} embedding requests waiting (its queue "
                "size); retry later",
                retry_after=1.0,
            )
        self._waiting += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._thread, self.graph.embed, rows)
        finally:
            self._waiting -= 1

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)
