"""Tool calls through Turnout to a real vLLM: the answer's calls come back whole, streamed and
not, and a conversation's earlier calls and tool results reach vLLM whole.

The session's vLLM runs with a tool-call parser, so a named ``tool_choice`` makes it emit a
call to that function (guided decoding: the tiny model only picks the argument text). The same
greedy request straight to vLLM and through a Turnout gateway must give the same calls; before
Turnout passed the message's fields beyond ``content`` on, the calls were dropped and the client
saw an empty answer with ``finish_reason`` ``tool_calls`` or ``length``. The other way, the
messages went upstream as role and content only, without the assistant's ``tool_calls`` and the
tool message's ``tool_call_id``; a request-level chat template that prints them shows, in
vLLM's prompt token count, whether they arrived.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from deploy.vllm_runtime import VllmServer
from serving.launcher import Launched
from tests.integration.control_plane import admin, eventually, running_gateway, write_config
from tests.integration.engines import VLLM_MODEL

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "12+34="}],
    "tools": TOOLS,
    "tool_choice": {"type": "function", "function": {"name": "add"}},
    "temperature": 0,
    "max_tokens": 16,
}


@pytest.fixture(scope="module")
def gateway(vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    variant = {"kind": "openai_http", "base_url": vllm.base_url, "model": VLLM_MODEL, "engine": "vllm"}
    config = write_config(
        tmp_path_factory.mktemp("tools") / "gateway.yaml",
        {"tiny-vllm": variant, "tiny-vllm-shadow": variant},
        {
            "tiny": {"targets": [{"variant": "tiny-vllm"}]},
            "tiny-shadowed": {
                "targets": [{"variant": "tiny-vllm"}],
                "shadows": [{"variant": "tiny-vllm-shadow", "sample_rate": 1.0}],
            },
        },
    )
    with running_gateway(config) as launched:
        yield launched


def _clients(vllm: VllmServer, gateway: Launched) -> tuple[openai.OpenAI, openai.OpenAI]:
    direct = openai.OpenAI(base_url=vllm.base_url, api_key="none", max_retries=0)
    return direct, openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)


def _calls(message: Any) -> list[tuple[str, str, str]]:
    return [(call.type, call.function.name, call.function.arguments) for call in message.tool_calls or []]


def test_a_tool_call_comes_through(vllm: VllmServer, gateway: Launched) -> None:
    direct, through = _clients(vllm, gateway)
    expected = direct.chat.completions.create(model=VLLM_MODEL, **REQUEST).choices[0]
    got = through.chat.completions.create(model="tiny", **REQUEST).choices[0]
    assert _calls(expected.message) and _calls(expected.message)[0][:2] == ("function", "add")
    assert _calls(got.message) == _calls(expected.message)
    assert got.message.tool_calls is not None and got.message.tool_calls[0].id  # the upstream's id
    assert got.finish_reason == expected.finish_reason


def _streamed_calls(client: openai.OpenAI, model: str) -> tuple[dict[int, list[str]], str | None]:
    """Per call index: [name, arguments] assembled from the deltas; and the finish reason."""
    calls: dict[int, list[str]] = {}
    finish = None
    for chunk in client.chat.completions.create(model=model, stream=True, **REQUEST):
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, ["", ""])
            if delta.function is not None:
                call[0] += delta.function.name or ""
                call[1] += delta.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return calls, finish


def test_a_streamed_tool_call_comes_through(vllm: VllmServer, gateway: Launched) -> None:
    direct, through = _clients(vllm, gateway)
    expected = _streamed_calls(direct, VLLM_MODEL)
    assert expected[0] and expected[0][0][0] == "add"
    assert _streamed_calls(through, "tiny") == expected


CONVERSATION: list[Any] = [
    {"role": "user", "content": "12+34="},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 12, "b": 34}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "46"},
]
# The shipped model's template, plus each call's name and id and each tool result's call id.
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] or '' }}"
    "{% for c in m.get('tool_calls') or [] %}{{ c['function']['name'] }}{{ c['id'] }}{% endfor %}"
    "{{ m.get('tool_call_id') or '' }}{% endfor %}<|assistant|>"
)


def _prompt_tokens(client: openai.OpenAI, model: str, messages: list[Any]) -> int:
    answer = client.chat.completions.create(
        model=model, messages=messages, max_tokens=1, temperature=0, extra_body={"chat_template": TEMPLATE}
    )
    assert answer.usage is not None
    return answer.usage.prompt_tokens


def test_earlier_tool_calls_and_results_reach_the_upstream(vllm: VllmServer, gateway: Launched) -> None:
    direct, through = _clients(vllm, gateway)
    whole = _prompt_tokens(direct, VLLM_MODEL, CONVERSATION)
    bare = [{"role": m["role"], "content": m["content"] or ""} for m in CONVERSATION]
    assert _prompt_tokens(direct, VLLM_MODEL, bare) < whole  # the template does print them
    assert _prompt_tokens(through, "tiny", CONVERSATION) == whole


# The same function as TOOLS, as the Responses API writes a tool (no "function" wrapper).
RESPONSES_TOOLS: list[Any] = [{"type": "function", **TOOLS[0]["function"]}]


def _response_calls(reply: Any) -> list[tuple[str, str]]:
    return [(item.name, item.arguments) for item in reply.output if item.type == "function_call"]


def test_a_tool_call_comes_through_the_responses_api(vllm: VllmServer, gateway: Launched) -> None:
    """``/v1/responses`` takes the chat path: its function tools go to vLLM as chat tools and
    the calls come back as ``function_call`` items, streamed (the SDK's helper rebuilds them
    from the argument deltas) and not."""
    direct, through = _clients(vllm, gateway)
    choice = direct.chat.completions.create(model=VLLM_MODEL, **REQUEST).choices[0]
    calls = [(call.function.name, call.function.arguments) for call in choice.message.tool_calls or []]
    # the tiny model may fill the arguments up to max_tokens: then it is incomplete, as chat's "length"
    status = "incomplete" if choice.finish_reason == "length" else "completed"
    assert calls and calls[0][0] == "add"
    asked: dict[str, Any] = {"model": "tiny", "input": "12+34=", "tools": RESPONSES_TOOLS, "temperature": 0}
    asked |= {"max_output_tokens": 16, "tool_choice": {"type": "function", "name": "add"}}
    reply = through.responses.create(**asked)
    assert reply.status == status and _response_calls(reply) == calls
    assert all(item.call_id for item in reply.output if item.type == "function_call")  # vLLM's ids
    with through.responses.stream(**asked) as stream:  # its snapshot checks every event's place
        last = [event for event in stream][-1]
    assert last.type == f"response.{status}"  # get_final_response() wants a response.completed
    assert _response_calls(last.response) == calls and last.response.status == status


def test_function_call_items_and_their_outputs_reach_the_upstream(
    vllm: VllmServer, gateway: Launched
) -> None:
    """A Responses conversation's ``function_call`` and ``function_call_output`` items arrive as
    the chat conversation's assistant ``tool_calls`` and ``tool`` message (the prompt vLLM counts
    is the chat one's, token for token)."""
    direct, through = _clients(vllm, gateway)
    whole = _prompt_tokens(direct, VLLM_MODEL, CONVERSATION)
    items = [
        {"role": "user", "content": "12+34="},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 12, "b": 34}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "46"},
    ]
    reply = through.responses.create(
        model="tiny", input=items, max_output_tokens=1, temperature=0, extra_body={"chat_template": TEMPLATE}
    )  # type: ignore[arg-type]
    assert reply.usage is not None and reply.usage.input_tokens == whole


def test_shadows_compare_tool_calls(gateway: Launched) -> None:
    """Sampled (temperature 1.5, no seed), the primary's and the shadow's calls differ in their
    arguments; with no content in either answer, comparing content alone called them a match."""
    through = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)
    sampled = {**REQUEST, "temperature": 1.5}
    for stream in (False, True, False, True):
        answer = through.chat.completions.create(model="tiny-shadowed", stream=stream, **sampled)
        if stream:
            for _ in answer:  # type: ignore[union-attr]
                pass

    def summary() -> dict[str, Any]:
        reply = httpx.get(f"{gateway.url}/admin/routes/tiny-shadowed/shadow", headers=admin(), timeout=10)
        return dict(reply.json())

    eventually(lambda: summary()["shadows"]["tiny-vllm-shadow"]["compared"] == 4, timeout=60)
    found = summary()
    assert found["shadows"]["tiny-vllm-shadow"]["exact_matches"] < 4
    differing = found["recent_differences"][0]
    assert differing["primary"]["text"].startswith("\nadd(")
    assert differing["shadow_answer"]["text"].startswith("\nadd(")
