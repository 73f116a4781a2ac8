"""A background response's events without a server: followed in memory as they come, written to
the store shortly after, read back after a sequence number, and gone with their response."""

from __future__ import annotations

import asyncio

from serving.response_event_log import EventLog, is_last
from serving.responses_context import stored
from serving.store import RouteStore


def _event(kind: str, seq: int) -> bytes:
    return f'event: {kind}\ndata: {{"type": "{kind}", "sequence_number": {seq}}}\n\n'.encode()


def test_followers_get_every_event_as_it_comes_and_the_store_gets_them_shortly() -> None:
    async def scenario() -> None:
        written: list[tuple[int, bytes]] = []

        async def write(batch: list[tuple[int, bytes]]) -> None:
            written.extend(batch)

        trail = EventLog(write, flush_every_s=0.05)
        await trail.add(_event("response.created", 0))
        from_start = trail.follow()
        assert await anext(from_start) == _event("response.created", 0)
        waiting = asyncio.ensure_future(anext(from_start))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # nothing new yet
        await trail.add(_event("response.in_progress", 1))
        assert await waiting == _event("response.in_progress", 1)
        assert written == []  # not yet: the write comes a moment later, whatever else comes
        await asyncio.sleep(0.1)
        assert [seq for seq, _ in written] == [0, 1]
        late = trail.follow(after=0)  # a client that had event 0
        await trail.add(_event("response.completed", 2))
        await trail.close()
        assert [seq for seq, _ in written] == [0, 1, 2]  # all of it, once it ended
        assert [event async for event in late] == [
            _event("response.in_progress", 1),
            _event("response.completed", 2),
        ]
        assert [event async for event in from_start] == [_event("response.completed", 2)]

    asyncio.run(scenario())


def test_the_last_events_are_known() -> None:
    assert is_last(_event("response.completed", 9)) and is_last(_event("response.failed", 3))
    assert is_last(_event("response.incomplete", 4)) and not is_last(_event("response.output_text.delta", 5))


def test_the_store_reads_events_after_a_number_until_their_response_goes() -> None:
    now = [100.0]
    store = RouteStore("sqlite://", clock=lambda: now[0])
    try:
        events = store.response_events
        events.add(
            "resp_1", [(0, _event("response.created", 0)), (1, _event("response.in_progress", 1))], 160.0
        )
        events.add("resp_1", [(2, _event("response.completed", 2))], 160.0)
        events.add("resp_2", [(0, _event("response.created", 0))], 500.0)
        assert [seq for seq, _ in events.after("resp_1", -1)] == [0, 1, 2]
        assert events.after("resp_1", 1) == [(2, _event("response.completed", 2))]
        answer = {"id": "resp_2", "object": "response", "status": "completed", "output": []}
        store.keep_response(stored("alice", 100.0, answer, [], []), 500.0)
        store.drop_response("resp_2", "alice")
        assert events.after("resp_2", -1) == []  # deleted with its response
        now[0] = 160.0
        assert events.after("resp_1", -1) == []  # expired with it
    finally:
        store.close()
