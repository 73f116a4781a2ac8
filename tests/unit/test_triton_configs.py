"""Re-reading a Triton model's config after a refusal: one read for every request refused around
the same time, each retried if the config it was shaped by is gone, and no more than one read per
floor however many requests are refused. The config endpoint is a function here (no server)."""

from __future__ import annotations

import asyncio
from typing import Any

from backends.triton_configs import ModelConfigs
from backends.triton_tensors import ModelFacts
from serving.errors import BackendUnavailable

BATCHED = {"max_batch_size": 8, "input": [{"name": "text_input", "data_type": "TYPE_STRING"}]}
UNBATCHED = {**BATCHED, "max_batch_size": 0}


class Endpoint:
    """Serves ``config``; each read takes ``delay`` seconds and is counted."""

    def __init__(self, config: dict[str, Any], delay: float = 0.0) -> None:
        self.config, self.delay, self.reads = config, delay, 0

    async def __call__(self, model: str) -> dict[str, Any]:
        self.reads += 1
        await asyncio.sleep(self.delay)
        return self.config


async def test_requests_refused_together_are_all_retried_on_one_read() -> None:
    """The second refused request used to pop what the first had just read, find it equal to
    itself and fail: every request in flight during a reload but the first was a 400 (review)."""
    endpoint = Endpoint(BATCHED)
    configs = ModelConfigs("t", endpoint)
    old = await configs.facts("m")
    endpoint.config, endpoint.delay = UNBATCHED, 0.05
    first = asyncio.ensure_future(configs.changed_since(old))
    await asyncio.sleep(0.01)  # the second is refused while the first's read is under way
    second = asyncio.ensure_future(configs.changed_since(old))
    assert await first and await second
    assert await configs.changed_since(old)  # and one refused just after
    assert endpoint.reads == 2  # the first read, and one re-read for all three
    assert (await configs.facts("m")).batched is False


async def test_refusals_for_a_clients_own_reasons_read_at_most_once_per_floor() -> None:
    """Each bad request used to empty the cache and re-read the config under the lock, one after
    another, while good requests waited behind them (review: 3 s for one)."""
    now = [0.0]
    endpoint = Endpoint(BATCHED)
    configs = ModelConfigs("t", endpoint, clock=lambda: now[0], reread_floor_s=2.0)
    facts = await configs.facts("m")
    results = await asyncio.gather(*(configs.changed_since(facts) for _ in range(5)))
    assert results == [False] * 5 and endpoint.reads == 2
    assert configs.cached("m") == facts  # never emptied: good requests do not wait
    now[0] = 2.5
    assert not await configs.changed_since(facts) and endpoint.reads == 3


async def test_an_unreadable_config_leaves_the_requests_error_standing() -> None:
    async def down(model: str) -> dict[str, Any]:
        raise BackendUnavailable("Triton is down")

    configs = ModelConfigs("t", down)
    assert not await configs.changed_since(ModelFacts("m", batched=True))
