"""OpenAI wire models: the first thing a request body meets after the HTTP edge.

Lenient where OpenAI is (unknown fields are kept in ``model_extra`` and passed on to
backends that understand them), strict about the types of the fields we use, so that
``"max_tokens": "5"`` is a 400 rather than a silent coercion.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, NotRequired, cast

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from backends.base import GenerateRequest, RequestKind, SamplingParams
from backends.openai_fields import logprob_options
from serving.errors import ClientError

_MAX_STOP_SEQUENCES = 4
_INT64 = 2**63  # OpenAI's seed is an int64, as vLLM takes it
_INT32_MAX = 2**31 - 1  # max_tokens and top_k: engines (Triton's tensors, TensorRT-LLM) hold int32s
MAX_PROMPTS = 256  # prompts in one /v1/completions request (each becomes one choice)


class WireModel(BaseModel):
    # NaN and Infinity (which the JSON parser takes, as it does 1e999) are refused as not finite,
    # not as "above 2", which read as if the value were merely too large.
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class StreamOptions(WireModel):
    include_usage: bool | None = False  # OpenAI's schema allows an explicit null (= false)


# Messages (and their content parts) validate straight into the dicts that adapters receive:
# no model object per message, and nothing to dump back. The client's own keys (tool calls and
# their ids, names, image parts) are kept as sent, since OpenAI-compatible upstreams take the
# message whole; adapters that render a prompt read role and content.
_AS_SENT = ConfigDict(extra="allow", strict=True)


@with_config(_AS_SENT)
class TextPart(TypedDict):
    type: str
    text: NotRequired[str | None]


@with_config(_AS_SENT)
class ChatMessage(TypedDict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: NotRequired[str | list[TextPart] | None]
    name: NotRequired[str | None]


class SamplingFields(WireModel):
    """Fields shared by chat and text completions."""

    kind: ClassVar[RequestKind]
    model: str
    max_tokens: int | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = False  # null means false, as in OpenAI's schema
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: bool | None = None  # vLLM extension (null: false, as vLLM reads it)

    def check(self, max_tokens_field: str = "max_tokens") -> None:
        if self.n is not None and self.n != 1:
            raise ClientError("only n=1 is supported", param="n", code="unsupported_value")
        extra = self.model_extra  # None or {} on most requests: no extension field to check
        max_tokens = self.effective_max_tokens()
        scoring = max_tokens == 0 and extra is not None and extra.get("echo") is True  # score the prompt only
        if max_tokens is not None and max_tokens < 1 and not scoring:
            raise ClientError(
                f"{max_tokens_field} must be at least 1, got {max_tokens}"
                + (
                    " (0 only scores the prompt, with echo: true)"
                    if max_tokens == 0 and self.kind == "completion"
                    else ""
                ),
                param=max_tokens_field,
                code="invalid_value",
            )
        if max_tokens is not None and max_tokens > _INT32_MAX:  # engines hold it as an int32
            message = f"{max_tokens_field} must be at most {_INT32_MAX}"
            raise ClientError(message, param=max_tokens_field, code="invalid_value")
        if self.top_k is not None and not -1 <= self.top_k <= _INT32_MAX:
            raise ClientError(
                f"top_k must be -1 or 0 (off) or a positive count up to {_INT32_MAX}",
                param="top_k",
                code="invalid_value",
            )
        if self.seed is not None and not -_INT64 <= self.seed < _INT64:
            raise ClientError("seed must be a 64-bit integer", param="seed", code="invalid_value")
        if self.stream_options is not None and not self.stream:
            raise ClientError("stream_options is only allowed when stream is true", param="stream_options")
        if self.stream_options is not None and (self.stream_options.model_extra or {}).get(
            "continuous_usage_stats"
        ):  # vLLM's usage on every chunk: not produced here, so not silently dropped either
            raise ClientError(
                "stream_options.continuous_usage_stats is not supported; include_usage gives the "
                "usage in a last chunk",
                param="stream_options.continuous_usage_stats",
                code="unsupported_value",
            )
        if isinstance(self.stop, list) and len(self.stop) > _MAX_STOP_SEQUENCES:
            raise ClientError(
                f"at most {_MAX_STOP_SEQUENCES} stop sequences", param="stop", code="invalid_value"
            )
        if extra:
            logprob_options(self.kind, extra)  # logprobs / top_logprobs / echo: a 400 naming it

    def effective_max_tokens(self) -> int | None:
        return self.max_tokens

    def sampling(self) -> SamplingParams:
        stop: tuple[str, ...]
        if self.stop is None:
            stop = ()
        elif isinstance(self.stop, str):
            stop = (self.stop,) if self.stop else ()
        else:
            stop = tuple(s for s in self.stop if s)
        return SamplingParams(
            max_tokens=self.effective_max_tokens(),
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=None if self.top_k in (None, -1, 0) else self.top_k,
            seed=self.seed,
            stop=stop,
            ignore_eos=bool(self.ignore_eos),
        )

    def include_usage(self) -> bool:
        return self.stream_options is not None and bool(self.stream_options.include_usage)

    def extra_fields(self) -> dict[str, Any]:
        """Fields passed on to backends: the unknown ones, and ``user`` (an OpenAI-compatible
        upstream may use it too: another Turnout routes by it; other engines ignore it)."""
        extra = dict(self.model_extra) if self.model_extra else {}
        if self.user is not None:
            extra["user"] = self.user
        return extra

    def to_generates(self, request_id: str) -> list[GenerateRequest]:
        """One request per prompt (a /v1/completions batch has several; chat has one)."""
        raise NotImplementedError


def chat_generates(wire: SamplingFields, messages: list[dict[str, Any]], rid: str) -> list[GenerateRequest]:
    """The one chat generation of a chat request (and of a Responses API one, read as chat)."""
    extra = wire.extra_fields()
    return [GenerateRequest("chat", wire.sampling(), messages=messages, extra=extra, request_id=rid)]


class ChatCompletionRequest(SamplingFields):
    kind: ClassVar[RequestKind] = "chat"
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: int | None = None

    def effective_max_tokens(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens

    def check(self, max_tokens_field: str = "max_tokens") -> None:
        field = "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"
        super().check(field)

    def message_dicts(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.messages)  # validated dicts, as sent

    def to_generates(self, request_id: str) -> list[GenerateRequest]:
        return chat_generates(self, self.message_dicts(), request_id)


class CompletionRequest(SamplingFields):
    kind: ClassVar[RequestKind] = "completion"
    # Text, token ids, or a batch of either (lm-evaluation-harness sends ``[[ids...]]``).
    prompt: str | list[str] | list[int] | list[list[int]]

    def prompts(self) -> list[str | list[int]]:
        """The prompts of this request, each a text or a list of token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if not prompt:
            raise ClientError("prompt must not be an empty list", param="prompt", code="invalid_value")
        if isinstance(prompt[0], int):
            return [[int(token) for token in prompt]]
        if len(prompt) > MAX_PROMPTS:
            raise ClientError(f"at most {MAX_PROMPTS} prompts per request", param="prompt")
        return list(prompt)

    def to_generates(self, request_id: str) -> list[GenerateRequest]:
        prompts = self.prompts()
        params, extra = self.sampling(), self.extra_fields()
        requests = []
        for index, prompt in enumerate(prompts):
            rid = request_id if len(prompts) == 1 else f"{request_id}-{index}"
            text, ids = (prompt, None) if isinstance(prompt, str) else (None, prompt)
            requests.append(
                GenerateRequest(
                    kind="completion", params=params, prompt=text, prompt_ids=ids, extra=extra, request_id=rid
                )
            )
        return requests
