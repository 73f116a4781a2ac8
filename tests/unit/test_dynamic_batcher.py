"""Dynamic batching scheduling, with a recording runner instead of a model."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import pytest

from backends.dynamic_batcher import DynamicBatcher
from backends.settings import BatchingSettings
from serving.errors import Overloaded


@dataclass
class Job:
    key: Hashable | None = ("greedy",)
    enqueued_at: float = 0.0
    queued: bool = False
    cancel: bool = False
    failed: list[BaseException] = field(default_factory=list)

    @property
    def batch_key(self) -> Hashable | None:
        return self.key

    @property
    def cancelled(self) -> bool:
        return self.cancel

    def fail(self, error: BaseException) -> None:
        self.failed.append(error)


class Recorder:
    def __init__(self, gate: threading.Event | None = None, error: Exception | None = None) -> None:
        self.batches: list[list[Job]] = []
        self.gate = gate
        self.error = error
        self.done = threading.Semaphore(0)
        self.running = threading.Event()  # the first batch has reached the runner

    def __call__(self, batch: list[Job]) -> None:
        self.running.set()
        if self.gate is not None:
            self.gate.wait(5)
        self.batches.append(batch)
        self.done.release()
        if self.error is not None:
            raise self.error


def until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``check`` (the worker thread finishes a batch's bookkeeping after the runner)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def wait_batches(recorder: Recorder, count: int) -> None:
    for _ in range(count):
        assert recorder.done.acquire(timeout=5), "batch did not run"


def make(recorder: Recorder, **settings: float) -> DynamicBatcher[Job]:
    batcher = DynamicBatcher[Job]("v", BatchingSettings(**settings), recorder)  # type: ignore[arg-type]
    batcher.start()
    return batcher


def held(
    first: Job | None = None, **settings: float
) -> tuple[threading.Event, Recorder, DynamicBatcher[Job]]:
    """A batcher whose worker is busy with ``first`` (a plain job by default), held by the gate."""
    gate = threading.Event()
    recorder = Recorder(gate)
    batcher = make(recorder, **settings)
    batcher.submit(first or Job())
    assert recorder.running.wait(5)  # running now, held by the gate
    return gate, recorder, batcher


def test_jobs_arriving_within_the_delay_share_a_batch() -> None:
    blocker = Job()
    gate, recorder, batcher = held(blocker, max_batch_size=8, max_queue_delay_ms=50)
    jobs = [Job() for _ in range(5)]
    for job in jobs:
        batcher.submit(job)
    assert batcher.depth() == 5
    gate.set()
    wait_batches(recorder, 2)
    assert recorder.batches[1] == jobs
    batcher.stop()


def test_batch_size_is_capped() -> None:
    gate = threading.Event()
    recorder = Recorder(gate)
    # a delay long enough that whenever the worker wakes, it fills a batch before running it
    batcher = make(recorder, max_batch_size=4, max_queue_delay_ms=200)
    for _ in range(10):
        batcher.submit(Job())
    gate.set()
    wait_batches(recorder, 3)
    assert sorted(len(b) for b in recorder.batches) == [2, 4, 4]
    batcher.stop()


def test_incompatible_jobs_never_share_a_batch_and_keep_their_order() -> None:
    gate, recorder, batcher = held(max_batch_size=8, max_queue_delay_ms=0)
    greedy = [Job(key="g") for _ in range(3)]
    sampled = [Job(key="s") for _ in range(2)]
    seeded = Job(key=None)
    for job in [greedy[0], sampled[0], seeded, greedy[1], sampled[1], greedy[2]]:
        batcher.submit(job)
    gate.set()
    wait_batches(recorder, 4)
    assert recorder.batches[1:] == [greedy, sampled, [seeded]]
    batcher.stop()


def test_full_queue_refuses_with_retry_after() -> None:
    gate, recorder, batcher = held(max_batch_size=1, max_queue_delay_ms=0, max_queue_size=3)
    for _ in range(3):
        batcher.submit(Job())
    with pytest.raises(Overloaded) as caught:
        batcher.submit(Job())
    assert caught.value.status == 429
    assert int(caught.value.headers["retry-after"]) >= 1
    gate.set()
    wait_batches(recorder, 4)
    batcher.stop()


def test_cancelled_jobs_are_dropped_before_running() -> None:
    gate, recorder, batcher = held(max_batch_size=8, max_queue_delay_ms=0)
    keep, drop = Job(), Job()
    batcher.submit(keep)
    batcher.submit(drop)
    drop.cancel = True
    gate.set()
    wait_batches(recorder, 2)
    assert recorder.batches[1] == [keep]
    assert until(lambda: batcher.depth() == 0)
    batcher.stop()


def test_a_withdrawn_job_frees_its_place_at_once_and_is_counted_once() -> None:
    running = Job()
    gate, recorder, batcher = held(running, max_batch_size=1, max_queue_delay_ms=0, max_queue_size=2)
    left, waiting = Job(), Job()
    batcher.submit(left)
    batcher.submit(waiting)
    left.cancel = True
    batcher.withdraw(left)  # the client left: its place is free while the batch still runs
    batcher.withdraw(running)  # already in a batch: nothing to free
    assert batcher.depth() == 1
    late = Job()
    batcher.submit(late)  # would be a 429 had the abandoned job kept its place
    gate.set()
    wait_batches(recorder, 3)
    ran = [[id(job) for job in batch] for batch in recorder.batches]
    assert ran == [[id(running)], [id(waiting)], [id(late)]]
    assert until(lambda: batcher.depth() == 0)
    batcher.stop()


def test_withdrawn_jobs_not_yet_cleared_are_bounded_to_a_second_queue() -> None:
    """Each stays in memory until the worker reaches it: a flood of hang-ups cannot grow it forever."""
    gate, recorder, batcher = held(max_batch_size=1, max_queue_delay_ms=0, max_queue_size=2)
    for _ in range(4):  # two queues' worth of hang-ups: each frees its place at once
        left = Job(cancel=True)
        batcher.submit(left)
        batcher.withdraw(left)
    assert batcher.depth() == 0
    with pytest.raises(Overloaded, match=r"0 requests queued \(limit 2\) and 4 abandoned ones"):
        batcher.submit(Job())
    gate.set()
    wait_batches(recorder, 1)
    assert until(lambda: batcher._withdrawn == 0)  # the worker dropped them: room again
    batcher.submit(Job())
    wait_batches(recorder, 1)
    batcher.stop()


def test_a_failing_batch_fails_its_jobs_and_the_worker_lives_on() -> None:
    recorder = Recorder(error=RuntimeError("boom"))
    batcher = make(recorder, max_batch_size=8, max_queue_delay_ms=0)
    job = Job()
    batcher.submit(job)
    wait_batches(recorder, 1)
    assert until(lambda: len(job.failed) == 1)
    recorder.error = None
    batcher.submit(Job())
    wait_batches(recorder, 1)
    batcher.stop()


def test_batch_observer_sees_sizes() -> None:
    sizes: list[int] = []
    recorder = Recorder()
    batcher = make(recorder, max_batch_size=8, max_queue_delay_ms=0)
    batcher.on_batch = sizes.append
    batcher.submit(Job())
    wait_batches(recorder, 1)
    assert until(lambda: sizes == [1])
    batcher.stop()
    assert sizes == [1]
