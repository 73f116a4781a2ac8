"""The canary's eval gate: accuracy of the canary (and stable) variant measured by the gateway itself.

Beside the request path, like the canary controller that uses it (``serving.canary_controller``):
when a route's canary plan has an ``eval_gate``, :class:`CanaryEvals` runs the gate's rows of its
dataset (``evals.datasets``: a shipped set or the operator's JSONL) greedily through the
variant's own backend adapter, the same adapter and engine that serve the route's clients, but
not through the route: eval requests are not client traffic, so they are not observed by the
judge, counted in the route's metrics, mirrored to shadows or charged to a key. Answers are
scored with ``evals.metrics.match``. One run per plan (the variants do not change between
steps), between every gateway on the store: the first to ask claims it in the store
(``serving.store.eval_claims``) and runs it, beating a heartbeat each tick, and writes the
result, which the others read (a claim gone quiet is taken over); the pure judge
(``serving.routing.canary.judge``) decides what the scores mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from backends.base import Backend, GenerateRequest, SamplingParams
from evals.datasets import Dataset, DatasetError, load, shipped
from evals.metrics import match
from serving.metrics import GatewayMetrics
from serving.routing.canary import EvalScores
from serving.routing.spec import CanaryPlan, EvalGate
from serving.store.eval_claims import EvalClaims

log = logging.getLogger("turnout.canary")

CONCURRENCY = 4  # eval requests in flight per variant: enough to batch, little against clients
REQUEST_TIMEOUT_S = 120.0
STALE_S = 30.0  # a claim this long without a heartbeat (its gateway gone) is taken over


def eval_dataset(gate: EvalGate) -> Dataset:
    """The gate's dataset: a shipped generation set by name, else the JSONL file it names."""
    if gate.dataset in shipped():
        return shipped()[gate.dataset]
    return load(Path(gate.dataset), "generation")


@dataclass(frozen=True, slots=True)
class VariantScore:
    accuracy: float
    failed: int


async def score_variant(
    backend: Backend, rows: Sequence[Mapping[str, Any]], gate: EvalGate, request_id: str
) -> VariantScore:
    """Accuracy of ``backend`` on ``rows`` (greedy); a failed request counts as a wrong answer."""
    params = SamplingParams(max_tokens=gate.max_tokens, temperature=0.0)
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int, row: Mapping[str, Any]) -> bool | None:
        prompt = str(row["prompt"])
        if gate.endpoint == "chat":
            messages = [{"role": "user", "content": prompt}]
            request = GenerateRequest("chat", params, messages=messages, request_id=f"{request_id}-{index}")
        else:
            request = GenerateRequest("completion", params, prompt=prompt, request_id=f"{request_id}-{index}")
        async with limit:
            try:
                result = await asyncio.wait_for(backend.complete(request), REQUEST_TIMEOUT_S)
            except Exception as exc:  # any failure of the variant is a wrong answer, and counted
                log.debug("eval request %s failed: %s", request.request_id, exc)
                return None
        return match(result.text, str(row["answer"]), gate.scoring)

    answers = await asyncio.gather(*(one(i, row) for i, row in enumerate(rows)))
    correct = sum(1 for answer in answers if answer)
    return VariantScore(correct / len(rows), sum(1 for answer in answers if answer is None))


def _key(route: str, plan: CanaryPlan, started: int) -> str:
    """One plan's eval, on every gateway: its route, the version its canary started at, its
    variants and its gate (a canary started again is evaluated again)."""
    gate = plan.eval_gate.model_dump_json() if plan.eval_gate is not None else ""
    whole = f"{route}\0{started}\0{plan.stable}\0{plan.canary}\0{gate}"
    return f"{route[:150]}:{hashlib.sha256(whole.encode()).hexdigest()}"


def _stored(outcome: EvalScores | str) -> str:
    found = {"error": outcome} if isinstance(outcome, str) else {"scores": dataclasses.asdict(outcome)}
    return orjson.dumps(found).decode()


def _read(stored: str) -> EvalScores | str:
    found = orjson.loads(stored)
    return str(found["error"]) if "error" in found else EvalScores(**found["scores"])


class CanaryEvals:
    """Runs each canary plan's eval gate once across the gateways on the store, in the
    background, and keeps the result: the gateway that claims it runs it, the others read it."""

    def __init__(
        self,
        backends: Mapping[str, Backend],
        metrics: GatewayMetrics,
        claims: EvalClaims,
        stale_s: float = STALE_S,
    ) -> None:
        self._backends = backends
        self._metrics = metrics
        self._claims, self._stale = claims, stale_s
        self._me = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._tasks: dict[str, asyncio.Task[EvalScores]] = {}
        self._done: dict[str, EvalScores | str] = {}

    async def result(self, route: str, plan: CanaryPlan, started: int) -> EvalScores | str | None:
        """The scores, or why the eval could not run, or None while it runs (here or on another
        gateway; claimed on the first call that finds nobody running it). ``started``: the route
        version the canary started at."""
        gate = plan.eval_gate
        if gate is None:
            return None
        key = _key(route, plan, started)
        if key in self._done:
            return self._done[key]
        task = self._tasks.get(key)
        if task is not None:
            if not task.done():
                await asyncio.to_thread(self._claims.beat, key, self._me)
                return None
            outcome: EvalScores | str = (
                f"eval cannot run: {task.exception()}" if task.exception() is not None else task.result()
            )
            await asyncio.to_thread(self._claims.finish, key, _stored(outcome))
            return self._ended(route, plan, key, outcome)
        stored = await asyncio.to_thread(self._claims.result, key)
        if stored is not None:  # another gateway ran it
            return self._ended(route, plan, key, _read(stored))
        variants = [plan.canary, plan.stable] if gate.against_stable else [plan.canary]
        missing = [v for v in variants if v not in self._backends]
        if missing:
            return f"eval cannot run: no backend for {', '.join(missing)}"
        if not all(self._backends[v].ready() for v in variants):
            return None  # still loading: an eval now would score a backend that cannot answer
        if await asyncio.to_thread(self._claims.claim, key, route, self._me, self._stale):
            self._tasks[key] = asyncio.create_task(self._run(route, plan, gate))
        return None

    def _ended(self, route: str, plan: CanaryPlan, key: str, outcome: EvalScores | str) -> EvalScores | str:
        self._tasks.pop(key, None)
        self._done[key] = outcome
        if isinstance(outcome, EvalScores):  # every gateway's /metrics shows the scores
            gauge = self._metrics.canary_eval_accuracy
            gauge.labels(route, plan.canary, outcome.dataset).set(outcome.canary)
            if outcome.stable is not None:
                gauge.labels(route, plan.stable, outcome.dataset).set(outcome.stable)
        return outcome

    async def _run(self, route: str, plan: CanaryPlan, gate: EvalGate) -> EvalScores:
        try:
            dataset = eval_dataset(gate)
        except (DatasetError, OSError) as exc:
            raise RuntimeError(f"dataset {gate.dataset}: {exc}") from None
        rows = dataset.rows[: gate.examples]
        variants = [plan.canary, plan.stable] if gate.against_stable else [plan.canary]
        log.info("canary on %s: eval of %s on %d %s examples", route, ", ".join(variants), len(rows),
                 dataset.label)  # fmt: skip
        scores = await asyncio.gather(
            *(score_variant(self._backends[v], rows, gate, f"eval-{route}-{v}") for v in variants)
        )
        return EvalScores(
            dataset=dataset.label,
            examples=len(rows),
            canary=scores[0].accuracy,
            stable=scores[1].accuracy if len(scores) > 1 else None,
            canary_failed=scores[0].failed,
        )

    def forget(self, route: str) -> None:
        """Drop the route's results (its plan ended), cancelling a run still going."""
        mine = route[:150]  # a key is the route's start, then ":" and a digest with no ":" in it
        for key in [k for k in self._tasks if k.rsplit(":", 1)[0] == mine]:
            self._tasks.pop(key).cancel()
        for key in [k for k in self._done if k.rsplit(":", 1)[0] == mine]:
            del self._done[key]

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
