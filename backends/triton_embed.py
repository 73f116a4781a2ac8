"""``/v1/embeddings`` on a Triton variant: the request as its embedding model's tensors, and back.

Pure helpers under ``TritonBackend.embed`` (``backends/triton.py``), on the way to the model its
``embed_model`` names (the shipped repository's ``turnout_tiny_embed``, or any model with the same
tensors): ``text_input`` (BYTES, ``[n]``, no batch dimension) in, ``embedding`` (FP32,
``[n, dimensions]``; the HTTP generate extension sends it flattened) and ``prompt_tokens``
(INT32, ``[n]``, optional) out. Texts only: a Triton model tokenizes its own input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.base import Embeddings, EmbedRequest
from backends.openai_fields import check_extra
from serving.errors import BackendError, ClientError


def no_embed_model(variant: str) -> ClientError:
    return ClientError(
        f"variant '{variant}' (triton) serves no embeddings: its settings name no embed_model (the "
        "shipped repository's is turnout_tiny_embed, which preset turnout-tiny sets)",
        param="model",
        code="model_not_supported",
    )


def embedding_inputs(request: EmbedRequest) -> dict[str, Any]:
    """The model's inputs; a 400 for what it cannot take (token ids, fields it has no input for)."""
    check_extra(request.extra, "a Triton variant")
    texts = []
    for index, given in enumerate(request.inputs):
        if not isinstance(given, str):
            raise ClientError(
                f"input {index}: token-id inputs are not supported by Triton variants (the model "
                "tokenizes its own input); send text",
                param="input",
                code="unsupported_value",
            )
        texts.append(given)
    return {"text_input": texts}


def read_embeddings(variant: str, outputs: dict[str, Any], expected: int) -> Embeddings:
    """One row per input from the model's outputs; a 502 for an answer of another shape."""
    try:
        vectors = np.asarray(outputs["embedding"], dtype=np.float32)
        if vectors.ndim == 1 and expected and vectors.size % expected == 0:  # the generate extension's
            vectors = vectors.reshape(expected, -1)
        counts = outputs.get("prompt_tokens")
        prompt_tokens = int(np.asarray(counts, dtype=np.int64).sum()) if counts is not None else 0
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendError(f"Triton variant {variant} sent no usable embedding output ({exc})") from None
    if vectors.ndim != 2 or vectors.shape[0] != expected or vectors.shape[1] == 0:
        raise BackendError(
            f"Triton variant {variant} sent embeddings of shape {list(vectors.shape)} for {expected} inputs"
        )
    return Embeddings(vectors, prompt_tokens)
