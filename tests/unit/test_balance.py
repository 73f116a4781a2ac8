"""The replica choice (``serving/routing/balance.py``) and what feeds it (``backends/load_probe.py``).

Values in, values out: loads and draws are given, never measured or random.
"""

from __future__ import annotations

from collections import Counter

import pytest

from backends.load_probe import NO_FIGURES, EngineLoad, metrics_url, parse_load
from backends.settings import OpenAIHttpSettings
from serving.metrics import GatewayMetrics
from serving.routing.balance import KV_FULL_AT, ReplicaLoad, choose, score

L = ReplicaLoad
DRAWS = [(a / 10, b / 10) for a in range(10) for b in range(10)]


def test_score_counts_requests_alike_and_kv_only_breaks_ties_until_nearly_full() -> None:
    assert score(L(0, in_flight=2, waiting=3, running=4)) == 9
    assert score(L(0)) == 0  # nothing known: no load
    assert score(L(0, in_flight=1, kv_usage=0.0)) < score(L(0, in_flight=1, kv_usage=0.5))
    assert score(L(0, in_flight=1, kv_usage=KV_FULL_AT)) < score(L(0, in_flight=2))  # below: a tie-break
    assert score(L(0, kv_usage=1.0)) > score(L(0, waiting=10))  # full: worse than ten queued requests
    assert score(L(0, kv_usage=7.0)) == score(L(0, kv_usage=1.0))  # clamped to [0, 1]


def test_least_loaded_picks_the_lowest_score_whatever_the_draws() -> None:
    loads = [L(0, in_flight=3), L(1, waiting=1, running=1), L(2, in_flight=1, waiting=5)]
    assert {choose(loads, "least_loaded", draws) for draws in DRAWS} == {1}


def test_least_loaded_spreads_equal_replicas_by_the_first_draw() -> None:
    loads = [L(0), L(1), L(2), L(3, in_flight=1)]
    picks = Counter(choose(loads, "least_loaded", (a / 30, 0.0)) for a in range(30))
    assert picks == {0: 10, 1: 10, 2: 10}


def test_power_of_two_compares_the_two_drawn_replicas() -> None:
    loads = [L(0, waiting=5), L(1, waiting=1), L(2, waiting=9), L(3, waiting=0)]
    assert choose(loads, "power_of_two", (0.0, 0.0)) == 1  # 0 vs 1 → 1
    assert choose(loads, "power_of_two", (0.6, 0.0)) == 0  # 2 vs 0 → 0
    assert choose(loads, "power_of_two", (0.6, 0.99)) == 3  # 2 vs 3 → 3
    assert choose(loads, "power_of_two", (0.99, 0.99)) == 3


def test_power_of_two_draws_two_distinct_replicas_and_never_picks_the_worst() -> None:
    loads = [L(0, in_flight=2), L(1, in_flight=1), L(2, in_flight=7)]
    picks = Counter(choose(loads, "power_of_two", draws) for draws in DRAWS)
    assert 2 not in picks  # the worst loses every pair it is in
    two = [L(0, waiting=50), L(1)]
    assert {choose(two, "power_of_two", draws) for draws in DRAWS} == {1}  # both always compared


def test_power_of_two_on_a_tie_takes_the_first_pick_so_equal_replicas_split_evenly() -> None:
    picks = Counter(choose([L(0), L(1)], "power_of_two", draws) for draws in DRAWS)
    assert picks == {0: 50, 1: 50}


@pytest.mark.parametrize("policy", ["least_loaded", "power_of_two"])
def test_unhealthy_replicas_are_left_out(policy: str) -> None:
    loads = [L(0, healthy=False), L(1, waiting=40), L(2, healthy=False)]
    assert {choose(loads, policy, draws) for draws in DRAWS} == {1}  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["least_loaded", "power_of_two"])
def test_when_all_are_unhealthy_all_are_candidates(policy: str) -> None:
    loads = [L(0, healthy=False, waiting=9), L(1, healthy=False)]
    assert {choose(loads, policy, draws) for draws in DRAWS} == {1}  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["least_loaded", "power_of_two"])
def test_kv_usage_breaks_a_tie(policy: str) -> None:
    loads = [L(0, running=2, kv_usage=0.6), L(1, running=2, kv_usage=0.2)]
    assert {choose(loads, policy, draws) for draws in DRAWS} == {1}  # type: ignore[arg-type]


def test_indices_are_the_replicas_own_and_edge_draws_stay_in_range() -> None:
    loads = [L(4, waiting=1), L(7)]  # e.g. a retry that left replica 5 out
    assert choose(loads, "power_of_two", (1.0, 1.0)) == 7
    assert choose(loads, "least_loaded", (1.0, -3.0)) == 7
    assert choose([L(9, healthy=False)], "power_of_two", (0.5, 0.5)) == 9
    with pytest.raises(ValueError):
        choose([], "least_loaded", (0.0, 0.0))


# ---- what the probe reads --------------------------------------------------------------

VLLM_PAGE = """# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting_by_reason{reason="capacity"} 99.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="m"} 1.0
"""


def test_parse_vllm_sums_series_and_takes_the_fullest_kv_cache() -> None:
    assert parse_load(VLLM_PAGE) == EngineLoad(waiting=5.0, running=4.0, kv_usage=0.75)


def test_parse_older_vllm_and_triton_names() -> None:
    old = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\nvllm:num_requests_running 1\n'
    assert parse_load(old) == EngineLoad(running=1.0, kv_usage=0.5)
    triton = (
        "# TYPE nv_inference_pending_request_count gauge\n"
        'nv_inference_pending_request_count{model="a",version="1"} 2\n'
        'nv_inference_pending_request_count{model="b",version="1"} 5\n'
    )
    assert parse_load(triton) == EngineLoad(waiting=7.0)


def test_parse_keeps_a_series_whose_label_holds_a_line_separator() -> None:
    # The exposition format ends lines at "\n" alone; a served model's name may hold U+2028.
    page = 'vllm:num_requests_waiting{model_name="a\u2028b"} 2\nvllm:num_requests_running 1\n'
    assert parse_load(page) == EngineLoad(waiting=2.0, running=1.0)


def test_parse_missing_or_malformed_metrics_gives_no_figures() -> None:
    assert parse_load("# nothing here\nprocess_cpu_seconds_total 3\n") == NO_FIGURES
    assert parse_load("vllm:num_requests_waiting{oops 1\n") == NO_FIGURES
    assert parse_load("vllm:num_requests_waiting NaN\n") == NO_FIGURES


def test_a_turnout_gateway_can_be_a_replica_through_its_queue_depth() -> None:
    stats = {"fp32": {"queue_depth": 3.0, "generated_tokens": 10.0}, "int8": {"queue_depth": 4.0}}
    metrics = GatewayMetrics(engine_stats=lambda: stats)
    from prometheus_client import generate_latest

    assert parse_load(generate_latest(metrics.registry).decode()) == EngineLoad(waiting=7.0)


def test_metrics_url_is_the_server_root() -> None:
    assert metrics_url("http://h:8001/v1") == "http://h:8001/metrics"
    assert metrics_url("http://h:8001/v1/", "/prom") == "http://h:8001/prom"
    assert metrics_url("http://h/engine/v1") == "http://h/engine/metrics"


def test_settings_default_to_one_server_and_refuse_duplicate_replicas() -> None:
    plain = OpenAIHttpSettings.model_validate({"base_url": "http://a:1/v1", "model": "m"})
    assert plain.replicas == () and plain.balance.policy == "power_of_two"
    assert plain.balance.probe_interval_s == 1.0
    with pytest.raises(ValueError, match="different servers"):
        OpenAIHttpSettings.model_validate(
            {"base_url": "http://a:1/v1", "model": "m", "replicas": ["http://a:1/v1/"]}
        )
    with pytest.raises(ValueError, match="extra"):
        OpenAIHttpSettings.model_validate(
            {"base_url": "http://a:1/v1", "model": "m", "balance": {"policy": "least_loaded", "x": 1}}
        )


def test_prefix_affinity_prefers_the_named_replica_while_it_is_not_overloaded() -> None:
    names = [f"http://10.0.0.{i}:8000/v1" for i in range(4)]
    busy = [L(i, name=name, in_flight=9 if i == 2 else 0) for i, name in enumerate(names)]
    assert choose(busy, "prefix_affinity", (0.0, 0.0), names[2]) == 2  # 9 more than the least: its own
    hot = [L(i, name=name, in_flight=10 if i == 2 else 0) for i, name in enumerate(names)]
    assert choose(hot, "prefix_affinity", (0.6, 0.0), names[2]) != 2  # 10 more: balanced by load
    assert choose(hot, "prefix_affinity", (0.6, 0.0), names[2], max_imbalance=11) == 2
    down = [L(i, healthy=i != 2, name=name) for i, name in enumerate(names)]
    assert choose(down, "prefix_affinity", (0.6, 0.0), names[2]) != 2
    assert choose(busy, "prefix_affinity", (0.6, 0.0), "http://elsewhere/v1") != 2  # gone: by load
    idle = [L(i, name=name) for i, name in enumerate(names)]
    assert Counter(choose(idle, "prefix_affinity", d, None) for d in DRAWS) == Counter(
        choose(idle, "power_of_two", d) for d in DRAWS
    )  # nothing preferred: power of two


def test_a_prompts_start_is_read_as_chained_blocks_and_the_index_finds_its_longest_run() -> None:
    from backends.base import GenerateRequest, SamplingParams
    from serving.routing.prefix_index import BLOCK_CHARS, PrefixIndex, prompt_blocks, prompt_start

    def chat(*contents: str) -> GenerateRequest:
        roles = ["system", "user", "assistant", "user"]
        messages = [{"role": roles[i % 4], "content": c} for i, c in enumerate(contents)]
        return GenerateRequest("chat", SamplingParams(), messages=messages)

    def blocks(request: GenerateRequest, chars: int = 8192) -> list[bytes]:
        return prompt_blocks(prompt_start(request, chars))

    system = "You are a careful assistant who answers in one line. " * 10  # 530 characters: 4 blocks
    first, other = blocks(chat(system, "question one")), blocks(chat(system, "a different question"))
    assert len(first) == len(other) == 4 and first == other  # the questions are in no whole block yet
    turn_two = blocks(chat(system, "question one", "an answer " * 20, "question two"))
    assert turn_two[:4] == first and len(turn_two) > 4  # a later turn begins with the earlier ones
    assert blocks(chat("Another system prompt entirely. " * 20, "question one"))[0] != first[0]
    assert len(blocks(chat(system, "question one"), chars=300)) == 300 // BLOCK_CHARS
    index = PrefixIndex(capacity=64)
    assert index.match(first) is None
    index.record(first, "a")
    index.record(turn_two[:6], "b")  # a longer run went elsewhere since
    assert index.match(turn_two) == "b" and index.match(first) == "b"  # a block moves with its last taker
    index.record(blocks(chat("x" * 256)), "c")
    assert index.match(blocks(chat("x" * 256 + "y" * 9000))) is None  # 2 of 64 blocks: too little
    assert index.match(blocks(chat("x" * 256 + "y" * 1000))) == "c"  # 2 of 9: enough
    small = PrefixIndex(capacity=5)
    small.record(turn_two[:6], "a")
    assert len(small) == 5 and small.match(turn_two[:1]) is None  # the least recently used went
    completion = GenerateRequest("completion", SamplingParams(), prompt="the red fox " * 30)
    assert (
        len(blocks(completion)) == 2
        and blocks(GenerateRequest("completion", SamplingParams(), prompt="")) == []
    )
    ids = GenerateRequest("completion", SamplingParams(), prompt_ids=list(range(100)))
    assert prompt_start(ids, 20) == "ids:0,1,2,3,4,5,6,7,"
