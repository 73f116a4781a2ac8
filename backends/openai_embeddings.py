"""An OpenAI-compatible upstream's ``/embeddings``: the request body out, the vectors back.

Pure helpers under ``OpenAIHttpBackend.embed`` (``backends/openai_http.py``), on the way to
vLLM (``--runner pooling``), another Turnout, or any OpenAI-compatible server. Vectors are
always asked for as floats (every such server speaks them) and come back as one float32
matrix, which ``serving.embeddings_protocol`` writes in the format the client asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from backends.base import Embeddings, EmbedRequest


def embeddings_body(model: str, request: EmbedRequest) -> bytes:
    """The upstream request: the client's unknown fields (vLLM's ``truncate_prompt_tokens``…)
    first, then what the gateway decided; several inputs as one list, one as itself."""
    body: dict[str, Any] = dict(request.extra) if request.extra else {}
    inputs = [list(given) if isinstance(given, tuple) else given for given in request.inputs]
    body["model"] = model
    body["input"] = inputs[0] if len(inputs) == 1 and isinstance(inputs[0], str) else inputs
    body["encoding_format"] = "float"
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    return orjson.dumps(body)


def read_embeddings(content: bytes, expected: int) -> Embeddings:
    """The upstream's answer as one row per input, by each item's ``index``. Raises ValueError
    (or KeyError, TypeError) on an answer of the wrong shape: the adapter's 502."""
    data = orjson.loads(content)
    items = data["data"]
    if not isinstance(items, list) or len(items) != expected:
        got = len(items) if isinstance(items, list) else type(items).__name__
        raise ValueError(f"{got} embeddings for {expected} inputs")
    rows: list[Any] = [None] * expected
    for position, item in enumerate(items):
        index = item.get("index", position)
        if not isinstance(index, int) or not 0 <= index < expected or rows[index] is not None:
            raise ValueError(f"an embedding with index {index!r}")
        rows[index] = item["embedding"]
    vectors = np.asarray(rows, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError("embeddings of different lengths, or not lists of numbers")
    usage = data.get("usage") or {}
    prompt_tokens = usage.get("prompt_tokens", 0) if isinstance(usage, dict) else 0
    return Embeddings(vectors, prompt_tokens if isinstance(prompt_tokens, int) else 0)
