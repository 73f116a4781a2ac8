"""Stored Responses API answers without a server: the items kept, the context a follow-up reads,
a page of input items, and the store's owner and expiry rules (SQLite in memory)."""

from __future__ import annotations

from serving.responses_context import input_items, listed_items, stored
from serving.responses_protocol import ResponsesRequest
from serving.store import RouteStore


def _answer(rid: str, text: str) -> dict[str, object]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    message = {
        "id": f"msg_{rid}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }
    return {"id": f"resp_{rid}", "object": "response", "output": [message]}


def test_input_becomes_items_with_ids_and_a_chain_reads_every_turn_but_instructions() -> None:
    assert input_items("12+34=", "r1") == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "12+34="}],
            "id": "msg_r1_0",
        }
    ]
    calls = input_items([{"type": "function_call_output", "call_id": "c", "output": "4"}], "r9")
    assert calls[0]["id"] == "fco_r9_0" and calls[0]["output"] == "4"
    first = stored("k", 1.0, _answer("r1", "640"), input_items("12+34=", "r1"), [])
    second = stored("k", 2.0, _answer("r2", "10"), input_items("05+05=", "r2"), first.context)
    assert [item["id"] for item in second.context] == ["msg_r1_0", "msg_r1", "msg_r2_0", "msg_r2"]
    wire = ResponsesRequest.model_validate({"model": "m", "input": "01+02=", "instructions": "Add."})
    wire.continuing(second.context)
    assert wire.message_dicts() == [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": [{"type": "text", "text": "12+34="}]},
        {"role": "assistant", "content": [{"type": "text", "text": "640"}]},
        {"role": "user", "content": [{"type": "text", "text": "05+05="}]},
        {"role": "assistant", "content": [{"type": "text", "text": "10"}]},
        {"role": "user", "content": "01+02="},
    ]


def test_input_items_are_listed_a_page_at_a_time() -> None:
    items = [{"id": f"i{n}"} for n in range(5)]
    newest = listed_items(items, limit=2, order="desc", after=None)
    assert [i["id"] for i in newest["data"]] == ["i4", "i3"] and newest["has_more"] is True
    rest = listed_items(items, limit=10, order="desc", after=newest["last_id"])
    assert [i["id"] for i in rest["data"]] == ["i2", "i1", "i0"] and rest["has_more"] is False
    assert listed_items(items, limit=2, order="asc", after="i3")["data"] == [{"id": "i4"}]
    assert listed_items(items, limit=2, order="asc", after="nope")["data"] == []


def test_the_store_gives_an_answer_to_its_key_alone_until_it_expires() -> None:
    now = [100.0]
    store = RouteStore("sqlite://", clock=lambda: now[0])
    try:
        record = stored("alice", 100.0, _answer("r1", "640"), input_items("12+34=", "r1"), [])
        store.keep_response(record, expires_at=160.0)
        assert store.response("resp_r1", "alice") == record
        assert store.response("resp_r1", "bob") is None and not store.drop_response("resp_r1", "bob")
        now[0] = 160.0
        assert store.response("resp_r1", "alice") is None  # expired: never read again
        later = stored("alice", 170.0, _answer("r2", "10"), input_items("05+05=", "r2"), [])
        store.keep_response(later, expires_at=230.0)  # a write purges what has expired
        now[0] = 100.0
        assert store.response("resp_r1", "alice") is None and store.response("resp_r2", "alice") == later
        assert store.drop_response("resp_r2", "alice") and store.response("resp_r2", "alice") is None
        assert store.change_marker() == 0  # no audit row: route pollers stay asleep
    finally:
        store.close()


def test_a_background_responses_states_replace_each_other_until_a_cancel_which_is_final() -> None:
    store = RouteStore("sqlite://", clock=lambda: 100.0)
    try:
        queued = {**_answer("r1", ""), "status": "queued", "background": True, "output": []}
        items = input_items("12+34=", "r1")
        assert store.keep_response(stored("alice", 100.0, queued, items, []), 1e9)
        assert store.runs_beat(["resp_r1", "resp_gone"]) == ["resp_gone"]  # gone: stop it too
        running = {**queued, "status": "in_progress"}
        assert store.keep_response(stored("alice", 100.0, running, items, []), 1e9, replacing=True)
        assert store.cancel_response("resp_r1", "bob") is None
        cancelled = store.cancel_response("resp_r1", "alice")
        assert cancelled is not None and cancelled.response["status"] == "cancelled"
        assert store.runs_beat(["resp_r1"]) == ["resp_r1"]
        done = {**_answer("r1", "640"), "status": "completed"}
        assert not store.keep_response(stored("alice", 100.0, done, items, []), 1e9, replacing=True)
        kept = store.response("resp_r1", "alice")
        assert kept is not None and kept.response["status"] == "cancelled"
        assert store.cancel_response("resp_r1", "alice") == kept  # again: as it is
        finished = {**_answer("r2", "10"), "status": "completed"}
        assert store.keep_response(stored("alice", 100.0, finished, input_items("05+05=", "r2"), []), 1e9)
        found = store.cancel_response("resp_r2", "alice")  # an ended one is not changed
        assert found is not None and found.response["status"] == "completed"
        store.drop_response("resp_r2", "alice")
        assert not store.keep_response(stored("alice", 100.0, finished, [], []), 1e9, replacing=True)
        assert store.response("resp_r2", "alice") is None  # deleted while it ran: not written back
    finally:
        store.close()


def test_a_background_response_whose_run_went_silent_is_failed_when_read() -> None:
    now = [100.0]
    store = RouteStore("sqlite://", clock=lambda: now[0], orphan_after_s=15.0)
    try:
        queued = {**_answer("r1", ""), "status": "queued", "background": True, "output": []}
        store.keep_response(stored("alice", 100.0, queued, input_items("12+34=", "r1"), []), 1e9)
        store.run_started("resp_r1")
        now[0] = 110.0
        assert store.runs_beat(["resp_r1"]) == []  # its gateway is alive, and the run goes on
        now[0] = 124.0
        found = store.response("resp_r1", "alice")
        assert found is not None and found.response["status"] == "queued"  # 14 s since the beat
        now[0] = 125.0
        failed = store.response("resp_r1", "alice")  # 15 s: its gateway is gone
        assert failed is not None and failed.response["status"] == "failed"
        assert failed.response["error"]["code"] == "gateway_gone"
        assert store.response("resp_r1", "alice") == failed  # for good
        late = {**_answer("r1", "640"), "status": "completed", "background": True}
        assert not store.keep_response(stored("alice", 126.0, late, [], []), 1e9, replacing=True)
        assert store.response("resp_r1", "alice") == failed  # its gateway's late end is dropped
        assert store.runs_beat(["resp_r1"]) == ["resp_r1"]  # and its gateway, back, stops the run
        unrecorded = {**_answer("r2", ""), "status": "in_progress", "background": True, "output": []}
        store.keep_response(stored("alice", 125.0, unrecorded, [], []), 1e9)  # killed before its row
        now[0] = 140.0
        gone = store.response("resp_r2", "alice")
        assert gone is not None and gone.response["status"] == "failed"
        store.keep_response(
            stored("alice", 140.0, {**_answer("r3", "1"), "status": "completed"}, [], []), 1e9
        )
        now[0] = 1e6
        ended = store.response("resp_r3", "alice")
        assert ended is not None and ended.response["status"] == "completed"  # an ended one stays
    finally:
        store.close()
