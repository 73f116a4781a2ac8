"""The Conversations API through the official ``openai`` client: ``client.conversations`` and
its ``items``, and ``/v1/responses`` with ``conversation``, each key's own.

A gateway on the embedded engine that serves only known keys, two client keys made over the
admin API. That a response in a conversation really reads its items is checked by what the model
was given: it counts the same input tokens, and gets the same greedy answer, as the same turns
sent whole in ``input``. Bad requests get the OpenAI error body and the gateway keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from serving.launcher import Launched
from tests.integration.keyed_clients import keyed_tiny_gateway

ASK: dict[str, Any] = {"model": "turnout-tiny", "max_output_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Launched, dict[str, openai.OpenAI]]]:
    with keyed_tiny_gateway(tmp_path_factory.mktemp("talks"), ("alice", "bob")) as running:
        yield running


def _texts(client: openai.OpenAI, conversation_id: str) -> list[tuple[str, str]]:
    listed = client.conversations.items.list(conversation_id, order="asc", limit=100)
    return [(item.role, item.content[0].text) for item in listed.data]  # type: ignore[union-attr]


def test_responses_in_a_conversation_read_its_items_and_add_their_own(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
) -> None:
    alice = keys[1]["alice"]
    talk = alice.conversations.create(
        items=[{"role": "user", "content": "12+34="}], metadata={"topic": "sums"}
    )
    assert talk.id.startswith("conv_") and talk.metadata == {"topic": "sums"}
    assert alice.conversations.retrieve(talk.id) == talk
    first = alice.responses.create(input="05+05=", conversation=talk.id, **ASK)
    assert first.conversation is not None and first.conversation.id == talk.id
    assert _texts(alice, talk.id) == [
        ("user", "12+34="),
        ("user", "05+05="),
        ("assistant", first.output_text),
    ]
    whole = [{"role": "user", "content": "12+34="}, {"role": "user", "content": "05+05="}]
    sent_again = alice.responses.create(input=whole, store=False, **ASK)
    assert first.usage is not None and sent_again.usage is not None
    assert first.usage.input_tokens == sent_again.usage.input_tokens
    assert first.output_text == sent_again.output_text
    with alice.responses.stream(input="01+02=", conversation={"id": talk.id}, store=False, **ASK) as stream:
        streamed = stream.get_final_response()  # added before its last event, kept or not
    assert streamed.conversation is not None and streamed.store is False
    whole += [{"role": "assistant", "content": first.output_text}, {"role": "user", "content": "01+02="}]
    again = alice.responses.create(input=whole, store=False, **ASK)
    assert streamed.usage is not None and again.usage is not None
    assert streamed.usage.input_tokens == again.usage.input_tokens
    assert _texts(alice, talk.id)[-2:] == [("user", "01+02="), ("assistant", streamed.output_text)]
    assert alice.responses.retrieve(first.id).conversation == first.conversation  # stored with it


def test_items_are_paged_read_added_and_deleted(keys: tuple[Launched, dict[str, openai.OpenAI]]) -> None:
    alice = keys[1]["alice"]
    talk = alice.conversations.create()
    added = alice.conversations.items.create(
        talk.id, items=[{"role": "user", "content": f"0{n}+01="} for n in range(5)]
    )
    assert len(added.data) == 5 and added.first_id == added.data[0].id and not added.has_more
    newest = alice.conversations.items.list(talk.id, limit=2)  # newest first, as OpenAI lists
    assert [item.id for item in newest.data] == [added.data[4].id, added.data[3].id] and newest.has_more
    rest = alice.conversations.items.list(talk.id, limit=10, after=newest.last_id)
    assert [item.id for item in rest.data] == [item.id for item in reversed(added.data[:3])]
    assert [item.id for item in alice.conversations.items.list(talk.id)] == [
        i.id for i in reversed(added.data)
    ]
    one = alice.conversations.items.retrieve(added.data[1].id, conversation_id=talk.id)
    assert one.id == added.data[1].id and one.status == "completed"  # type: ignore[union-attr]
    assert alice.conversations.items.delete(added.data[1].id, conversation_id=talk.id).id == talk.id
    with pytest.raises(openai.NotFoundError) as gone:
        alice.conversations.items.retrieve(added.data[1].id, conversation_id=talk.id)
    assert gone.value.code == "item_not_found"
    assert alice.conversations.update(talk.id, metadata={"a": "b"}).metadata == {"a": "b"}
    assert alice.conversations.delete(talk.id).deleted is True
    for call in (
        lambda: alice.conversations.retrieve(talk.id),
        lambda: alice.conversations.items.list(talk.id),
        lambda: alice.responses.create(input="hi", conversation=talk.id, **ASK),
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        assert missing.value.code == "conversation_not_found"


def test_a_conversation_is_its_keys_own(keys: tuple[Launched, dict[str, openai.OpenAI]]) -> None:
    alice, bob = keys[1]["alice"], keys[1]["bob"]
    talk = alice.conversations.create(items=[{"role": "user", "content": "12+34="}])
    for call in (
        lambda: bob.conversations.retrieve(talk.id),
        lambda: bob.conversations.update(talk.id, metadata={}),
        lambda: bob.conversations.items.list(talk.id),
        lambda: bob.conversations.items.create(talk.id, items=[{"role": "user", "content": "x"}]),
        lambda: bob.conversations.delete(talk.id),
        lambda: bob.responses.create(input="hi", conversation=talk.id, **ASK),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert _texts(alice, talk.id) == [("user", "12+34=")]  # nothing of bob's got in


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param"),
    [
        ("POST", "", {"items": [{"role": "user", "content": "x"}] * 21}, 400, "items"),
        ("POST", "", {"metadata": {str(n): "v" for n in range(17)}}, 400, "metadata"),
        ("POST", "", {"metadata": {"k": "v" * 513}}, 400, "metadata.k"),
        ("POST", "", {"items": [{"type": "file_search_call"}]}, 400, "items.0.type"),
        ("POST", "", {"messages": []}, 400, "messages"),
        ("POST", "", b"{not json", 400, None),
        ("POST", "/{id}", {}, 400, "metadata"),
        ("POST", "/{id}/items", {"items": [{"role": "user"}]}, 400, "items.0.content"),
        ("GET", "/{id}/items?limit=0", None, 400, "limit"),
        ("GET", "/{id}/items?order=up", None, 400, "order"),
        ("GET", "/{id}/items?include=message.output_text.logprobs", None, 400, "include"),
        ("GET", "/{id}/turns", None, 404, None),
        ("DELETE", "/{id}/items", None, 404, None),
        ("GET", "/conv_nope", None, 404, "conversation_id"),
    ],
)
def test_bad_requests_get_the_openai_error_shape(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
    method: str,
    path: str,
    body: Any,
    status: int,
    param: str | None,
) -> None:
    gateway, clients = keys
    alice = clients["alice"]
    talk = alice.conversations.create()
    headers = {"authorization": f"Bearer {alice.api_key}"}
    url = f"{gateway.url}/v1/conversations{path.format(id=talk.id)}"
    sent = {"content": body} if isinstance(body, bytes) else {"json": body} if body is not None else {}
    answer = httpx.request(method, url, headers=headers, timeout=10, **sent)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param
    assert alice.conversations.retrieve(talk.id).id == talk.id  # and it keeps serving
