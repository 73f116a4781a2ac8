"""The embedded engine's decode loop (``backends.ortgenai_runner``) on the shipped fp32 model,
in-process, its event loop running in a thread of its own as the gateway's runs beside the
batcher's worker: each step's tokens become text and events on that loop while the worker
computes, and the batch ends as soon as its rows have."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from backends import ortgenai_capi
from backends.base import SamplingParams
from backends.ortgenai_runner import STEPS_AHEAD, Event, GenAIModel, Sequence
from backends.token_text import TextStream
from deploy.model.artifacts import onnx_dir


@pytest.fixture(scope="module")
def model() -> GenAIModel:
    return GenAIModel(onnx_dir("fp32"))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(5)
    running.close()


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many decode steps the worker ran (one counter for the test)."""
    counted = [0]
    real = ortgenai_capi.Generator.generate_next_token

    def counting(self: ortgenai_capi.Generator) -> None:
        counted[0] += 1
        real(self)

    monkeypatch.setattr(ortgenai_capi.Generator, "generate_next_token", counting)
    return counted


def row(
    model: GenAIModel, loop: asyncio.AbstractEventLoop, max_tokens: int, **params: object
) -> tuple[Sequence, list[Event]]:
    prompt = np.concatenate([[model.bos_id], model.encode("the red")]).astype(np.int32)
    events: list[Event] = []
    settings = SamplingParams(max_tokens=max_tokens, temperature=0, **params)  # type: ignore[arg-type]
    return Sequence(prompt, settings, max_tokens, loop, events.append), events


def settle(loop: asyncio.AbstractEventLoop) -> None:
    """Wait until the loop has run everything the worker handed it so far."""
    done = threading.Event()
    loop.call_soon_threadsafe(done.set)
    assert done.wait(10)


def text_of(events: list[Event]) -> str:
    return "".join(text for text, _, _ in events)


def test_the_batch_ends_with_its_longest_row(
    model: GenAIModel, loop: asyncio.AbstractEventLoop, steps: list[int]
) -> None:
    (short, short_events), (long, long_events) = (
        row(model, loop, 3, ignore_eos=True),
        row(model, loop, 9, ignore_eos=True),
    )
    model.run_batch([short, long])
    settle(loop)
    assert steps[0] == 9
    assert short_events[-1][1:] == ("length", 3)
    assert long_events[-1][1:] == ("length", 9)
    assert [finish for _, finish, _ in long_events].count("length") == 1


@pytest.mark.parametrize("stall_s", [0.0, 0.05])
def test_a_stop_sequence_ends_the_batch_soon_after_it_appears(
    model: GenAIModel, loop: asyncio.AbstractEventLoop, steps: list[int], stall_s: float
) -> None:
    """However busy the event loop (``stall_s``: it is blocked as the batch begins), the worker
    runs at most ``STEPS_AHEAD`` steps past the stop: it waits for the loop rather than decode
    on to ``max_tokens`` for a row that has ended."""
    reference, reference_events = row(model, loop, 40, ignore_eos=True)
    model.run_batch([reference])
    settle(loop)
    said = [(text, generated) for text, finish, generated in reference_events if finish is None]
    full = "".join(text for text, _ in said)
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    cut = full.index(stop)
    seen, appears_at = "", 0
    for text, generated in said:  # the token after which the text first holds the stop sequence
        seen += text
        if stop in seen:
            appears_at = generated
            break
    steps[0] = 0

    stopped, events = row(model, loop, 400, ignore_eos=True, stop=(stop,))
    loop.call_soon_threadsafe(time.sleep, stall_s)
    model.run_batch([stopped])
    settle(loop)

    assert events[-1][1] == "stop"
    assert text_of(events) == full[:cut]
    assert appears_at <= steps[0] <= appears_at + STEPS_AHEAD, (appears_at, steps[0])  # not 400


def test_a_failing_batch_sends_its_error_after_the_tokens_it_made(
    model: GenAIModel, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ortgenai_capi.Generator.generate_next_token
    done = [0]

    def breaks_at_the_fifth(self: ortgenai_capi.Generator) -> None:
        done[0] += 1
        if done[0] == 5:
            raise ortgenai_capi.GenAIError("the device fell over")
        real(self)

    monkeypatch.setattr(ortgenai_capi.Generator, "generate_next_token", breaks_at_the_fifth)
    seq, events = row(model, loop, 20, ignore_eos=True)
    with pytest.raises(ortgenai_capi.GenAIError):
        model.run_batch([seq])
    seq.fail(ortgenai_capi.GenAIError("the device fell over"))  # as the dynamic batcher does
    settle(loop)
    assert events[-1] == ("", "error", 4)
    assert [finish for _, finish, _ in events[:-1]] == [None] * (len(events) - 1)
    assert events[-2][2] == 4  # every token made before the failure reached the consumer first


class BreaksOnItsThirdToken:
    def __init__(self, inner: TextStream) -> None:
        self.inner, self.count = inner, 0

    def decode(self, token: int) -> str:
        self.count += 1
        if self.count == 3:
            raise UnicodeError("this tokenizer cannot spell that")
        return self.inner.decode(token)


def test_a_row_whose_text_fails_ends_with_an_error_and_the_others_go_on(
    model: GenAIModel, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = model.text_stream
    made: list[TextStream] = []

    def streams() -> TextStream:  # the batch's first row gets the breaking one
        made.append(real() if made else BreaksOnItsThirdToken(real()))
        return made[-1]

    alone, reference = row(model, loop, 8, ignore_eos=True)
    model.run_batch([alone])
    settle(loop)
    monkeypatch.setattr(model, "text_stream", streams)
    rows = [row(model, loop, 8, ignore_eos=True) for _ in range(3)]
    model.run_batch([seq for seq, _ in rows])
    settle(loop)
    broken, *others = (events for _, events in rows)
    assert broken[-1] == ("", "error", 3)
    assert reference[-1][1:] == ("length", 8)
    assert others == [reference, reference]  # every token, none lost to the other row's failure


def test_a_row_cancelled_before_its_batch_ends_at_once_and_the_rest_go_on(
    model: GenAIModel, loop: asyncio.AbstractEventLoop
) -> None:
    (gone, gone_events), (kept, kept_events) = (
        row(model, loop, 6, ignore_eos=True),
        row(model, loop, 6, ignore_eos=True),
    )
    gone.cancel_requested = True
    model.run_batch([gone, kept])
    settle(loop)
    assert gone_events == [("", "cancelled", 0)]
    assert kept_events[-1][1:] == ("length", 6)


def test_a_short_prompt_beside_a_long_one_still_gets_every_token_it_asked_for(
    model: GenAIModel, loop: asyncio.AbstractEventLoop
) -> None:
    """Right padding gives every row the longest prompt's room in the context: the short row's
    500 tokens would end at 512 - 300 beside a 300-token prompt. It goes on in a batch of its
    own and gets what it gets alone (fp32: token for token)."""
    alone, reference = row(model, loop, 500, ignore_eos=True)
    model.run_batch([alone])
    settle(loop)
    short, events = row(model, loop, 500, ignore_eos=True)
    long_prompt = np.concatenate([short.prompt_ids, np.full(296, short.prompt_ids[-1], dtype=np.int32)])
    long_events: list[Event] = []
    long = Sequence(long_prompt, short.params, 8, loop, long_events.append)
    model.run_batch([short, long])
    settle(loop)
    assert long_events[-1][1:] == ("length", 8)
    assert events[-1][1:] == ("length", 500)
    assert text_of(events) == text_of(reference)
