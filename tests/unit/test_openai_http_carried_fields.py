"""An upstream's event with only its own fields (no text) is no chunk of its own: its fields ride
on the next one. Passed on alone, it was the stream's first token: the TTFT was taken at it, and
an upstream failing before any text could no longer fall back (Azure OpenAI's first event holds
only ``prompt_filter_results``; vLLM's role event ``prompt_token_ids``). The SSE parser is driven
with bytes as an upstream sends them; no connection is made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from backends.base import Chunk
from backends.openai_http import OpenAIHttpBackend
from backends.settings import OpenAIHttpSettings


def sse(*events: dict[str, object]) -> list[bytes]:
    return [b"data: " + orjson.dumps(event) + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]


async def chunks_of(events: list[bytes]) -> list[Chunk]:
    backend = OpenAIHttpBackend("up", OpenAIHttpSettings(base_url="http://127.0.0.1:9/v1", model="m"))

    async def body() -> AsyncIterator[bytes]:
        for event in events:
            yield event

    return [chunk async for chunk in backend._events(body(), chat=True)]


async def test_fields_alone_ride_on_the_next_chunk() -> None:
    found = await chunks_of(sse(
        {"choices": [], "prompt_filter_results": [{"prompt_index": 0}]},
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
         "prompt_token_ids": [1, 5]},
        {"choices": [{"index": 0, "delta": {"content": ""}, "token_ids": [7]}]},  # half a character
        {"choices": [{"index": 0, "delta": {"content": "é"}, "token_ids": [8]}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "token_ids": [2]}]},
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
         "system_fingerprint": "fp"},
    ))  # fmt: skip
    assert [c.text for c in found] == ["é", ""]  # the first chunk is the first text
    first, last = found
    assert first.response_extra == {
        "prompt_filter_results": [{"prompt_index": 0}],
        "prompt_token_ids": [1, 5],
    }
    assert first.choice_extra == {"token_ids": [7, 8]}
    assert (last.finish_reason, last.choice_extra, last.response_extra) == (
        "stop",
        {"token_ids": [2]},
        {"system_fingerprint": "fp"},
    )


async def test_fields_before_a_finish_without_text_go_on_the_finish() -> None:
    found = await chunks_of(sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant"}}], "prompt_token_ids": [1]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
    ))  # fmt: skip
    assert len(found) == 1 and found[0].response_extra == {"prompt_token_ids": [1]}
