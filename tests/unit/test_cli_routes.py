"""``turnout routes``: argument parsing, spec edits, and the read-modify-write flows.

The flows run against ``httpx.MockTransport`` (a fake admin API in this process), so they
check the requests the CLI sends without a gateway; the end-to-end test lives elsewhere. What
the CLI prints is tested in ``test_cli_routes_rendering.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from serving.cli import build_parser
from serving.cli_routes import run
from serving.cli_routes_pure import (
    EditError,
    abort_canary,
    add_shadow,
    describe_primaries,
    load_spec_file,
    parse_steps,
    parse_weights,
    promote_canary,
    remove_shadow,
    set_weights,
    slo_gates,
    stable_target,
    start_canary,
)
from serving.routing.spec import RouteSpec, WeightedTarget, route_name_problem
from tests.unit.route_specs import AB, rv, spec_of

# --- parsing -------------------------------------------------------------------------------------


def test_parse_weights_keeps_order() -> None:
    targets = parse_weights(["b=30", "a=70.5", "c=0"])
    assert targets == [
        WeightedTarget(variant="b", weight=30),
        WeightedTarget(variant="a", weight=70.5),
        WeightedTarget(variant="c", weight=0),
    ]


@pytest.mark.parametrize("bad", [["a"], ["a="], ["=5"], ["a=x"], ["a=-1"], [], ["a=inf", "b=1"], ["a=nan"]])
def test_parse_weights_rejects(bad: list[str]) -> None:
    with pytest.raises(EditError):
        parse_weights(bad)


def test_a_weight_that_is_not_a_number_names_the_pair() -> None:
    with pytest.raises(EditError, match=r"^b=abc: not a number: 'abc'$"):
        parse_weights(["a=70", "b=abc"])


def test_a_weight_that_is_not_finite_says_so() -> None:
    """``inf`` once crashed the CLI in JSON encoding; ``nan`` was called negative."""
    with pytest.raises(EditError, match=r"^a=inf: must be a finite number, got 'inf'$"):
        parse_weights(["a=inf", "b=1"])
    with pytest.raises(EditError, match="must be a finite number"):
        parse_weights(["a=nan"])


def test_parse_steps() -> None:
    assert parse_steps("5, 25,50,100") == [5.0, 25.0, 50.0, 100.0]
    with pytest.raises(EditError):
        parse_steps("5,x")
    with pytest.raises(EditError):
        parse_steps(",")


# --- spec edits ----------------------------------------------------------------------------------


def test_set_weights_replaces_targets_and_validates() -> None:
    edited = set_weights(AB, parse_weights(["a=50", "b=50"]))
    assert [(t.variant, t.weight) for t in edited.targets] == [("a", 50), ("b", 50)]
    with pytest.raises(EditError, match="twice"):
        set_weights(AB, parse_weights(["a=50", "a=50"]))
    with pytest.raises(EditError, match="positive"):
        set_weights(AB, parse_weights(["a=0"]))


def test_shadows_add_update_remove() -> None:
    one = add_shadow(AB, "c", 0.1, 30)
    assert [(s.variant, s.sample_rate) for s in one.shadows] == [("c", 0.1)]
    updated = add_shadow(one, "c", 0.5, 10)
    assert [(s.variant, s.sample_rate, s.timeout_s) for s in updated.shadows] == [("c", 0.5, 10)]
    assert remove_shadow(updated, "c").shadows == []
    with pytest.raises(EditError, match="not a shadow"):
        remove_shadow(AB, "c")
    with pytest.raises(EditError, match="also a primary"):
        add_shadow(AB, "a", 0.1, 30)
    with pytest.raises(EditError, match="sample_rate"):
        add_shadow(AB, "c", 1.5, 30)


def test_gates_from_flags() -> None:
    gates = slo_gates(max_error_rate=0.05, max_p95_latency_ms=800, max_latency_ratio=1.5)
    assert [(g.metric, g.max, g.max_ratio_to_stable) for g in gates] == [
        ("error_rate", 0.05, None),
        ("p95_latency_ms", 800, 1.5),
    ]
    assert slo_gates(max_latency_ratio=2)[0].max is None
    assert slo_gates() == []
    with pytest.raises(EditError, match="at least one gate"):
        start_canary(AB, "c", [10, 100], 50, 30, [])
    with pytest.raises(EditError, match="error_rate"):
        slo_gates(max_error_rate=-1)
    with pytest.raises(EditError, match=r"a fraction of requests \(0.02 = 2%\), at most 1; got 2"):
        slo_gates(max_error_rate=2)  # meant as 2%: a gate that could never break


ONLY_A = spec_of(targets=[{"variant": "a"}], shadows=[{"variant": "s", "sample_rate": 1.0}])


def test_a_canary_is_refused_on_a_split_or_for_a_shadow_naming_the_fix() -> None:
    gates = slo_gates(max_error_rate=0.05)
    split = r"splits its traffic \(a 70, b 30\).*`turnout routes weights NAME a=1`"
    with pytest.raises(EditError, match=split):
        start_canary(AB, "c", [10, 100], 50, 30, gates)
    with pytest.raises(EditError, match=r"'s' is a shadow.*`turnout routes shadow chat --remove s`"):
        start_canary(ONLY_A, "s", [10, 100], 50, 30, gates, route="chat")
    muted = spec_of(targets=[{"variant": "a", "weight": 1}, {"variant": "b", "weight": 0}])
    assert start_canary(muted, "c", [10, 100], 50, 30, gates).canary is not None  # b gets nothing


def test_canary_starts_from_the_single_target_and_aborts_to_it() -> None:
    assert stable_target(AB) == "a"
    assert stable_target(spec_of(targets=[{"variant": "x"}])) == "x"
    gates = slo_gates(max_error_rate=0.05)
    running = start_canary(ONLY_A, "c", [10, 100], 50, 30, gates)
    assert running.canary is not None and running.canary.stable == "a" and running.canary.canary == "c"
    assert running.canary.steps == [10, 100] and running.canary.min_requests == 50
    assert describe_primaries(running) == "a 90%, c 10% (canary step 1/2)"
    with pytest.raises(EditError, match="already running"):
        start_canary(running, "d", [10, 100], 50, 30, gates)
    with pytest.raises(EditError, match="abort it first"):
        set_weights(running, parse_weights(["a=1"]))
    aborted, canary = abort_canary(running)
    assert canary == "c" and aborted.canary is None
    assert aborted.targets == [WeightedTarget(variant="a")]
    with pytest.raises(EditError, match="no canary"):
        abort_canary(aborted)


def test_canary_plan_errors_are_local() -> None:
    gates = slo_gates(max_error_rate=0.05)
    with pytest.raises(EditError, match="increase strictly"):
        start_canary(ONLY_A, "c", [50, 10], 50, 30, gates)
    with pytest.raises(EditError, match="differ"):
        start_canary(ONLY_A, "a", [5, 100], 50, 30, gates)


def test_load_spec_file_yaml_json_and_show_output(tmp_path: Path) -> None:
    yaml_file = tmp_path / "spec.yaml"
    yaml_file.write_text("targets:\n  - {variant: a, weight: 3}\nfallbacks: [b]\n")
    assert load_spec_file(yaml_file).fallbacks == ["b"]
    shown = tmp_path / "shown.json"
    shown.write_text(json.dumps(rv(AB, 4)))
    assert load_spec_file(shown) == AB
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets: []\n")
    with pytest.raises(EditError, match=r"bad.yaml: invalid route spec: targets"):
        load_spec_file(bad)
    with pytest.raises(EditError, match="cannot read"):
        load_spec_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # the CLI's flag is --rate; pydantic said "Extra inputs are not permitted"
        (
            "shadows: [{variant: b, rate: 0.5}]\n",
            "shadows.0.rate: unknown field; did you mean 'sample_rate'?",
        ),
        ("targets: {variant: a}\n", "targets: must be a list"),  # pydantic: "a valid list"
        ("targets: [a]\n", "targets.0: must be an object"),  # pydantic: "...or instance of WeightedTarget"
    ],
)
def test_a_spec_file_mistake_names_what_was_meant(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text if text.startswith("targets") else "targets: [{variant: a}]\n" + text)
    with pytest.raises(EditError) as refused:
        load_spec_file(path)
    assert str(refused.value) == f"{path}: invalid route spec: {said}"


# --- flows against a fake admin API --------------------------------------------------------------


class FakeAdmin:
    """Just enough of ``/admin/routes`` to check what the CLI sends."""

    def __init__(self, routes: dict[str, list[RouteSpec]]) -> None:
        self.routes = routes
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        parts = request.url.path.strip("/").split("/")
        name = parts[2] if len(parts) > 2 else ""
        versions = self.routes.get(name, [])
        if request.method == "GET" and len(parts) == 4 and parts[3] == "history":
            return httpx.Response(
                200, json={"route": name, "versions": [rv(s, i + 1) for i, s in enumerate(versions)]}
            )
        if request.method == "GET" and len(parts) == 3:
            if not versions:
                return self.error(404, f"no route '{name}'")
            return httpx.Response(200, json=rv(versions[-1], len(versions)))
        if request.method == "PUT":
            match = request.headers.get("if-match")
            if match is not None and match != f'"{len(versions)}"':
                return self.error(409, "route 'chat' is at version 2, not 1", "version_conflict")
            versions.append(RouteSpec.model_validate(json.loads(request.content)["spec"]))
            self.routes[name] = versions
            return httpx.Response(200, json=rv(versions[-1], len(versions)))
        return self.error(405, "not in the fake")

    @staticmethod
    def error(status: int, message: str, code: str | None = None) -> httpx.Response:
        return httpx.Response(
            status, json={"error": {"message": message, "type": "x", "param": None, "code": code}}
        )


def turnout_routes(fake: FakeAdmin, *argv: str) -> int:
    args = build_parser().parse_args(["routes", "--token", "t0k", *argv])
    return run(args, transport=httpx.MockTransport(fake))


def test_weights_reads_then_writes_with_if_match(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeAdmin({"chat": [AB, AB]})
    assert turnout_routes(fake, "weights", "chat", "b=40", "a=60", "--reason", "rebalance") == 0
    get, put = fake.requests
    assert get.method == "GET" and put.method == "PUT" and put.url.path == "/admin/routes/chat"
    assert put.headers["if-match"] == '"2"' and put.headers["authorization"] == "Bearer t0k"
    body = json.loads(put.content)
    assert body["reason"] == "rebalance"
    assert [t["variant"] for t in body["spec"]["targets"]] == ["b", "a"]
    assert capsys.readouterr().out.strip() == "chat: version 3 (set): b 40%, a 60%"


def test_adding_a_shadow_reports_it(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeAdmin({"chat": [AB]})
    assert turnout_routes(fake, "shadow", "chat", "--add", "c", "--rate", "0.25") == 0
    assert capsys.readouterr().out.strip() == "chat: version 2 (set): a 70%, b 30%; shadows: c 25%"


def test_a_conflict_exits_1_with_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeAdmin({"chat": [AB, AB]})
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"targets": [{"variant": "a"}]}))
    assert turnout_routes(fake, "set", "chat", "--file", str(spec_file), "--if-match", "1") == 1
    assert [r.method for r in fake.requests] == ["PUT"]  # --if-match given: no GET first
    err = capsys.readouterr().err
    assert "turnout: 409 route 'chat' is at version 2, not 1" in err and "re-run" in err
    spec_file.write_text("")
    assert turnout_routes(fake, "set", "chat", "--file", str(spec_file)) == 2
    assert "expected a mapping" in capsys.readouterr().err


def test_set_creates_a_missing_route_without_if_match(tmp_path: Path) -> None:
    fake = FakeAdmin({})
    spec_file = tmp_path / "new.yaml"
    spec_file.write_text("targets: [{variant: a}]\n")
    assert turnout_routes(fake, "set", "new", "--file", str(spec_file)) == 0
    put = fake.requests[-1]
    assert put.method == "PUT" and "if-match" not in put.headers
    assert fake.routes["new"] == [spec_of(targets=[{"variant": "a"}])]


def test_an_invalid_edit_fails_before_any_put(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeAdmin({"chat": [AB]})
    assert turnout_routes(fake, "shadow", "chat", "--add", "a") == 2
    assert [r.method for r in fake.requests] == ["GET"]
    assert "also a primary target" in capsys.readouterr().err
    assert turnout_routes(fake, "canary", "chat", "--canary", "c") == 2  # no gate given
    assert [r.method for r in fake.requests] == ["GET"]


def test_canary_start_and_abort_flow() -> None:
    fake = FakeAdmin({"chat": [spec_of(targets=[{"variant": "a"}])]})
    assert (
        turnout_routes(
            fake, "canary", "chat", "--canary", "c", "--steps", "10,100", "--max-error-rate", "0.1"
        )
        == 0
    )
    started = fake.routes["chat"][-1]
    assert started.canary is not None and started.canary.stable == "a" and started.canary.steps == [10, 100]
    assert turnout_routes(fake, "canary", "chat", "--abort") == 0
    assert fake.routes["chat"][-1] == spec_of(targets=[{"variant": "a"}])


def test_canary_promoted_by_hand_skips_its_remaining_steps() -> None:
    """Argo's promote --full: the canary alone at once, as the judge leaves it after its last
    step (there was only abort)."""
    shadowed = spec_of(targets=[{"variant": "a"}], shadows=[{"variant": "c", "sample_rate": 0.5}])
    fake = FakeAdmin({"chat": [shadowed]})
    start = ("canary", "chat", "--canary", "c", "--steps", "10,50,100", "--max-error-rate", "0.1")
    assert turnout_routes(fake, *start) == 2  # c is a shadow: remove it first
    fake = FakeAdmin({"chat": [spec_of(targets=[{"variant": "a"}], fallbacks=["c"])]})
    assert turnout_routes(fake, *start) == 0
    assert turnout_routes(fake, "canary", "chat", "--promote") == 0
    promoted = fake.routes["chat"][-1]
    assert promoted.canary is None and promoted.targets == [WeightedTarget(variant="c")]
    assert promoted.fallbacks == []  # as the judge does: no fallback equal to the sole target
    with pytest.raises(EditError, match="no canary"):
        promote_canary(promoted)


def test_diff_and_unknown_route(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeAdmin({"chat": [AB, set_weights(AB, parse_weights(["a=50", "b=50"]))]})
    assert turnout_routes(fake, "diff", "chat", "1") == 0
    out = capsys.readouterr().out
    assert "--- chat@v1" in out and "+++ chat@v2" in out and '+      "weight": 50.0' in out
    assert turnout_routes(fake, "diff", "chat", "1", "7") == 1
    assert turnout_routes(fake, "show", "nope") == 1
    assert "turnout: 404 no route 'nope'" in capsys.readouterr().err


class StoresThenHangsUp(FakeAdmin):
    """The write lands, then the connection drops before the answer (a gateway killed mid-reply)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = super().__call__(request)
        if request.method == "PUT":
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return answer


def test_a_write_whose_answer_was_lost_says_it_may_be_stored(capsys: pytest.CaptureFixture[str]) -> None:
    fake = StoresThenHangsUp({"chat": [AB]})
    assert turnout_routes(fake, "weights", "chat", "a=1") == 1
    err = capsys.readouterr().err
    assert "took the request but did not answer" in err and "check `turnout routes history`" in err
    assert len(fake.routes["chat"]) == 2  # it was stored indeed


def test_unreachable_gateway_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["routes", "list", "--url", "http://127.0.0.1:9"])
    assert run(args) == 1
    assert "cannot reach the gateway at http://127.0.0.1:9" in capsys.readouterr().err


def test_options_may_follow_the_command() -> None:
    args = build_parser().parse_args(["routes", "list", "--url", "http://x", "--json"])
    assert args.url == "http://x" and args.json is True and args.token is None
    args = build_parser().parse_args(["routes", "--url", "http://y", "show", "chat"])
    assert args.url == "http://y" and args.json is False


def test_route_names_are_any_model_name_the_admin_paths_can_tell_apart() -> None:
    for good in (
        "turnout-tiny",
        "meta-llama/Llama-3.1-8B-Instruct",
        "llama3:8b",
        "a?b#c d%",
        "org/history-v2",
    ):
        assert route_name_problem(good) is None, good
    bad = {
        "": "1 to 256 characters, not 0",
        "x" * 257: "not 257",
        "a\nb": "control characters",
        "a\x00b": "control characters",
        " padded": "spaces at an end",
        "/lead": "starts or ends with '/'",
        "a//b": "an empty part",
        "org/model/history": "ends in '/history', which the admin API reads as the route's history",
        "x/rollback": "'/rollback'",
        "x/shadow": "'/shadow'",
    }
    for name, reason in bad.items():
        problem = route_name_problem(name)
        assert problem is not None and reason in problem, (name, problem)
