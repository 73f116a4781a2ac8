"""The python-backend embedding model: ``turnout_tiny_embed``, texts in, vectors out.

Runs inside ``tritonserver`` (the engine at the far end of ``backends/triton.py``'s ``embed``).
Tensors: ``text_input`` (BYTES, ``[n]``) → ``embedding`` (FP32, ``[n, hidden]``) and
``prompt_tokens`` (INT32, ``[n]``). Each text gets BOS first and its vector is the last token's
final hidden state, L2-normalized, from the ``embed.onnx`` beside the model's generation graph:
the embedded engine's own code (``backends.embedded_embeddings.EmbeddingGraph``), so a Triton
variant, the embedded engine and vLLM's pooling runner answer with the same vectors. A request's
texts run together, in right-padded passes of up to 32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.embedded_embeddings import EmbeddingGraph
from backends.ortgenai_runner import GenAIModel
from deploy.triton_repo.pb_common import BadRequest, ModelContext, error_response, int_tensor, pb, tensor


class EmbedModel:
    """``initialize``'s work: the tokenizer (from the GenAI folder) and the embedding graph."""

    def __init__(self, args: dict[str, str]) -> None:
        ctx = ModelContext.from_args(args)
        folder, threads = ctx.path("model_dir"), int(ctx.param("intra_op_threads", "1"))
        cap = int(ctx.param("max_model_len", "0")) or None  # a rendered spec's kv_cache.max_model_len
        self._model = GenAIModel(folder, intra_op_threads=threads, max_model_len=cap)
        self._graph = EmbeddingGraph(folder, threads)

    def _rows(self, request: Any) -> list[np.ndarray]:
        given = tensor(request, "text_input")
        if given is None or given.size == 0:
            raise BadRequest("text_input: give at least one text")
        rows = []
        for index, value in enumerate(given.reshape(-1)):
            text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
            if not text:
                raise BadRequest(f"text_input[{index}]: an empty text has no embedding")
            try:
                ids = self._model.prompt_ids(text)
            except ValueError as exc:
                raise BadRequest(f"text_input[{index}]: {exc}") from None
            if len(ids) > self._model.context_length:
                raise BadRequest(
                    f"text_input[{index}]: {len(ids)} tokens, over this model's maximum context length "
                    f"of {self._model.context_length} tokens"
                )
            rows.append(ids)
        return rows

    def execute(self, requests: list[Any]) -> list[Any]:
        utils = pb()
        responses = []
        for request in requests:
            try:
                rows = self._rows(request)
            except BadRequest as exc:
                responses.append(error_response(str(exc)))
                continue
            vectors = self._graph.embed(rows)
            counts = [len(row) for row in rows]
            outputs = [utils.Tensor("embedding", vectors), int_tensor("prompt_tokens", counts, (len(rows),))]
            responses.append(utils.InferenceResponse(output_tensors=outputs))
        return responses

    def finalize(self) -> None:
        """Nothing to stop: no worker threads; the sessions go with the stub process."""
