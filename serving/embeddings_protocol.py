"""``/v1/embeddings`` on the wire: the request model, and the answer in the format asked for.

The first thing an embeddings body meets after the HTTP edge (``serving.api.embeddings_route``),
and the last thing its answer meets before it: OpenAI's request fields (``input`` as a text,
texts, token ids or lists of token ids; ``encoding_format``; ``dimensions``; ``user``), the
unknown ones kept for upstreams that take them (vLLM's ``truncate_prompt_tokens``), as the
generation endpoints keep theirs.
"""

from __future__ import annotations

import base64
from typing import Annotated, Literal, cast

import numpy as np
import orjson
from pydantic import Field

from backends.base import Embeddings, EmbedRequest
from serving.errors import ClientError
from serving.protocol import WireModel

MAX_INPUTS = 2048  # inputs in one request, as OpenAI takes


class EmbeddingsRequest(WireModel):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None

    def inputs(self) -> tuple[str | tuple[int, ...], ...]:
        """Each input, a text or a tuple of token ids; an empty one, or none, is a 400."""
        given: list[str | list[int]]
        if isinstance(self.input, str):
            given = [self.input]
        elif self.input and isinstance(self.input[0], int):
            given = [[int(token) for token in self.input if isinstance(token, int)]]
        else:
            given = cast(list[str | list[int]], self.input)
        if not given:
            raise ClientError("input must not be an empty list", param="input", code="invalid_value")
        if len(given) > MAX_INPUTS:
            message = f"at most {MAX_INPUTS} inputs per request, got {len(given)}"
            raise ClientError(message, param="input", code="invalid_value")
        inputs: list[str | tuple[int, ...]] = []
        for index, one in enumerate(given):
            if not one:  # OpenAI refuses an empty text; vLLM would embed a lone BOS
                what = "text" if isinstance(one, str) else "list of token ids"
                where = "" if len(given) == 1 else f" (input {index})"
                message = f"input must not be an empty {what}{where}"
                raise ClientError(message, param="input", code="invalid_value")
            inputs.append(one if isinstance(one, str) else tuple(one))
        return tuple(inputs)

    def to_embed_request(self, request_id: str) -> EmbedRequest:
        extra = dict(self.model_extra) if self.model_extra else {}
        if self.user is not None:
            extra["user"] = self.user
        return EmbedRequest(self.inputs(), self.dimensions, extra, request_id)


def embeddings_body(model: str, result: Embeddings, encoding_format: str | None) -> bytes:
    """OpenAI's answer: one ``embedding`` object per input, as numbers, or as base64 of their
    little-endian float32 bytes (what the openai SDK asks for unless told otherwise)."""
    vectors = result.vectors
    if encoding_format == "base64":
        raw = np.ascontiguousarray(vectors, dtype="<f4")
        rows: list[object] = [base64.b64encode(row.tobytes()).decode("ascii") for row in raw]
    else:
        rows = list(np.ascontiguousarray(vectors, dtype=np.float32))
    usage = {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}
    data = [{"object": "embedding", "index": index, "embedding": row} for index, row in enumerate(rows)]
    answer = {"object": "list", "data": data, "model": model, "usage": usage}
    return orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)
