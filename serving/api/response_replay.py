"""``GET /v1/responses/{id}?stream=true&starting_after=N``: a background response's stream again.

Where it sits: ``serving.api.stored_responses`` serves that ``GET`` with :func:`stream_again`.
A run on this gateway is followed in memory (``serving.response_event_log``); one elsewhere, or
ended, is read from the store every ``POLL_S``, to its last event. A run that ended without its
last event in the store (cancelled, its gateway gone) ends the stream with one made from its
stored state; one whose events stop for ``IDLE_S`` while it still says it runs (its gateway died)
ends the stream, and a client may reconnect later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from serving import sse
from serving.api.state import AppState
from serving.errors import ClientError
from serving.response_event_log import LAST_EVENT_OF, is_last
from serving.responses_context import StoredResponse
from serving.store.responses import RUNNING

POLL_S = 0.1
IDLE_S = 30.0
_SETTLE_S = 1.0  # an ended run's last events may still be on their way from its gateway


def starting_after(given: str | None) -> int:
    """The ``starting_after`` query parameter: the last sequence number the client had (none: -1)."""
    if given is None:
        return -1
    try:
        found = int(given)
    except ValueError:
        found = -2
    if found < -1:
        raise ClientError("starting_after: must be a sequence number (0 or more)", param="starting_after")
    return found


def stream_again(state: AppState, found: StoredResponse, owner: str, after: int) -> AsyncIterator[bytes]:
    """The events of background response ``found`` after number ``after``."""
    if not found.response.get("background"):
        message = "Only a background response can be streamed again; GET it without stream"
        raise ClientError(message, param="stream", code="not_streamable")
    here = state.background.log_of(found.response_id)
    if here is not None:
        return here.follow(after)
    return _from_store(state, found.response_id, owner, after)


async def _from_store(state: AppState, response_id: str, owner: str, after: int) -> AsyncIterator[bytes]:
    store = state.store
    quiet_since = time.monotonic()
    while True:
        found = await asyncio.to_thread(store.response_events.after, response_id, after)
        for seq, event in found:
            yield event
            after = seq
            if is_last(event):
                return
        now = time.monotonic()
        if found:
            quiet_since = now
        else:
            kept = await asyncio.to_thread(store.response, response_id, owner)
            if kept is None:  # deleted meanwhile
                return
            status = str(kept.response.get("status"))
            if status not in RUNNING and now - quiet_since >= _SETTLE_S:
                kind = LAST_EVENT_OF.get(status, "response.failed")
                yield sse.named_event(
                    kind, {"type": kind, "sequence_number": after + 1, "response": kept.response}
                )
                return
            if now - quiet_since >= IDLE_S:
                return
        await asyncio.sleep(POLL_S)
