"""The Responses API's answer (a ``response`` object) and the output items it is made of (pure).

Where it sits: after the gateway has run a ``/v1/responses`` request down the chat path
(``serving.responses_protocol``), the edge (``serving.api.openai_routes``) shapes the chat
result here, and ``serving.responses_stream`` builds a stream's events from the same items.
The output is the reasoning a parser split off upstream (a ``reasoning`` item with its
``reasoning_text``), the assistant ``message`` with one ``output_text`` part (left out when
the answer is only tool calls), and a ``function_call`` item per tool call. A generation cut by
``max_output_tokens`` is ``incomplete`` (reason ``max_output_tokens``), as OpenAI sends it.
"""

from __future__ import annotations

from typing import Any

from backends.base import Completion, Usage
from serving.conversations import conversation_id_of
from serving.responses_protocol import ResponsesRequest

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_usage(usage: Usage) -> dict[str, Any]:
    """Chat usage in the Responses API's names (cached and reasoning tokens: the upstream's)."""
    details = usage.details or {}
    cached = (details.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (details.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": usage.total_tokens,
    }


def status_of(finish_reason: str | None) -> tuple[str, dict[str, str] | None]:
    reason = _INCOMPLETE.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ``output_text`` part; ``logprobs``: each of its tokens' (chat's ``logprobs.content``)."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def token_logprobs(logprobs: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Chat's ``logprobs`` (an answer's or a chunk's) → the tokens' entries ``output_text`` holds."""
    found = (logprobs or {}).get("content")
    return list(found) if isinstance(found, list) else []


def message_item(item_id: str, status: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": parts}


def response_object(
    rid: str,
    model: str,
    created: int,
    wire: ResponsesRequest,
    *,
    status: str = "in_progress",
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    incomplete: dict[str, str] | None = None,
    error: dict[str, Any] | None = None,
    stored: bool = False,
) -> dict[str, Any]:
    """The ``response`` object, the request's settings echoed as OpenAI echoes them; ``stored``:
    whether it is kept (``GET /v1/responses/{id}``, ``previous_response_id``)."""
    text = wire.text if wire.text and wire.text.get("format") else {"format": {"type": "text"}}
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": created,
        "status": status,
        "background": wire.background is True,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": wire.instructions,
        "max_output_tokens": wire.max_output_tokens,
        "max_tool_calls": wire.max_tool_calls,
        "model": model,
        "output": output or [],
        "parallel_tool_calls": True if wire.parallel_tool_calls is None else wire.parallel_tool_calls,
        "previous_response_id": wire.previous_response_id,
        "conversation": {"id": talk} if (talk := conversation_id_of(wire.conversation)) else None,
        "reasoning": {"effort": (wire.reasoning or {}).get("effort"), "summary": None},
        "service_tier": wire.service_tier or "default",
        "store": stored,
        "temperature": 1.0 if wire.temperature is None else wire.temperature,
        "text": text,
        "tool_choice": wire.tool_choice or "auto",
        "tools": [],
        "top_logprobs": wire.top_logprobs or 0,
        "top_p": 1.0 if wire.top_p is None else wire.top_p,
        "truncation": wire.truncation or "disabled",
        "usage": usage,
        "user": wire.user,
        "metadata": wire.metadata or {},
    }


def reasoning_of(fields: dict[str, Any] | None) -> str | None:
    """A reasoning parser's text in an upstream's message or delta (vLLM: ``reasoning_content``,
    ``reasoning`` in later versions)."""
    if not fields:
        return None
    found = fields.get("reasoning_content") or fields.get("reasoning")
    return found if isinstance(found, str) and found else None


def reasoning_item(item_id: str, status: str, text: str | None) -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if text is not None else []
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def call_item(item_id: str, status: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def response_body(
    rid: str, model: str, created: int, wire: ResponsesRequest, result: Completion, *, stored: bool = False
) -> dict[str, Any]:
    """The whole answer of a request that was not streamed: the reasoning (when the upstream
    parsed one out), the message (unless the answer is only tool calls), then each tool call."""
    status, incomplete = status_of(result.finish_reason)
    fields = result.message_extra or {}
    output = []
    reasoning = reasoning_of(fields)
    if reasoning is not None:
        output.append(reasoning_item(f"rs_{rid}", "completed", reasoning))
    calls = fields.get("tool_calls") or []
    if result.text or not calls:
        part = text_part(result.text, token_logprobs(result.logprobs))
        output.append(message_item(f"msg_{rid}", status, [part]))
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        call_id = str(call.get("id") or f"call_{rid}_{index}")
        name, arguments = str(function.get("name") or ""), str(function.get("arguments") or "")
        output.append(call_item(f"fc_{call_id}", "completed", call_id, name, arguments))
    counted = response_usage(result.usage)
    return response_object(
        rid, model, created, wire, status=status, output=output, usage=counted, incomplete=incomplete,
        stored=stored,
    )  # fmt: skip
