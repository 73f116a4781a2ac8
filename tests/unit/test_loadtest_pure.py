"""The pure parts of the load tests: shapes, scenarios, statistics, the knee, the reports."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from loadtests.report import compare_table, summary_markdown
from loadtests.runner import _progress
from loadtests.scenarios import Scenario, spawn_rate, users_at
from loadtests.shapes import ShapeError, parse_shape
from loadtests.stats import (
    Record,
    Slo,
    error_detail,
    failure_kind,
    knee,
    per_variant,
    percentile,
    stats,
    step_figures,
    truncated,
)


def record(t: float, variant: str = "a", ttft: float | None = 10.0, error: str | None = None) -> Record:
    return Record(t, variant, 200 if error is None else 500, error, 20.0, ttft, 1.0, 10)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1.0)) == (50.0, 99.0, 100.0)
    assert percentile([], 0.5) is None and percentile([7.0], 0.99) == 7.0
    # ceil(q * n): the rounding it had put p95 of 1..19 at 18, p99 of 1..60 at 59, p90 of 1..9 at 8
    assert percentile([float(v) for v in range(1, 20)], 0.95) == 19.0
    assert percentile([float(v) for v in range(1, 61)], 0.99) == 60.0
    assert percentile([float(v) for v in range(1, 10)], 0.9) == 9.0
    assert percentile([float(v) for v in range(1, 21)], 0.95) == 19.0
    assert percentile([float(v) for v in range(1, 101)], 0.07) == 7.0  # 0.07 * 100 = 7.000000000000001
    assert percentile([float(v) for v in range(1, 4)], 0.0) == 1.0


def test_stats_count_errors_by_kind_and_throughput_from_successes() -> None:
    rows = [record(0.1), record(0.2), record(0.3, error="http_429"), record(0.4, "b", error="stream_error")]
    block = stats(rows, 2.0)
    assert (block["requests"], block["errors"], block["req_per_s"]) == (4, 2, 1.0)
    assert block["errors_by_kind"] == {"http_429": 1, "stream_error": 1}
    assert block["output_tokens"] == 20 and block["output_tokens_per_s"] == 10.0
    assert block["ttft_ms"]["p50"] == 10.0 and block["request_tokens_per_s"]["p50"] == 500.0
    assert set(per_variant(rows, 2.0)) == {"a", "b"} and per_variant(rows, 2.0)["b"]["errors"] == 1


def test_a_step_holds_its_slo_only_under_both_bounds() -> None:
    slo = Slo(p95_ttft_ms=15.0, max_error_rate=0.1)
    assert step_figures([record(t / 10) for t in range(20)], 4, 2.0, slo)["ok"]
    slow = [record(t / 10, ttft=50.0) for t in range(20)]
    assert not step_figures(slow, 4, 2.0, slo)["ok"]
    failing = [record(t / 10, error="timeout" if t % 4 == 0 else None) for t in range(20)]
    assert not step_figures(failing, 4, 2.0, slo)["ok"]
    assert not step_figures([], 4, 2.0, slo)["ok"]
    steps = [{"req_per_s": r, "ok": ok} for r, ok in ((10.0, True), (14.0, True), (12.0, False))]
    assert knee(steps, slo)["max_sustainable_rps"] == 14.0


def test_scenarios_are_bounded_in_time_and_users() -> None:
    steady = Scenario("steady", 8, 10.0)
    assert users_at(steady, 0) == users_at(steady, 9.9) == 8 and users_at(steady, 10.0) is None
    ramp = Scenario("ramp", 7, 100.0, step_users=2, step_s=5.0)
    assert [users_at(ramp, t) for t in (0, 5, 10, 15, 20)] == [2, 4, 6, 7, None]
    spike = Scenario("spike", 16, 30.0)
    assert [users_at(spike, t) for t in (1, 15, 25, 30)] == [4, 16, 4, None]


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario("spike", 16, 30.0),
        Scenario("spike", 3, 9.0),
        Scenario("ramp", 40, 60.0, 4, 5.0),
        Scenario("steady", 1, 5.0),
    ],
    ids=["spike-16", "spike-3", "ramp-40", "steady-1"],
)
def test_every_change_of_users_is_made_within_one_tick(scenario: Scenario) -> None:
    """Locust starts and stops users at the spawn rate: a spike must fall as it rose, at once."""
    wanted = [users_at(scenario, t) or 0 for t in range(int(scenario.duration_s) + 1)]
    largest_change = max(abs(b - a) for a, b in zip([0, *wanted], wanted, strict=False))
    assert spawn_rate(scenario) >= largest_change


def test_shapes_fixed_uniform_and_trace(tmp_path: Path) -> None:
    rng = random.Random(1)
    assert parse_shape("8", "16").draw(rng) == (8, 16)
    uniform = parse_shape("4-8", "16")
    assert uniform.kind == "uniform" and all(4 <= uniform.draw(rng)[0] <= 8 for _ in range(50))
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"prompt_tokens": 3, "max_tokens": 5}\n\n{"prompt_tokens": 9.0, "max_tokens": 1}\n')
    assert {parse_shape("1", "1", trace).draw(rng) for _ in range(50)} == {(3, 5), (9, 1)}  # 9.0 is whole
    trace.write_text('{"prompt_tokens": 3}\n')
    with pytest.raises(ShapeError, match=r"trace\.jsonl:1"):
        parse_shape("1", "1", trace)
    with pytest.raises(ShapeError, match="max tokens"):
        parse_shape("1", "x")


def test_a_recorded_trace_whose_prompts_hold_line_separators_reads_line_by_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    line = '{"prompt": "a\u2028b\u2029c\x85d", "prompt_tokens": 3, "max_tokens": 5}'
    trace.write_text(line + "\r\n" + line + "\n", encoding="utf-8")
    assert parse_shape("1", "1", trace).draw(random.Random(1)) == (3, 5)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"prompt_tokens": 4, "max_tokens": 0}',
            "max_tokens must be a whole number >= 1, got 0",
        ),  # every request a 400
        ('{"prompt_tokens": -1, "max_tokens": 4}', "prompt_tokens must be a whole number >= 0, got -1"),
        ('{"prompt_tokens": 4, "max_tokens": 2.5}', "max_tokens must be a whole number >= 1, got 2.5"),
        ('{"prompt_tokens": true, "max_tokens": 4}', "prompt_tokens must be a whole number >= 0, got True"),
        ('{"prompt_tokens": "4", "max_tokens": 4}', "prompt_tokens must be a whole number >= 0, got '4'"),
    ],
)
def test_a_trace_is_held_to_the_flags_rules_line_by_line(tmp_path: Path, line: str, message: str) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"prompt_tokens": 3, "max_tokens": 5}\n' + line + "\n")
    with pytest.raises(ShapeError, match=r"trace\.jsonl:2: ") as refused:
        parse_shape("1", "1", trace)
    assert message in str(refused.value)
    with pytest.raises(ShapeError, match="cannot read it"):
        parse_shape("1", "1", tmp_path / "missing.jsonl")


def test_reports_render_every_run_and_the_knee() -> None:
    rows = [record(t / 10) for t in range(10)]
    summary = {
        "route": "r", "scenario": "ramp", "users": 4, "duration_s": 1.0, "target": "http://x",
        "endpoint": "chat", "stream": True, "started_at": "now",
        "overall": stats(rows, 1.0), "per_variant": per_variant(rows, 1.0),
        "knee": knee([step_figures(rows, 2, 1.0, Slo(50, 0.01))], Slo(50, 0.01)),
    }  # fmt: skip
    text = summary_markdown(summary)
    assert "| all | 10 | 0 | 10.0 |" in text and "| a | 10 |" in text
    assert "Max sustainable rate: **10.0 req/s**" in text
    assert "| one |" in compare_table([("one", summary), ("two", summary)])
    embedded = {**summary, "endpoint": "embeddings", "knee": None}
    embedded["overall"] = {**summary["overall"], "prompt_tokens_per_s": 123.0}
    assert "| all | 10 | 0 | 10.0 | 123 in |" in summary_markdown(embedded)  # not its 0 output tokens
    both = compare_table([("chat", summary), ("embed", embedded)])
    assert "| embed | 10 | 0 | 10.0 | 123 in |" in both and "'in': input tokens embedded" in both


def test_a_run_fails_its_ci_gate_above_the_error_bound_except_a_ramp() -> None:
    from loadtests.cli import run_failed

    def overall(requests: int, errors: int) -> dict[str, object]:
        return {
            "requests": requests,
            "errors": errors,
            "errors_by_kind": {"http_502": errors} if errors else {},
        }

    assert run_failed(overall(1000, 10), "steady", 0.01) is None  # 1.0%: at the bound
    failed = run_failed(overall(1000, 11), "steady", 0.01)
    assert failed == "11 of 1000 requests failed (1.1%: http_502 11), above --slo-max-error-rate 1.0%"
    assert run_failed(overall(1000, 11), "spike", 0.01) is not None
    assert run_failed(overall(1000, 11), "soak", 0.05) is None
    assert run_failed(overall(1000, 500), "ramp", 0.01) is None  # past the knee is the ramp's finding
    assert run_failed(overall(10, 10), "ramp", 0.01) == "every request failed (http_502 10)"
    assert run_failed(overall(0, 0), "steady", 0.01) == "no request finished"
    went_down = {"requests": 5000, "errors": 14, "errors_by_kind": {"connection": 12, "http_502": 2}}
    assert run_failed(went_down, "soak", 0.01) == (
        "12 of 5000 requests got no answer at all (connection refused or reset: the target went down "
        "or dropped them; errors: connection 12, http_502 2)"
    )
    assert run_failed(went_down, "ramp", 0.01) is None


def test_failures_are_told_apart_so_only_a_gone_gateway_reads_as_one() -> None:
    import json
    from http.client import RemoteDisconnected

    assert failure_kind(TimeoutError("timed out")) == "timeout"
    assert failure_kind(ConnectionRefusedError(111, "refused")) == "connection"
    assert failure_kind(RemoteDisconnected("closed")) == "connection"  # an HTTPException
    assert failure_kind(json.JSONDecodeError("bad", "x", 0)) == "bad_response"  # an answer, malformed
    assert failure_kind(KeyError("usage")) == "bad_response"
    # A whole answer cut short comes back as the bytes that arrived, no error: its length says so.
    assert truncated(18, "100") and not truncated(100, "100") and not truncated(18, None)


def test_the_summary_records_how_requests_were_asked(tmp_path: Path) -> None:
    from loadtests.runner import LoadTest, request_facts

    asked = LoadTest("http://x", "r", tmp_path, Scenario("steady", 4, 20.0), parse_shape("4-8", "32"),
                     variant="int4", temperature=0.5)  # fmt: skip
    assert request_facts(asked) == {
        "shape": "uniform", "prompt_tokens": [4, 8], "max_tokens": [32, 32], "trace": None,
        "temperature": 0.5, "variant": "int4", "requested_duration_s": 20.0,
    }  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"prompt_tokens": 3, "max_tokens": 5}\n')
    traced = request_facts(
        LoadTest("http://x", "r", tmp_path, Scenario("steady", 4, 20.0), parse_shape("1", "1", trace))
    )
    assert traced["trace"]["shapes"] == 1 and len(traced["trace"]["sha256"]) == 16
    assert traced["prompt_tokens"] is None and traced["max_tokens"] is None


def test_a_ramp_step_longer_than_the_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to run, judge no step and report "Max sustainable rate: 0.0 req/s" with exit 0."""
    from serving.cli import main

    args = ["loadtest", "--target", "http://127.0.0.1:9", "--route", "x", "--scenario", "ramp",
            "--duration", "5s", "--out", str(tmp_path)]  # fmt: skip
    assert main([*args, "--step", "10s"]) == 2
    assert "--step 10s is longer than --duration 5s" in capsys.readouterr().err
    assert main([*args, "--step", "5s"]) == 1  # as long as the run: one step, judged; here no target
    assert "cannot reach http://127.0.0.1:9" in capsys.readouterr().err


def test_runs_of_one_route_in_like_named_folders_get_labels_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both used to be "ab (fp32)", drawn as one bar."""
    from loadtests.report import chart, compare_chart, run_labels

    rows = [record(t / 10) for t in range(10)]
    summary = {"route": "ab", "overall": stats(rows, 1.0)}
    runs = [(Path("monday/fp32"), summary), (Path("tuesday/fp32"), summary), (Path("x/int8"), summary)]
    assert run_labels(runs) == ["ab (monday/fp32)", "ab (tuesday/fp32)", "ab (int8)"]
    (tmp_path / "monday").mkdir()
    monkeypatch.chdir(tmp_path / "monday")  # given from inside its parent: it was "(/fp32)"
    relative = [(Path("fp32"), summary), (Path("../tuesday/fp32"), summary)]
    assert run_labels(relative) == ["ab (monday/fp32)", "ab (tuesday/fp32)"]
    assert run_labels([(Path("a/fp32"), summary)] * 2) == ["ab (a/fp32) #1", "ab (a/fp32) #2"]
    pytest.importorskip("matplotlib")
    figure = chart(list(zip(run_labels(runs), [summary] * 3, strict=True)))
    throughput = figure.axes[1]
    assert len(throughput.patches) == 3  # one bar per run
    assert [t.get_text() for t in throughput.get_xticklabels()] == run_labels(runs)
    assert {t.get_rotation() for t in throughput.get_xticklabels()} == {20.0}
    compare_chart(list(zip(run_labels(runs), [summary] * 3, strict=True)), tmp_path / "compare.png")
    assert (tmp_path / "compare.png").read_bytes().startswith(b"\x89PNG")


def test_the_progress_line_rates_a_young_run_over_the_time_it_has_had(tmp_path: Path) -> None:
    """100 requests in a run's first second are 100 req/s, not 50 (the rate is over the last 2 s)."""
    records = tmp_path / "records.jsonl"
    rows = [{"t": i / 100, "variant": "v", "status": 200, "error": None, "latency_ms": 1.0,
             "ttft_ms": 1.0, "itl_ms": None, "output_tokens": 1} for i in range(1, 101)]  # fmt: skip
    records.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = io.StringIO()
    _progress(records, 0, [], 1.0, 6.0, out)
    assert "100 requests,  100.0 req/s" in out.getvalue()


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b'{"error": {"message": "too long", "type": "invalid_request_error"}}', "too long"),
        ({"error": {"message": "upstream cut"}}, "upstream cut"),  # an SSE error event
        ({"error": "plain"}, "plain"),
        (b"<html>\n  Bad   Gateway</html>", "<html> Bad Gateway</html>"),
        (b"", None),
        ("ConnectionRefusedError: [Errno 111]", "ConnectionRefusedError: [Errno 111]"),
        ("x" * 500, "x" * 300),
    ],
)
def test_error_detail_is_what_the_answer_said(answer: object, said: str | None) -> None:
    assert error_detail(answer) == said


def test_a_runs_errors_keep_what_each_kind_first_said() -> None:
    from loadtests.cli import run_failed

    def failed(t: float, kind: str, detail: str) -> Record:
        return Record(t, "v", 400, kind, 1.0, None, None, 0, detail=detail)

    ok = Record(0.5, "v", 200, None, 1.0, 1.0, None, 3, prompt_tokens=12)
    records = [
        failed(0.1, "http_400", "too long"),
        failed(0.2, "http_400", "other"),
        failed(0.3, "timeout", "t"),
    ]
    overall = stats([*records, ok], 1.0)
    assert overall["error_examples"] == {"http_400": "too long", "timeout": "t"}
    assert overall["prompt_tokens_mean"] == 12.0
    why = run_failed(overall, "steady", 0.01)
    assert why is not None and why.endswith("; the first http_400 said: too long")
