"""``balance: {policy: prefix_affinity}``: requests that begin alike reach the same replica.

Three fault servers play three vLLM replicas of one variant, through a real gateway process;
each counts what it served (``/stats``) and reports the queue the test sets (``POST /load``) in
vLLM's metric names, which the gateway scrapes every 0.2 s. Requests sharing a system prompt
(different questions after it) all land on one replica, whole or streamed, and so do a
conversation's later turns, while different prompts spread over all three; once that replica's
queue is ``max_imbalance`` requests longer than the others', the prompt moves, all of it, to
another replica, where it then stays.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import eventually, metric_value, running_gateway, write_config
from tests.integration.test_replica_balancing import replica_variant

SYSTEM = "You answer questions about the Turnout gateway's routing, briefly and exactly. " * 2


@pytest.fixture(scope="module")
def servers() -> Iterator[list[FaultServer]]:
    with FaultServer() as a, FaultServer() as b, FaultServer() as c:
        yield [a, b, c]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, servers: list[FaultServer]) -> Iterator[Launched]:
    balance = {
        "policy": "prefix_affinity",
        "max_imbalance": 5,
        "probe_interval_s": 0.2,
        "probe_timeout_s": 2.0,
    }
    urls = [server.base_url for server in servers]
    variants = {"pool": replica_variant(*urls, balance=balance)}
    config = write_config(
        tmp_path_factory.mktemp("affinity") / "gateway.yaml",
        variants,
        {"pool": {"targets": [{"variant": "pool"}]}},
    )
    with running_gateway(config) as launched:
        yield launched


def served(servers: list[FaultServer]) -> list[int]:
    return [server.stats()["requests"] for server in servers]


def prefix_hits(gateway: Launched) -> float:
    name = "turnout_backend_prefix_hits_total"
    return sum(metric_value(gateway.url, name, variant="pool", replica=str(i)) for i in range(3))


def ask(gateway: Launched, system: str, questions: int, first: int = 0) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for i in range(first, first + questions):
            messages = [{"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}]
            body = {"model": "pool", "messages": messages, "stream": bool(i % 2)}
            assert client.post("/v1/chat/completions", json=body).status_code == 200


def test_a_shared_prefix_stays_on_one_replica_and_others_spread(
    gateway: Launched, servers: list[FaultServer]
) -> None:
    before = served(servers)
    ask(gateway, SYSTEM, 30)
    gained = [after - then for after, then in zip(served(servers), before, strict=True)]
    assert sorted(gained) == [0, 0, 30], gained  # whole and streamed alike
    before, hits_before = served(servers), prefix_hits(gateway)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:  # a conversation, turn by turn
        messages = [{"role": "user", "content": "tell me about routing " * 8}]
        for turn in range(6):
            body = {"model": "pool", "messages": messages}
            answer = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
            messages += [
                {"role": "assistant", "content": answer["content"]},
                {"role": "user", "content": f"and {turn}?"},
            ]
    turns = [after - then for after, then in zip(served(servers), before, strict=True)]
    assert sorted(turns) == [0, 0, 6], turns
    assert prefix_hits(gateway) - hits_before == 5  # every turn after the first went where its start had
    before = served(servers)
    for n in range(60):
        ask(gateway, f"system prompt number {n}: " + SYSTEM, 1)
    spread = [after - then for after, then in zip(served(servers), before, strict=True)]
    assert sum(spread) == 60 and min(spread) >= 10, spread


def test_a_loaded_replica_hands_a_prompt_on_whole_and_it_stays_there(
    gateway: Launched, servers: list[FaultServer]
) -> None:
    before = served(servers)
    ask(gateway, SYSTEM, 4)
    home = max(range(3), key=lambda i: served(servers)[i] - before[i])
    servers[home].set_load(waiting=5, running=0, kv=0)  # 5 more than the others: the limit
    gauge = "turnout_backend_requests_waiting"
    eventually(lambda: metric_value(gateway.url, gauge, variant="pool", replica=str(home)) == 5, 5.0)
    try:
        before = served(servers)
        ask(gateway, SYSTEM, 20, first=100)
        gained = [after - then for after, then in zip(served(servers), before, strict=True)]
        assert gained[home] == 0 and sorted(gained) == [0, 0, 20], gained  # one other replica, not spread
        moved_to = gained.index(20)
    finally:
        servers[home].set_load(waiting=0, running=0, kv=0)
        eventually(lambda: metric_value(gateway.url, gauge, variant="pool", replica=str(home)) == 0, 5.0)
    before = served(servers)
    ask(gateway, SYSTEM, 4, first=200)
    assert served(servers)[moved_to] - before[moved_to] == 4  # its cache is there now
