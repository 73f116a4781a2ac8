"""Triton-style dynamic batching for the embedded engine: a bounded queue and one worker thread.

``backends.embedded`` submits jobs from the event loop; the worker thread takes the
oldest job, waits until that job has been queued ``max_queue_delay_ms`` (or the batch is
full) gathering compatible jobs (same sampling settings), and runs them as one batch
through ``run_batch``, off the event loop. A full queue refuses at once with
:class:`Overloaded` (429 + Retry-After) instead of growing without bound.
Engine-agnostic: the runner is a callable, so the scheduling is tested without a model.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from backends.settings import BatchingSettings
from serving.errors import Overloaded

log = logging.getLogger("turnout.batcher")


class BatchJob(Protocol):
    enqueued_at: float
    queued: bool  # counted in the queue's depth (set and cleared by the batcher, under its lock)

    @property
    def batch_key(self) -> Hashable | None:
        """Jobs with equal keys may share a batch; None means the job runs alone."""

    @property
    def cancelled(self) -> bool: ...

    def fail(self, error: BaseException) -> None:
        """Called if the batch it was in raised."""


J = TypeVar("J", bound=BatchJob)
_STOP = object()


class DynamicBatcher(Generic[J]):
    def __init__(
        self,
        name: str,
        settings: BatchingSettings,
        run_batch: Callable[[list[J]], None],
        *,
        on_batch: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._settings = settings
        self._run_batch = run_batch
        self.on_batch = on_batch
        self._clock = clock
        self._incoming: queue.SimpleQueue[J | object] = queue.SimpleQueue()
        self._deferred: deque[J] = deque()
        self._depth = 0
        self._withdrawn = 0  # withdrawn jobs the worker has not reached yet (still in _incoming)
        self._depth_lock = threading.Lock()
        self._batch_seconds = 0.05  # running average, for Retry-After
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"batcher-{self.name}", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._incoming.put(_STOP)
            self._thread.join(timeout)
            self._thread = None

    def depth(self) -> int:
        """Jobs waiting (not yet in a running batch)."""
        return self._depth

    def submit(self, job: J) -> None:
        with self._depth_lock:
            # Withdrawn jobs hold no place, but each stays in memory until the worker reaches it:
            # past a second queue's worth of them, refuse too (a flood of hang-ups is bounded).
            if (
                self._depth >= self._settings.max_queue_size
                or self._depth + self._withdrawn >= 2 * self._settings.max_queue_size
            ):
                batches_ahead = self._depth / self._settings.max_batch_size + 1
                state = f"{self._depth} requests queued (limit {self._settings.max_queue_size})"
                if self._depth < self._settings.max_queue_size:
                    state += f" and {self._withdrawn} abandoned ones not cleared yet"
                raise Overloaded(
                    f"variant '{self.name}' has {state}; retry later",
                    retry_after=batches_ahead * self._batch_seconds,
                )
            self._depth += 1
            job.queued = True
        job.enqueued_at = self._clock()
        self._incoming.put(job)

    def withdraw(self, job: J) -> None:
        """The job's client left: free its place in the queue now, not when the worker reaches it
        (a long batch ahead would keep abandoned jobs filling the queue, refusing live ones).
        A job already taken into a batch is left to the batch, which sees it cancelled."""
        with self._depth_lock:
            if job.queued:
                job.queued = False
                self._depth -= 1
                self._withdrawn += 1

    # ---- worker thread -------------------------------------------------------------

    def _take(self, timeout: float | None) -> J | object | None:
        if self._deferred:
            return self._deferred.popleft()
        try:
            return self._incoming.get(timeout=timeout)
        except queue.Empty:
            return None

    def _gather(self, first: J) -> tuple[list[J], bool]:
        """Collect jobs compatible with ``first`` until full or its delay has passed."""
        batch = [first]
        key = first.batch_key
        if key is None:
            return batch, False
        deadline = first.enqueued_at + self._settings.max_queue_delay_ms / 1000.0
        skipped: list[J] = []
        stopping = False
        while len(batch) < self._settings.max_batch_size:
            if self._deferred:
                candidate: J | object | None = self._deferred.popleft()
            else:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    try:
                        candidate = self._incoming.get_nowait()
                    except queue.Empty:
                        break
                else:
                    candidate = self._take(remaining)
                    if candidate is None:
                        break
            if candidate is _STOP:
                stopping = True
                break
            job: J = candidate  # type: ignore[assignment]
            if job.cancelled:
                self._dequeue([job])
            elif job.batch_key == key:
                batch.append(job)
            else:
                skipped.append(job)
        self._deferred.extendleft(reversed(skipped))
        return batch, stopping

    def _dequeue(self, jobs: list[J]) -> None:
        """Jobs leave the queue (into a batch, or dropped): those not withdrawn already count down."""
        with self._depth_lock:
            for job in jobs:
                if job.queued:
                    job.queued = False
                    self._depth -= 1
                else:  # withdrawn while queued: now it is out of memory too
                    self._withdrawn -= 1

    def _work(self) -> None:
        while True:
            item = self._take(None)
            if item is _STOP or item is None:
                return
            first: J = item  # type: ignore[assignment]
            if first.cancelled:
                self._dequeue([first])
                continue
            batch, stopping = self._gather(first)
            self._dequeue(batch)
            started = self._clock()
            try:
                self._run_batch(batch)
            except BaseException as exc:  # the batch fails, the worker lives on
                log.exception("batch of %d failed on %s", len(batch), self.name)
                for job in batch:
                    job.fail(exc)
            self._batch_seconds = 0.8 * self._batch_seconds + 0.2 * (self._clock() - started)
            if self.on_batch is not None:
                self.on_batch(len(batch))
            if stopping:
                return
