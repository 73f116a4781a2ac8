"""Conversations API without a server: the items a conversation takes, a response's
``conversation`` field, and the store's order, owner and expiry rules (SQLite in memory)."""

from __future__ import annotations

from typing import Any

import pytest

from serving.conversations import (
    MAX_ITEMS_PER_CALL,
    Conversation,
    conversation_id_of,
    conversation_items,
    deleted,
    with_status,
)
from serving.errors import ClientError
from serving.store import RouteStore


def test_items_get_fresh_ids_and_a_status_as_a_conversation_lists_them() -> None:
    replayed = {
        "id": "msg_from_an_answer",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "46", "annotations": []}],
    }
    sent: list[Any] = [{"role": "user", "content": "12+34="}, replayed, {"type": "reasoning", "summary": []}]
    items = conversation_items(sent)
    assert items[0]["content"] == [{"type": "input_text", "text": "12+34="}]
    assert items[0]["status"] == "completed" and items[0]["type"] == "message"
    assert items[1]["id"] != "msg_from_an_answer" and items[1]["content"] == replayed["content"]
    assert "status" not in items[2]  # only messages have one
    assert len({item["id"] for item in items}) == 3
    again = conversation_items(sent)
    assert not {item["id"] for item in items} & {item["id"] for item in again}  # unique per call
    assert with_status([{"type": "message", "status": "incomplete"}])[0]["status"] == "incomplete"


@pytest.mark.parametrize(
    ("sent", "param", "says"),
    [
        ([{"role": "user", "content": "x"}] * (MAX_ITEMS_PER_CALL + 1), "items", "at most 20 items"),
        (["hi"], "items.0", "an input item"),
        ([{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}], "items.1.role", "got 'bot'"),
        ([{"type": "web_search_call"}], "items.0.type", "only messages, function_call"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "items.0.call_id", "string"),
    ],
)
def test_what_a_response_could_not_read_back_is_refused_by_name(
    sent: list[Any], param: str, says: str
) -> None:
    with pytest.raises(ClientError) as refused:
        conversation_items(sent)
    assert refused.value.status == 400 and refused.value.param == param and says in refused.value.message


def test_a_responses_conversation_is_an_id_or_an_object_with_one() -> None:
    assert conversation_id_of(None) is None
    assert conversation_id_of("conv_1") == "conv_1" and conversation_id_of({"id": "conv_2"}) == "conv_2"
    for wrong in ({}, {"id": 3}, {"id": "conv_1", "extra": 1}):
        with pytest.raises(ClientError):
            conversation_id_of(wrong)


def test_the_objects_are_openais() -> None:
    made = Conversation("conv_1", "k", 12.7, {"topic": "sums"})
    assert made.as_dict() == {
        "id": "conv_1",
        "object": "conversation",
        "created_at": 12,
        "metadata": {"topic": "sums"},
    }
    assert deleted("conv_1") == {"id": "conv_1", "object": "conversation.deleted", "deleted": True}


def test_the_store_keeps_items_in_order_for_their_key_until_the_conversation_goes_quiet() -> None:
    now = [100.0]
    store = RouteStore("sqlite://", clock=lambda: now[0])
    talks = store.conversations
    try:
        first = conversation_items([{"role": "user", "content": "12+34="}])
        talks.create(Conversation("conv_a", "alice", 100.0, {}), first, expires_at=160.0)
        assert talks.items("conv_a", "bob") is None and talks.get("conv_a", "bob") is None
        assert talks.add("conv_a", "bob", first, 1e9) is None and not talks.drop("conv_a", "bob")
        assert talks.drop_item("conv_a", "bob", first[0]["id"], 1e9) == (None, False)
        more = conversation_items(
            [{"role": "assistant", "content": "46"}, {"role": "user", "content": "05+05="}]
        )
        now[0] = 150.0
        assert talks.add("conv_a", "alice", more, expires_at=210.0) is not None  # its expiry moves on
        assert [item["id"] for item in talks.items("conv_a", "alice") or []] == [
            first[0]["id"],
            more[0]["id"],
            more[1]["id"],
        ]
        found, had = talks.drop_item("conv_a", "alice", more[0]["id"], expires_at=210.0)
        assert had and found is not None and found.conversation_id == "conv_a"
        assert talks.drop_item("conv_a", "alice", more[0]["id"], expires_at=210.0)[1] is False
        relabelled = talks.update("conv_a", "alice", {"topic": "sums"}, expires_at=210.0)
        assert relabelled is not None and talks.get("conv_a", "alice") == relabelled
        assert relabelled.created_at == 100.0 and relabelled.metadata == {"topic": "sums"}
        now[0] = 200.0
        assert talks.get("conv_a", "alice") is not None  # 160 passed, but the changes moved it to 210
        now[0] = 210.0
        assert talks.items("conv_a", "alice") is None  # expired: never read again
        talks.create(Conversation("conv_b", "alice", 210.0, {}), [], expires_at=300.0)  # a write purges it
        now[0] = 100.0
        assert talks.get("conv_a", "alice") is None and talks.items("conv_b", "alice") == []
        assert talks.drop("conv_b", "alice") and talks.get("conv_b", "alice") is None
        assert store.change_marker() == 0  # no audit row: route pollers stay asleep
    finally:
        store.close()
