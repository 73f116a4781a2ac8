"""The whole (non-streamed) answers of ``/v1/chat/completions`` and ``/v1/completions`` as bytes.

The last step of a non-streamed generation request (``serving.api.openai_routes``): the
gateway's :class:`Completion` results become OpenAI's ``chat.completion`` or
``text_completion`` object, with the fields an OpenAI-compatible upstream set passed on and
what the gateway writes winning. Pure: values in, bytes out.
"""

from __future__ import annotations

from typing import Any

import orjson

from backends.base import Completion, Usage


def chat_body(
    rid: str,
    model: str,
    created: int,
    text: str,
    finish: str,
    usage: dict[str, Any],
    logprobs: dict[str, Any] | None = None,
    message_extra: dict[str, Any] | None = None,
    stop_reason: str | int | None = None,
    choice_extra: dict[str, Any] | None = None,
    response_extra: dict[str, Any] | None = None,
) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
    if stop_reason is not None:  # vLLM's: the stop sequence or stop token that ended it
        choice["stop_reason"] = stop_reason
    if choice_extra:  # an upstream's own (vLLM's token_ids…): what the gateway writes wins
        choice = {**choice_extra, **choice}
    if message_extra:
        message.update(message_extra)
        if not text and "tool_calls" in message_extra:  # as OpenAI and vLLM send a bare tool call
            message["content"] = None
    return orjson.dumps(
        {
            **(response_extra or {}),  # an upstream's own (system_fingerprint, prompt_logprobs…)
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage,
        }
    )


def completion_body(rid: str, model: str, created: int, results: list[Completion]) -> bytes:
    """One choice per prompt, in the prompts' order; usage summed over them."""
    usage = Usage()
    choices = []
    for index, result in enumerate(results):
        usage.add(result.usage)
        choice = {
            "index": index,
            "text": result.text,
            "logprobs": result.logprobs,
            "finish_reason": result.finish_reason,
        }
        if result.stop_reason is not None:
            choice["stop_reason"] = result.stop_reason
        if result.choice_extra:  # an upstream's own (vLLM's prompt_logprobs, token_ids…)
            choice = {**result.choice_extra, **choice}
        choices.append(choice)
    return orjson.dumps(
        {
            **(results[0].response_extra or {} if results else {}),  # an upstream's own (system_fingerprint…)
            "id": f"cmpl-{rid}",
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": usage.as_dict(),
        }
    )
