"""Stored Responses API answers through the official ``openai`` client: ``previous_response_id``,
``client.responses.retrieve`` / ``input_items.list`` / ``delete``, each key's own.

A gateway on the embedded engine that serves only known keys, two client keys made over the
admin API. That a follow-up really reads the earlier turns is checked by what the model was
given: a follow-up and the same conversation sent whole in ``input`` count the same input
tokens and get the same greedy answer. A gateway whose config turns storing off answers as
before: ``store: false``, and ``previous_response_id`` a 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from serving.launcher import Launched
from tests.integration.control_plane import running_gateway, write_config
from tests.integration.keyed_clients import ROUTE, TINY, keyed_tiny_gateway

ASK: dict[str, Any] = {"model": "turnout-tiny", "max_output_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Launched, dict[str, openai.OpenAI]]]:
    with keyed_tiny_gateway(tmp_path_factory.mktemp("stored"), ("alice", "bob")) as running:
        yield running


def test_a_follow_up_reads_the_stored_turns_as_if_they_were_sent_again(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
) -> None:
    alice = keys[1]["alice"]
    first = alice.responses.create(input="12+34=", instructions="Add.", **ASK)
    assert first.store is True and first.output_text == "640"
    assert alice.responses.retrieve(first.id).model_dump() == first.model_dump()
    follow = alice.responses.create(input="05+05=", previous_response_id=first.id, **ASK)
    assert follow.previous_response_id == first.id and follow.store is True
    whole = [
        {"role": "user", "content": "12+34="},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "05+05="},
    ]  # instructions are not carried over, as OpenAI does
    sent_again = alice.responses.create(input=whole, store=False, **ASK)
    assert follow.usage is not None and sent_again.usage is not None
    assert follow.usage.input_tokens == sent_again.usage.input_tokens > first.usage.input_tokens
    assert follow.output_text == sent_again.output_text
    third = alice.responses.create(input="01+02=", previous_response_id=follow.id, **ASK)  # a chain
    whole += [{"role": "assistant", "content": follow.output_text}, {"role": "user", "content": "01+02="}]
    again = alice.responses.create(input=whole, store=False, **ASK)
    assert third.usage.input_tokens == again.usage.input_tokens
    items = alice.responses.input_items.list(follow.id, order="asc")
    assert [item.type for item in items.data] == ["message"]
    assert items.data[0].content[0].text == "05+05="
    with pytest.raises(openai.NotFoundError):  # store: false kept nothing
        alice.responses.retrieve(sent_again.id)


def test_a_streamed_answer_is_stored_before_its_last_event(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
) -> None:
    alice = keys[1]["alice"]
    with alice.responses.stream(input="12+34=", **ASK) as stream:
        final = stream.get_final_response()
    assert final.store is True and final.output_text == "640"
    kept = alice.responses.retrieve(final.id)
    assert kept.status == "completed" and kept.output_text == "640" and kept.usage == final.usage
    follow = alice.responses.create(input="05+05=", previous_response_id=final.id, **ASK)
    assert follow.usage is not None and final.usage is not None
    assert follow.usage.input_tokens > final.usage.input_tokens


def test_an_answer_is_its_keys_own_and_is_gone_once_deleted(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
) -> None:
    gateway, clients = keys
    alice, bob = clients["alice"], clients["bob"]
    mine = alice.responses.create(input="12+34=", **ASK)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError) as refused:
        bob.responses.create(input="hi", previous_response_id=mine.id, **ASK)
    assert refused.value.code == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(mine.id)
    follow = alice.responses.create(input="05+05=", previous_response_id=mine.id, **ASK)
    cancel = httpx.post(
        f"{gateway.url}/v1/responses/{mine.id}/cancel", headers={"authorization": f"Bearer {alice.api_key}"}
    )
    assert cancel.status_code == 400 and cancel.json()["error"]["code"] == "not_cancellable"
    alice.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(mine.id)
    assert alice.responses.retrieve(follow.id).id == follow.id  # its context was kept with it
    assert alice.responses.create(input="01+02=", previous_response_id=follow.id, **ASK).output_text


def test_a_gateway_that_stores_nothing_says_so(tmp_path_factory: pytest.TempPathFactory) -> None:
    config = write_config(
        tmp_path_factory.mktemp("unstored") / "gateway.yaml", TINY, ROUTE, responses={"store": False}
    )
    with running_gateway(config) as gateway:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="anything", max_retries=0)
        answer = client.responses.create(input="12+34=", **ASK)
        assert answer.store is False and answer.output_text == "640"
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(input="hi", previous_response_id=answer.id, **ASK)
        assert (
            refused.value.param == "previous_response_id" and "stores no responses" in refused.value.message
        )
        with pytest.raises(openai.NotFoundError) as missing:
            client.responses.retrieve(answer.id)
        assert "stores no responses" in missing.value.message
        for call in (
            lambda: client.conversations.create(),
            lambda: client.conversations.items.list("conv_1"),
            lambda: client.responses.create(input="hi", conversation="conv_1", **ASK),
        ):
            with pytest.raises(openai.BadRequestError) as no_talks:
                call()
            assert "keeps no conversations (responses.store is false" in no_talks.value.message
        with pytest.raises(openai.BadRequestError) as no_background:
            client.responses.create(input="hi", background=True, **ASK)
        assert (
            no_background.value.param == "background"
            and "could not be read back" in no_background.value.message
        )
