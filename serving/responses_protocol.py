"""``POST /v1/responses`` wire model: OpenAI's Responses API request, read as a chat request.

Where it sits: the generation edge (``serving.api.openai_routes``) parses a Responses body
with :class:`ResponsesRequest`, which offers the same methods as the chat and completions wire
models (``serving.protocol``), so the request then takes the chat path unchanged: the route's
split, shadows, canary samples, limits, and any backend (the embedded engine, vLLM, Triton).
``input`` and ``instructions`` become chat messages, function tools and calls chat's
(``serving.responses_input``), ``max_output_tokens`` the token limit, ``text.format`` a chat
``response_format``, ``reasoning.effort`` ``reasoning_effort``, and ``include:
["message.output_text.logprobs"]`` with ``top_logprobs`` chat's ``logprobs`` and
``top_logprobs``, which backends take or refuse as they do on chat. The answer is shaped by
``serving.responses_output`` and ``serving.responses_stream``. This is LiteLLM's bridge for
providers without a Responses API.

An answer is stored unless the request says ``store: false`` or the gateway's config turns
storing off (``serving.api.stored_responses``); ``previous_response_id`` continues a stored one
and ``conversation`` a conversation of ``/v1/conversations`` (:meth:`ResponsesRequest.continuing`).
``background: true`` answers at once and runs the request behind
(``serving.api.background_responses``). What a chat request cannot carry (hosted tools, files)
is a 400 naming it, never dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PrivateAttr

from backends.base import GenerateRequest, RequestKind
from backends.logprobs import MAX_TOP_LOGPROBS
from serving.conversations import conversation_id_of
from serving.errors import TurnoutError
from serving.protocol import SamplingFields, chat_generates
from serving.responses_input import chat_tool_choice, chat_tools, input_messages, invalid, unsupported

NO_STORE = (
    "this gateway stores no responses (every answer says store: false); send the earlier turns "
    "in input instead"
)
NO_CONVERSATIONS = (
    "this gateway keeps no conversations (responses.store is false in its config); send the "
    "earlier turns in input instead"
)


# Chat's names of the fields this request was turned into → the names its client sent.
_SENT_AS = {
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
    "logprobs": "include",
}
LOGPROBS = "message.output_text.logprobs"  # the one ``include`` taken here


def in_responses_terms(error: TurnoutError) -> TurnoutError:
    """A backend's refusal of the chat request (``'response_format' is not supported by the
    embedded engine``, a context overflow on ``max_tokens``) in the names the client used."""
    sent_as = _SENT_AS.get(error.param or "")
    if sent_as is not None:
        error.message = error.message.replace(f"'{error.param}'", f"'{sent_as}'")
        error.param = sent_as
    elif error.code == "unsupported_content":  # an engine that reads text: what it was sent
        error.message = error.message.replace("'image_url'", "'input_image'")
    return error


def _response_format(text: dict[str, Any]) -> dict[str, Any] | None:
    """``text.format`` → the chat ``response_format`` it means (None: plain text)."""
    unknown = sorted(set(text) - {"format", "verbosity"})
    if unknown:
        raise unsupported(f"text.{unknown[0]}: not supported here", f"text.{unknown[0]}")
    if text.get("verbosity") not in (None, "medium"):
        raise unsupported("text.verbosity: only medium (the default) is supported here", "text.verbosity")
    found = text.get("format")
    if found is None:
        return None
    kind = found.get("type") if isinstance(found, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert isinstance(found, dict)
        schema = {key: found[key] for key in ("name", "schema", "strict", "description") if key in found}
        return {"type": "json_schema", "json_schema": schema}
    raise invalid("text.format.type: must be text, json_object or json_schema", "text.format.type")


class ResponsesRequest(SamplingFields):
    """A Responses API request. Inherits the chat sampling fields (``top_k``, ``seed``, ``stop``
    work as on chat, as vLLM's Responses API takes them); ``max_tokens`` and ``n`` are chat's
    and refused here with the name that is."""

    kind: ClassVar[RequestKind] = "chat"
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: int | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    metadata: Annotated[dict[str, str], Field(max_length=16)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    background: bool | None = None
    top_logprobs: int | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    _context: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    def check(self, max_tokens_field: str = "max_output_tokens") -> None:
        self._refuse_what_chat_cannot_carry()
        super().check("max_output_tokens")

    def _refuse_what_chat_cannot_carry(self) -> None:
        for chat_name, ours in (("max_tokens", "max_output_tokens"), ("n", None), ("messages", "input")):
            sent = chat_name in (self.model_extra or {})
            if sent or (chat_name != "messages" and getattr(self, chat_name) is not None):
                hint = f"; the Responses API calls it {ours}" if ours else " (one output per request)"
                raise unsupported(f"{chat_name} is a chat completions field{hint}", chat_name)
        if conversation_id_of(self.conversation) is not None and self.previous_response_id is not None:
            raise invalid(
                "conversation and previous_response_id cannot be used together: a response "
                "continues either a conversation or an earlier response",
                "conversation",
            )
        if self.background and self.store is False:
            raise invalid(
                "background: a background response is read back from the store, so it needs store: true",
                "background",
            )
        if not self.tools and self.tool_choice not in (None, "none", "auto"):
            raise invalid("tool_choice: there are no tools to choose from", "tool_choice")
        for index, wanted in enumerate(self.include or []):
            if wanted != LOGPROBS:
                message = f"include.{index}: {wanted!r} is not supported here; only {LOGPROBS!r}"
                raise unsupported(message, f"include.{index}")
        if "logprobs" in (self.model_extra or {}):
            raise unsupported(
                f"logprobs is a chat completions field; the Responses API asks with include: "
                f"[{LOGPROBS!r}] and top_logprobs",
                "logprobs",
            )
        if self.top_logprobs is not None and not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            message = f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {self.top_logprobs}"
            raise invalid(message, "top_logprobs")
        if self.truncation == "auto":
            raise unsupported(
                "truncation: auto is not supported; an input longer than the model's context is a 400",
                "truncation",
            )
        if self.reasoning and set(self.reasoning) - {"effort", "summary"}:
            unknown = sorted(set(self.reasoning) - {"effort", "summary"})[0]
            raise unsupported(f"reasoning.{unknown}: not supported here", f"reasoning.{unknown}")
        if self.reasoning and self.reasoning.get("summary") is not None:
            raise unsupported("reasoning.summary: not supported here", "reasoning.summary")
        if isinstance(self.input, list) and not self.input and self._input_required():
            raise invalid("input: must not be an empty list", "input")

    def _input_required(self) -> bool:
        return True

    def effective_max_tokens(self) -> int | None:
        return self.max_output_tokens

    def wants_logprobs(self) -> bool:
        """Each output token's logprob in ``output_text.logprobs``: asked with ``include`` or a
        ``top_logprobs`` above 0."""
        return LOGPROBS in (self.include or []) or bool(self.top_logprobs)

    def include_usage(self) -> bool:
        return False  # Responses' stream_options (include_obfuscation) has none: usage always comes last

    def continuing(self, context: list[dict[str, Any]]) -> None:
        """Read ``context`` (a stored response's items: ``previous_response_id``; or a
        conversation's) before ``input``."""
        self._context = context

    def message_dicts(self) -> list[dict[str, Any]]:
        """``instructions`` (a system message), the context continued, and ``input`` as chat
        messages (an earlier response's instructions are not carried over, as OpenAI does)."""
        messages = [{"role": "system", "content": self.instructions}] if self.instructions else []
        messages += input_messages(self._context)
        if isinstance(self.input, str):
            return [*messages, {"role": "user", "content": self.input}]
        return [*messages, *input_messages(self.input)]

    def extra_fields(self) -> dict[str, Any]:
        """Fields passed on to backends, in chat's names: the unknown ones, ``user``,
        ``response_format`` from ``text.format``, ``reasoning_effort`` from ``reasoning``, and
        function tools with their ``tool_choice`` and ``parallel_tool_calls``."""
        extra = super().extra_fields()
        found = _response_format(self.text) if self.text is not None else None
        if found is not None:
            extra["response_format"] = found
        effort = (self.reasoning or {}).get("effort")
        if effort is not None:
            extra["reasoning_effort"] = effort
        if self.wants_logprobs():  # chat's logprobs, which output_text.logprobs holds as they are
            extra["logprobs"] = True
            extra["top_logprobs"] = self.top_logprobs or 0
        if self.tools:
            extra["tools"] = chat_tools(self.tools)
            if self.tool_choice is not None:
                extra["tool_choice"] = chat_tool_choice(self.tool_choice)
            if self.parallel_tool_calls is not None:
                extra["parallel_tool_calls"] = self.parallel_tool_calls
        return extra

    def to_generates(self, request_id: str) -> list[GenerateRequest]:
        return chat_generates(self, self.message_dicts(), request_id)


class InputTokensRequest(ResponsesRequest):
    """``POST /v1/responses/input_tokens``' body: a Responses request to count, not run. Its
    ``input`` may be left out when a ``conversation`` or ``previous_response_id`` gives the turns."""

    input: str | list[Any] = Field(default_factory=list)

    def _input_required(self) -> bool:
        return self.conversation is None and self.previous_response_id is None
