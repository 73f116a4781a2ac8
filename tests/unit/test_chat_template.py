"""Messages as clients send them → the prompt the shipped model's template renders.

``ChatTemplate.render`` gets the messages whole (OpenAI-compatible upstreams need tool calls,
ids and content parts as sent), so it joins text parts (by newlines, as vLLM does) and refuses
any other part itself.
"""

from __future__ import annotations

import pytest

from backends.chat_template import ChatTemplate, text_messages
from deploy.model.artifacts import hf_dir
from serving.errors import ClientError
from serving.protocol import ChatCompletionRequest


def test_text_parts_are_joined_by_newlines_as_vllm_joins_them_and_no_content_is_empty() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "12+"}, {"type": "text", "text": "34="}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "46"},
    ]
    flat = text_messages(messages)
    assert [m["content"] for m in flat] == ["12+\n34=", "", "46"]
    assert (
        flat[1]["tool_calls"] == [{"id": "c1"}] and flat[2]["tool_call_id"] == "c1"
    )  # kept for the template


def test_the_shipped_template_renders_parts_like_a_string() -> None:
    template = ChatTemplate.from_folder(hf_dir())
    assert template is not None
    parts = [{"role": "user", "content": [{"type": "text", "text": "12+"}, {"type": "text", "text": "34="}]}]
    assert template.render(parts) == template.render([{"role": "user", "content": "12+\n34="}])


def test_a_developer_message_is_a_system_message_to_a_template_that_knows_only_system() -> None:
    template = ChatTemplate.from_folder(hf_dir())
    assert template is not None
    developer = template.render(
        [{"role": "developer", "content": "add"}, {"role": "user", "content": "1+2="}]
    )
    assert developer == template.render(
        [{"role": "system", "content": "add"}, {"role": "user", "content": "1+2="}]
    )
    assert "<|developer|>" not in developer
    knows = ChatTemplate("{% for m in messages %}[{{ m['role'] }}]{% endfor %}{# developer #}")
    assert knows.render([{"role": "developer", "content": "x"}], add_generation_prompt=False) == "[developer]"


def test_a_non_text_part_is_a_400_naming_it() -> None:
    messages = [
        {"role": "system", "content": "add"},
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {}}]},
    ]
    with pytest.raises(ClientError) as error:
        text_messages(messages)
    assert (error.value.status, error.value.param) == (400, "messages.1.content.1.type")


def test_messages_reach_adapters_as_sent() -> None:
    wire = ChatCompletionRequest.model_validate_json(
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"},'
        b'{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",'
        b'"function": {"name": "f", "arguments": "{}"}}]},'
        b'{"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]}]}'
    )
    assert wire.message_dicts() == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
    ]
