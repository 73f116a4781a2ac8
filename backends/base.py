"""The contract between the gateway and every backend adapter.

``serving.gateway`` builds a :class:`GenerateRequest` from the validated OpenAI wire
request and hands it to one adapter (``backends/<kind>.py``) behind the small
:class:`Backend` protocol. Adapters answer with a :class:`Completion` or yield typed
:class:`Chunk` objects; they never write HTTP or SSE framing (``serving/sse.py`` does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from serving.errors import ClientError

RequestKind = Literal["chat", "completion"]
FinishReason = Literal["stop", "length", "cancelled", "error"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Decoding settings; ``temperature == 0`` means greedy. None is the backend's or model's
    default (:meth:`with_default_temperature`, for the engines that run the model themselves)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # vLLM's extension: keep generating past EOS until max_tokens (fixed-length benchmarks).
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature is None or self.temperature == 0.0

    def with_default_temperature(self, default: float) -> SamplingParams:
        """An unset temperature as ``default`` (the model's own), except that a request setting
        top_p or top_k asks to sample: a greedy default becomes 1, as OpenAI and vLLM read it."""
        if self.temperature is not None:
            return self
        if default == 0.0 and (self.top_p is not None or self.top_k is not None):
            default = 1.0
        return replace(self, temperature=default)


@dataclass(slots=True)
class GenerateRequest:
    """One generation, already validated, addressed to one variant."""

    kind: RequestKind
    params: SamplingParams
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    # A prompt sent as token ids (``/v1/completions`` with ``"prompt": [1, 22, ...]``), used as
    # given (no BOS added, as vLLM does); ``prompt`` is then None.
    prompt_ids: list[int] | None = None
    # Unknown OpenAI fields, passed through to backends that understand them.
    extra: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # An OpenAI-compatible upstream's other usage fields (``prompt_tokens_details.cached_tokens``,
    # ``completion_tokens_details.reasoning_tokens``…), passed on as it shaped them.
    details: dict[str, Any] | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        counts: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        return {**counts, **self.details} if self.details else counts

    def add(self, other: Usage) -> None:
        """Count ``other`` in too (one choice per prompt of a batch); details sum field by field."""
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        if other.details:
            self.details = _summed(self.details or {}, other.details)


def _summed(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two usage-detail trees added: numbers summed, nested objects merged, a missing side kept."""
    out = dict(a)
    for key, value in b.items():
        mine = out.get(key)
        if isinstance(mine, dict) and isinstance(value, dict):
            out[key] = _summed(mine, value)
        elif isinstance(mine, int | float) and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = mine + value
        elif mine is None:
            out[key] = value
    return out


@dataclass(slots=True)
class Chunk:
    """A piece of a streamed answer: new text, and on the last one the finish reason and usage."""

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    # This chunk's choices[0].logprobs as the OpenAI API shapes it (its tokens only), when asked for.
    logprobs: dict[str, Any] | None = None
    # The delta's other fields an OpenAI-compatible upstream set (tool_calls, reasoning_content…),
    # passed on as it shaped them.
    extra: dict[str, Any] | None = None
    # On the finishing chunk: the stop sequence (or stop token id) that ended the answer, as
    # vLLM's ``stop_reason`` says; None when it ended otherwise (EOS, length) or nobody says.
    stop_reason: str | int | None = None
    # As :attr:`Completion.choice_extra` and :attr:`Completion.response_extra`, on the chunk that
    # carried them: vLLM's token_ids per chunk, prompt_token_ids on the first, system_fingerprint
    # on the last.
    choice_extra: dict[str, Any] | None = None
    response_extra: dict[str, Any] | None = None


def merge_extra(mine: dict[str, Any] | None, later: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two chunks' extra fields as one chunk's: lists (token ids) go on, anything else the later wins."""
    if not later:
        return mine
    if not mine:
        return later
    out = dict(mine)
    for key, value in later.items():
        before = out.get(key)
        out[key] = before + value if isinstance(before, list) and isinstance(value, list) else value
    return out


@dataclass(slots=True)
class Completion:
    text: str
    finish_reason: str
    usage: Usage
    # choices[0].logprobs as the OpenAI API shapes it (prompt tokens first with echo), when asked for.
    logprobs: dict[str, Any] | None = None
    # The chat message's other fields an OpenAI-compatible upstream set (tool_calls, refusal,
    # reasoning_content…), passed on as it shaped them.
    message_extra: dict[str, Any] | None = None
    stop_reason: str | int | None = None  # as :attr:`Chunk.stop_reason`
    # An OpenAI-compatible upstream's other fields, passed on as it set them: the choice's
    # (vLLM's prompt_logprobs, token_ids, prompt_token_ids…) and the answer's (system_fingerprint,
    # a chat's prompt_logprobs…). Dropping them answered 200 without what the client asked for.
    choice_extra: dict[str, Any] | None = None
    response_extra: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What metrics labels and reports say about a variant, and how the gateway treats it."""

    kind: str
    engine: str
    vendor: str = "cpu"
    accelerator: str = "cpu"
    # Watch for a client hanging up during a non-streamed answer from the start, and cancel the
    # work. Worth a task per request where the compute is ours (an in-process engine); other
    # variants' requests are watched once 0.5 s old (``serving.api.openai_routes``).
    cancel_on_disconnect: bool = False
    # The most requests the variant queues at once, where it refuses beyond a bound (429): a
    # request with several prompts keeps at most this many in flight, so it never fills the
    # queue by itself and gets a 429 no retry could cure. None: no such bound.
    queue_size: int | None = None
    # The one task the variant serves, where its settings say (an OpenAI-compatible upstream's
    # ``task``): "generate" or "embed"; the other gets a 400 (:func:`generator`,
    # :func:`embedder`). None: whatever the adapter implements.
    task: str | None = None


@runtime_checkable
class Backend(Protocol):
    """One adapter instance serves one variant."""

    info: BackendInfo

    async def start(self) -> None:
        """Open pools, load models; called once before serving."""

    async def close(self) -> None:
        """Release everything; called once at shutdown."""

    def ready(self) -> bool:
        """True when the variant can take requests now."""

    async def complete(self, request: GenerateRequest) -> Completion:
        """Generate the whole answer."""

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        """Yield the answer piece by piece; the last chunk carries finish_reason and usage."""


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """One ``/v1/embeddings`` call, already validated: each input a text or a list of token ids
    (taken as sent, no BOS added, as vLLM does)."""

    inputs: tuple[str | tuple[int, ...], ...]
    # OpenAI's (and vLLM's) ``dimensions``: None is the model's own size.
    dimensions: int | None = None
    # Unknown fields (vLLM's ``truncate_prompt_tokens``…) and ``user``, for upstreams that take them.
    extra: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""

    def check_dimensions(self, size: int) -> None:
        """The 400 for ``dimensions`` other than the model's own ``size`` (as vLLM refuses it)."""
        if self.dimensions is not None and self.dimensions != size:
            raise ClientError(
                f"this model's embeddings have {size} dimensions and it was not trained to shorten "
                f"them (Matryoshka); leave dimensions unset or {size}, got {self.dimensions}",
                param="dimensions",
                code="unsupported_value",
            )


@dataclass(frozen=True, slots=True)
class Embeddings:
    """One row per input, in the inputs' order; ``prompt_tokens`` counts every input's tokens."""

    vectors: NDArray[np.float32]
    prompt_tokens: int


@runtime_checkable
class Embedder(Protocol):
    """A variant that also answers ``/v1/embeddings`` (the embedded engine, an OpenAI-compatible
    upstream serving an embedding model); the others are told so with a 400."""

    async def embed(self, request: EmbedRequest) -> Embeddings:
        """The inputs' embeddings, one vector each."""


@runtime_checkable
class TokenCounter(Protocol):
    """A variant that can say how many tokens a request's prompt is without running it (the
    embedded engine; an upstream with vLLM's ``/tokenize``), for ``/v1/responses/input_tokens``."""

    async def count_tokens(self, request: GenerateRequest) -> int:
        """The prompt tokens the engine would read for ``request`` (its chat template applied)."""


def token_counter(backend: Backend, variant: str) -> TokenCounter:
    """``backend`` as a :class:`TokenCounter`, or the 400 saying its variant cannot count."""
    if isinstance(backend, TokenCounter):
        return backend
    info = backend.info
    raise ClientError(
        f"variant '{variant}' ({info.kind}, {info.engine}) cannot count a prompt's tokens without "
        "running it; route this model to an embedded variant or an upstream with vLLM's /tokenize",
        param="model",
        code="model_not_supported",
    )


def embedder(backend: Backend, variant: str) -> Embedder:
    """``backend`` as an :class:`Embedder`, or the 400 saying its variant serves no embeddings."""
    info = backend.info
    if isinstance(backend, Embedder) and info.task != "generate":
        return backend
    why = "its task is generate" if info.task == "generate" else f"{info.kind}, {info.engine}"
    raise ClientError(
        f"variant '{variant}' ({why}) does not serve embeddings; route /v1/embeddings to an "
        "embedded variant, an upstream serving an embedding model, or Triton with an embed_model",
        param="model",
        code="model_not_supported",
    )


def generator(backend: Backend, variant: str) -> Backend:
    """``backend``, or the 400 saying its variant serves embeddings only (``task: embed``: vLLM's
    pooling runner answers no chat or completions; asked anyway, it said only 404)."""
    if backend.info.task != "embed":
        return backend
    raise ClientError(
        f"variant '{variant}' serves embeddings only (task: embed): send its requests to "
        "/v1/embeddings, or route this model to a generating variant",
        param="model",
        code="model_not_supported",
    )
