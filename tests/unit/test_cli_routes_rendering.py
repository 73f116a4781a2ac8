"""``turnout routes``: what it prints (tables, history, audit log, spec diffs, shadow reports).

Pure functions of ``serving.cli_routes_pure`` fed the admin API's answers; the flows that fetch
them are tested in ``test_cli_routes.py``.
"""

from __future__ import annotations

from serving.cli_routes_pure import (
    audit_table,
    describe_primaries,
    history_table,
    parse_weights,
    render_table,
    routes_table,
    set_weights,
    shadow_report,
    spec_diff,
)
from tests.unit.route_specs import AB, rv, spec_of


def test_describe_primaries() -> None:
    assert describe_primaries(AB) == "a 70%, b 30%"
    assert describe_primaries(spec_of(targets=[{"variant": "a", "weight": 2}, {"variant": "b"}])) == (
        "a 66.7%, b 33.3%"
    )
    assert describe_primaries(spec_of(targets=[{"variant": "a", "weight": 0}, {"variant": "b"}])) == (
        "a 0%, b 100%"
    )
    stored_before_the_finite_rule = spec_of(
        targets=[{"variant": "a", "weight": 1e308}, {"variant": "b", "weight": 1e308}]
    )
    assert describe_primaries(stored_before_the_finite_rule) == "a weight 1e+308, b weight 1e+308"


def test_render_table_aligns_columns() -> None:
    text = render_table(["a", "long header"], [["wide cell", "x"], ["y", ""]])
    lines = text.splitlines()
    assert lines[0] == "a          long header"
    assert lines[1] == "---------  -----------"
    assert lines[2] == "wide cell  x"
    assert lines[3] == "y"


def test_routes_table() -> None:
    shadowed = spec_of(
        targets=[{"variant": "a"}], shadows=[{"variant": "s", "sample_rate": 0.25}], fallbacks=["f"]
    )
    text = routes_table([rv(AB, 3), rv(shadowed, 1, route="other")])
    header, _, first, second = text.splitlines()
    assert header.split() == ["route", "version", "primaries", "shadows", "fallbacks"]
    assert first.split() == ["chat", "3", "a", "70%,", "b", "30%", "-", "-"]
    assert second.split() == ["other", "1", "a", "100%", "s@0.25", "f"]


def test_history_table() -> None:
    versions = [rv(AB, 1, action="seed", reason="from config"), rv(AB, 2, reason=None, created_at=86400.0)]
    lines = history_table(versions).splitlines()
    assert lines[0].split() == ["version", "action", "author", "time", "reason"]
    assert lines[2].split() == ["1", "seed", "cli:me", "1970-01-01", "00:00:00Z", "from", "config"]
    assert "1970-01-02 00:00:00Z" in lines[3]


def test_audit_table() -> None:
    entries = [
        {"at": 86400.0, "actor": "ops", "action": "set", "route": "chat", "version": 3, "detail": "a\nb"},
        {
            "at": 0.0,
            "actor": "cli:root",
            "action": "key-create",
            "route": None,
            "version": None,
            "detail": "name=ops role=admin " + "x" * 100,
        },
    ]
    lines = audit_table(entries).splitlines()
    assert lines[0].split() == ["time", "actor", "action", "route", "version", "detail"]
    assert lines[2].split() == ["1970-01-02", "00:00:00Z", "ops", "set", "chat", "3", "a", "b"]
    assert lines[3].split()[2:6] == ["cli:root", "key-create", "-", "-"]
    assert lines[3].endswith("…") and len(lines[3].split("-  ", 2)[-1].strip()) <= 80


def test_spec_diff() -> None:
    new = set_weights(AB, parse_weights(["a=50", "b=50"])).model_dump(mode="json")
    text = spec_diff(AB.model_dump(mode="json"), new, "chat@v1", "chat@v2")
    assert text.startswith("--- chat@v1\n+++ chat@v2\n")
    assert '-      "weight": 70.0' in text and '+      "weight": 50.0' in text
    assert spec_diff(new, new, "x", "y") == ""


def test_shadow_report() -> None:
    difference = {
        "request_id": "r1",
        "shadow": "s",
        "similarity": 0.5,
        "latency_delta_ms": 12.5,
        "primary": {"status": 200, "text": "12", "latency_ms": 3.0},
        "shadow_answer": {"status": 200, "text": "13", "latency_ms": 15.5},
    }
    data = {
        "route": "chat",
        "shadows": {"s": {"sent": 10, "exact_match_rate": 0.875, "errors": 0}},
        "recent_differences": [difference],
    }
    text = shadow_report(data)
    assert text.splitlines()[0].split() == ["variant", "sent", "exact_match_rate", "errors"]
    assert text.splitlines()[2].split() == ["s", "10", "0.875", "0"]
    assert "recent differences: 1" in text
    assert "similarity 0.5" in text and 'primary "12"' in text and 'shadow  "13"' in text
    assert "no shadow results" in shadow_report({"route": "chat", "shadows": {}})
    assert "gateway replica" not in text


def test_shadow_report_of_several_gateway_replicas_names_them() -> None:
    difference = {"shadow": "s", "similarity": 0.0, "gateway_replica": "x7k2"}
    data = {
        "route": "chat",
        "shadows": {"s": {"sent": 10}},
        "recent_differences": [difference],
        "gateway_replicas": {"x7k2": {"sent": 6, "compared": 6}, "q9w1": {"sent": 4, "compared": 4}},
    }
    text = shadow_report(data)
    assert "over 2 gateway replicas: x7k2 sent 6, q9w1 sent 4" in text
    assert "similarity 0, latency - ms vs primary, status None/None, gateway replica x7k2" in text
