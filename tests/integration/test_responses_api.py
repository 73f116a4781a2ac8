"""The official ``openai`` client's Responses API (``client.responses``) against the gateway.

``/v1/responses`` takes the chat path (``serving.responses_protocol``), so it is checked on the
embedded default and through an OpenAI-compatible upstream (a second Turnout, as in
``test_turnout_as_upstream.py``), with the SDK's own stream helper, which rebuilds the answer
from the events and fails on any it does not expect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from backends.fault import FaultServer
from serving.launcher import gateway_process


@pytest.fixture(scope="module")
def client(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="anything", max_retries=0)


@pytest.fixture(scope="module")
def relayed(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """A client of a gateway whose route ``relay`` is the session's gateway, over HTTP."""
    config = tmp_path_factory.mktemp("relay") / "gateway.yaml"
    config.write_text(
        "variants:\n"
        f"  upstream: {{kind: openai_http, base_url: '{gateway_url}/v1', model: turnout-tiny}}\n"
        "routes:\n"
        "  relay: {targets: [{variant: upstream}]}\n"
        "auth: {anonymous_clients: true}\n"
    )
    with gateway_process(Path(config)) as gateway:
        yield openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)


def test_a_response(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(
        model="turnout-tiny", input="12+34=", max_output_tokens=8, temperature=0, metadata={"team": "qa"}
    )
    assert raw.headers["x-turnout-variant"] == "turnout-tiny"
    reply = raw.parse()
    assert reply.object == "response" and reply.id.startswith("resp_") and reply.model == "turnout-tiny"
    assert reply.status == "completed" and reply.output_text == "640"
    [message] = reply.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert reply.usage is not None and reply.usage.output_tokens == 4  # 6 4 0 </s>, as on chat
    assert reply.usage.total_tokens == reply.usage.input_tokens + 4
    assert reply.metadata == {"team": "qa"} and reply.store is True and reply.max_output_tokens == 8


def test_instructions_and_turns_reach_the_model_as_chat_messages(client: openai.OpenAI) -> None:
    turns = [
        {"role": "user", "content": [{"type": "input_text", "text": "12+34="}]},
        {"role": "assistant", "content": "640"},
        {"role": "user", "content": "21+43="},
    ]
    reply = client.responses.create(
        model="turnout-tiny", instructions="Add.", input=turns, max_output_tokens=8
    )
    chat = client.chat.completions.create(
        model="turnout-tiny",
        messages=[
            {"role": "system", "content": "Add."},
            {"role": "user", "content": [{"type": "text", "text": "12+34="}]},
            {"role": "assistant", "content": "640"},
            {"role": "user", "content": "21+43="},
        ],
        max_tokens=8,
    )
    assert reply.output_text == chat.choices[0].message.content
    assert reply.usage is not None and chat.usage is not None
    assert reply.usage.input_tokens == chat.usage.prompt_tokens


def test_max_output_tokens_makes_it_incomplete(client: openai.OpenAI) -> None:
    reply = client.responses.create(model="turnout-tiny", input="12+34=", max_output_tokens=2)
    assert reply.status == "incomplete" and reply.output_text == "64"
    assert reply.incomplete_details is not None and reply.incomplete_details.reason == "max_output_tokens"


def test_a_streamed_response(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(model="turnout-tiny", input="12+34=", max_output_tokens=8, stream=True)
    )
    kinds = [event.type for event in events]
    opening = ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[:4] == [*opening, "response.content_part.added"]
    closing = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert kinds[-4:] == [*closing, "response.completed"]
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas == ["6", "4", "0"]  # one token per event
    assert [event.sequence_number for event in events] == list(range(len(events)))
    completed = events[-1]
    assert completed.type == "response.completed" and completed.response.output_text == "640"
    assert completed.response.usage is not None and completed.response.usage.output_tokens == 4


def test_the_sdks_stream_helper_rebuilds_the_answer(client: openai.OpenAI) -> None:
    with client.responses.stream(model="turnout-tiny", input="12+34=", max_output_tokens=8) as stream:
        texts = [event.snapshot for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert texts == ["6", "64", "640"] and final.output_text == "640" and final.status == "completed"


def test_what_this_gateway_cannot_do_is_a_400_naming_it(client: openai.OpenAI, gateway_url: str) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="turnout-tiny", input="hi", previous_response_id="resp_1")
    assert (
        unknown.value.param == "previous_response_id" and unknown.value.code == "previous_response_not_found"
    )
    with pytest.raises(openai.BadRequestError) as refused:  # the embedded engine's refusal, in our names
        client.responses.create(model="turnout-tiny", input="hi", text={"format": {"type": "json_object"}})
    assert refused.value.param == "text.format" and "'text.format' is not supported" in refused.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve("resp_abc")
    assert "No response with id 'resp_abc' found" in missing.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")
    assert httpx.get(f"{gateway_url}/health").status_code == 200  # and it keeps serving
    reply = httpx.post(
        f"{gateway_url}/v1/responses", content=b"{", headers={"content-type": "application/json"}
    )
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_json"


def test_responses_are_counted_under_their_own_endpoint(client: openai.OpenAI, gateway_url: str) -> None:
    def counted() -> float:
        page = httpx.get(f"{gateway_url}/metrics").text
        prefix = 'turnout_requests_total{endpoint="responses",route="turnout-tiny",status="200"'
        return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(prefix))

    before = counted()
    client.responses.create(model="turnout-tiny", input="12+34=", max_output_tokens=8)
    assert counted() == before + 1


def test_logprobs_are_chats_in_output_text_streamed_or_not(
    client: openai.OpenAI, relayed: openai.OpenAI
) -> None:
    """``include: ["message.output_text.logprobs"]`` and ``top_logprobs`` give each output token's
    logprob and alternatives, the same as chat's for the same greedy request, on the embedded
    engine and through an OpenAI-compatible upstream, and a stream's deltas carry them piece by
    piece."""
    chat = client.chat.completions.create(
        model="turnout-tiny", messages=[{"role": "user", "content": "12+34="}], max_tokens=8,
        temperature=0, logprobs=True, top_logprobs=2,
    )  # fmt: skip
    assert chat.choices[0].logprobs is not None and chat.choices[0].logprobs.content is not None
    expected = [entry.model_dump() for entry in chat.choices[0].logprobs.content]
    ask = {"input": "12+34=", "max_output_tokens": 8, "temperature": 0, "top_logprobs": 2}
    for who, model in ((client, "turnout-tiny"), (relayed, "relay")):
        reply = who.responses.create(model=model, include=["message.output_text.logprobs"], **ask)  # type: ignore[arg-type]
        part = reply.output[0].content[0]  # type: ignore[union-attr]
        assert reply.top_logprobs == 2 and part.logprobs is not None
        got = [entry.model_dump() for entry in part.logprobs]
        assert [e["token"] for e in got] == [e["token"] for e in expected]  # "6", "4", "0", "</s>"
        for mine, theirs in zip(got, expected, strict=True):
            assert mine["logprob"] == pytest.approx(theirs["logprob"], abs=1e-4)
            assert len(mine["top_logprobs"]) == 2 and mine["top_logprobs"][0]["token"] == mine["token"]
    with client.responses.stream(model="turnout-tiny", **ask) as stream:  # top_logprobs alone asks too
        pieces = [event.logprobs for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    streamed = [entry.model_dump()["token"] for piece in pieces for entry in piece]
    done = final.output[0].content[0].logprobs  # type: ignore[union-attr]
    assert streamed == [entry.token for entry in done or []] == [entry["token"] for entry in expected]
    plain = client.responses.create(model="turnout-tiny", input="12+34=", max_output_tokens=8)
    assert plain.output[0].content[0].logprobs == [] and plain.top_logprobs == 0  # type: ignore[union-attr]


def test_an_input_image_reaches_a_vision_upstream_as_chats_image_url(
    client: openai.OpenAI, tmp_path: Path
) -> None:
    """An ``input_image`` goes to an OpenAI-compatible variant as chat's ``image_url`` part (the
    fault server echoes the request it got); a text-only engine refuses it by the client's name."""
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}
    content = [{"type": "input_text", "text": "what is it?"}, image]
    with FaultServer(default="echo") as upstream:
        config = tmp_path / "gateway.yaml"
        config.write_text(
            "variants:\n"
            f"  vision: {{kind: openai_http, base_url: '{upstream.base_url}', model: vlm}}\n"
            "routes:\n  vision: {targets: [{variant: vision}]}\n"
            "auth: {anonymous_clients: true}\n"
        )
        with gateway_process(config) as gateway:
            seen = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0).responses.create(
                model="vision", input=[{"role": "user", "content": content}], store=False
            )
    sent = json.loads(seen.output_text)["body"]["messages"]
    assert sent == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": image["image_url"], "detail": "low"}},
            ],
        }
    ]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="turnout-tiny", input=[{"role": "user", "content": content}])
    assert "'input_image' is not supported by this model" in refused.value.message


def test_input_tokens_are_counted_as_the_response_would_count_them(
    client: openai.OpenAI, tmp_path: Path
) -> None:
    """``client.responses.input_tokens.count`` on the embedded engine: the same figure as the
    response's ``usage.input_tokens``, with instructions, a previous response's turns or a
    conversation's; an upstream without vLLM's ``/tokenize`` cannot count (a 400 saying so)."""
    ask = {"model": "turnout-tiny", "input": "12+34=", "instructions": "Add."}
    counted = client.responses.input_tokens.count(**ask)  # type: ignore[arg-type]
    answered = client.responses.create(max_output_tokens=8, **ask)  # type: ignore[arg-type]
    assert counted.object == "response.input_tokens"
    assert answered.usage is not None and counted.input_tokens == answered.usage.input_tokens
    more = {"model": "turnout-tiny", "input": "05+05=", "previous_response_id": answered.id}
    follow = client.responses.create(max_output_tokens=8, **more)  # type: ignore[arg-type]
    assert follow.usage is not None
    assert client.responses.input_tokens.count(**more).input_tokens == follow.usage.input_tokens  # type: ignore[arg-type]
    talk = client.conversations.create(items=[{"role": "user", "content": "12+34="}])
    alone = client.responses.input_tokens.count(model="turnout-tiny", conversation=talk.id)
    assert (
        alone.input_tokens
        == client.responses.input_tokens.count(model="turnout-tiny", input="12+34=").input_tokens
    )
    with FaultServer() as upstream:
        config = tmp_path / "gateway.yaml"
        config.write_text(
            "variants:\n"
            f"  plain: {{kind: openai_http, base_url: '{upstream.base_url}', model: m}}\n"
            "routes:\n  plain: {targets: [{variant: plain}]}\n"
            "auth: {anonymous_clients: true}\n"
        )
        with gateway_process(config) as gateway:
            other = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.BadRequestError) as refused:
                other.responses.input_tokens.count(model="plain", input="hi")
    assert refused.value.code == "model_not_supported" and "no /tokenize" in refused.value.message


def test_a_response_through_an_openai_compatible_upstream(relayed: openai.OpenAI) -> None:
    reply = relayed.responses.create(model="relay", input="12+34=", max_output_tokens=8)
    assert reply.output_text == "640" and reply.model == "relay"
    with relayed.responses.stream(model="relay", input="12+34=", max_output_tokens=8) as stream:
        final = stream.get_final_response()
    assert final.output_text == "640" and final.usage is not None and final.usage.output_tokens == 4
