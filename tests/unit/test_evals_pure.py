"""Eval datasets, scoring, intervals and the comparison's join and verdicts (no I/O beyond files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.accelerators import priced_catalog
from evals.datasets import DatasetError, load, render, shipped
from evals.metrics import bootstrap_ci, match, wilson_ci
from evals.report import (
    Row,
    cost_per_million,
    join,
    markdown,
    table_rows,
    verdict,
)
from evals.report_notes import unpriced_note
from evals.runner import echoed_extras


def test_shipped_files_are_exactly_what_the_generators_make() -> None:
    for dataset in shipped().values():
        hint = f"re-run python -m evals.datasets ({dataset.label})"
        assert dataset.path.read_text() == render(dataset), hint
        assert load(dataset.path, dataset.kind).rows == dataset.rows


def test_the_addition_set_is_the_held_out_sums_in_the_trained_format() -> None:
    rows = shipped()["addition"].rows
    assert len(rows) == 200 and rows[0]["prompt"].endswith("=") and len(rows[0]["answer"]) == 3
    a, b = int(rows[0]["prompt"][:2]), int(rows[0]["prompt"][3:5])
    assert rows[0]["answer"] == f"{a + b:03d}"[::-1]


@pytest.mark.parametrize(
    ("line", "kind", "message"),
    [
        ('{"id": "1", "prompt": "x"}', "generation", ":1: field 'answer' missing or not str"),
        ("not json", "text", ":1: not JSON"),
        ('{"id": "1", "prompt": "p", "choices": ["a"], "answer": 3}', "choice", "not an index into choices"),
    ],
)
def test_user_datasets_fail_naming_line_and_field(tmp_path: Path, line: str, kind: str, message: str) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DatasetError, match=message):
        load(path, kind)  # type: ignore[arg-type]


def test_a_dataset_whose_text_holds_line_separators_reads_back_whole(tmp_path: Path) -> None:
    # render() keeps U+2028, U+2029 and U+0085 as they are (ensure_ascii=False); JSON allows them
    # raw inside strings, so only "\n" may end a row.
    rows = ({"id": "1", "text": "one\u2028two\u2029three\x85four"}, {"id": "2", "text": "five"})
    path = tmp_path / "mine.jsonl"
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows) + "\r\n"
    path.write_text(text, encoding="utf-8")
    assert load(path, "text").rows == rows


def test_scoring_and_intervals() -> None:
    assert match(" 840", "840") and not match("841", "840")
    assert match("The cat sat.", "the  cat sat", "normalized")
    assert match("answer: 42!", "42", "regex", r"answer: (\d+)")
    low, high = bootstrap_ci([1.0] * 90 + [0.0] * 10, seed=3)
    assert low < 0.9 < high and low > 0.8 and high <= 0.97
    assert bootstrap_ci([1.0] * 10, seed=1) == (1.0, 1.0)  # why proportions use Wilson's instead:
    low, high = wilson_ci(200, 200)
    assert high == 1.0 and low == pytest.approx(0.9812, abs=1e-4)  # 200 of 200 right: not 100–100%
    assert wilson_ci(90, 100) == pytest.approx((0.8256, 0.9448), abs=1e-4)


REQUEST = {"shape": "fixed", "prompt_tokens": [8, 8], "max_tokens": [32, 32], "trace": None,
           "temperature": None, "variant": None, "requested_duration_s": 20.0}  # fmt: skip


def _load(variant: str, tokens: float, **request: object) -> dict[str, object]:
    block = {"output_tokens_per_s": tokens, "req_per_s": tokens / 5, "ttft_ms": {"p50": 10.0, "p99": 30.0},
             "itl_ms": {"p50": 1.0}}  # fmt: skip
    return {"per_variant": {variant: block}, "variants": {variant: {"accelerator": "h100-80gb"}},
            "request": {**REQUEST, "variant": variant, **request}}  # fmt: skip


def test_join_prices_tokens_and_the_verdict_states_the_budget() -> None:
    loads = [_load("fp32", 1000.0), _load("int4", 2100.0)]

    def accuracy(value: float) -> dict[str, object]:
        return {"addition": {"value": value, "ci95": [value - 0.02, 1.0]}}

    evals = [
        {"model": "fp32", "variants": {"fp32": {}}, "tasks": accuracy(0.99), "agreement": None},
        {"model": "int4", "variants": {"int4": {}}, "tasks": accuracy(0.982),
         "agreement": {"exact_output_agreement": {"value": 0.95}}},
    ]  # fmt: skip
    base, int4 = join("fp32", loads, evals, "addition"), join("int4", loads, evals, "addition")
    assert base.usd_per_m_tokens == pytest.approx(cost_per_million("h100-80gb", 1000.0))
    assert int4.agreement == 0.95 and int4.accelerator == "h100-80gb"
    expected = "int4: −0.8 pt accuracy, 2.10× tokens/s, 0.48× cost: within the 1 pt budget"
    assert verdict(int4, base, 1.0) == expected
    assert verdict(int4, base, 0.5).endswith("outside the 0.5 pt budget")
    assert verdict(base, base, 1.0) == "fp32: baseline"
    assert cost_per_million("no-such-card", 10.0) is None
    empty = Row("x", None, None, None, None, None, None, None, None, None, None)
    assert verdict(empty, base, 1.0).endswith("no accuracy to judge")


def test_an_embeddings_load_run_is_priced_per_million_input_tokens() -> None:
    """It generates nothing: its output tokens/s are 0, its work is the prompt tokens it embeds."""

    def embedding(variant: str, prompt_tokens: float) -> dict[str, object]:
        run = _load(variant, 0.0)
        run["per_variant"][variant]["prompt_tokens_per_s"] = prompt_tokens  # type: ignore[index]
        return {**run, "endpoint": "embeddings"}

    loads = [embedding("fp32", 20000.0), embedding("int8", 30000.0)]
    base, int8 = join("fp32", loads, [], "addition"), join("int8", loads, [], "addition")
    assert (base.tokens_kind, base.tokens_per_s) == ("input", 20000.0)
    assert base.usd_per_m_tokens == pytest.approx(cost_per_million("h100-80gb", 20000.0))
    assert verdict(int8, base, 1.0) == "int8: 1.50× tokens/s, 0.67× cost: no accuracy to judge"
    head, first = table_rows([base, int8])[:2]
    assert "input tokens/s" in head and "$/M input tokens" in head and first[8] == "20000"
    chat = join("chat", [_load("chat", 500.0)], [], "addition")
    head, _, mixed = table_rows([base, chat])
    assert "tokens/s" in head and "$/M tokens" in head and mixed[8] == "500 out"
    assert table_rows([chat])[0][12] == "$/M output tokens"


def test_a_variant_measured_in_a_shared_run_gets_no_cost_or_speed_ratio() -> None:
    shared = {"per_variant": {**_load("a", 1000.0)["per_variant"], **_load("b", 3000.0)["per_variant"]},
              "variants": {"a": {"accelerator": "h100-80gb"}, "b": {"accelerator": "h100-80gb"}}}  # fmt: skip
    a, b = join("a", [shared], [], "addition"), join("b", [shared], [], "addition")
    assert a.shared_run and a.tokens_per_s == 1000.0 and a.usd_per_m_tokens is None
    assert verdict(b, a, 1.0) == "b: no figures: no accuracy to judge"
    alone = join("a", [shared, _load("a", 1200.0)], [], "addition")  # a later run of its own wins
    assert not alone.shared_run and alone.usd_per_m_tokens is not None


def test_an_accelerator_missing_from_the_catalog_is_named_in_the_report() -> None:
    unknown = {**_load("v", 1000.0), "variants": {"v": {"accelerator": "h100"}}}  # not "h100-80gb"
    row, priced = join("v", [unknown], [], "addition"), join("w", [_load("w", 1000.0)], [], "addition")
    assert row.usd_per_m_tokens is None and priced.usd_per_m_tokens is not None
    [note] = unpriced_note([row, priced])
    assert "no price for accelerator h100: not in the catalog (h100-80gb, " in note
    assert "$TURNOUT_PRICES_FILE" in note
    assert note in markdown([row, priced], [], "addition", []) and unpriced_note([priced]) == []


def test_a_bos_the_server_echoes_is_recognised_and_nothing_else() -> None:
    assert echoed_extras(["<s>", "The", " cat"], "The cat") == 1  # vLLM's echo of a text prompt
    assert echoed_extras(["The", " cat"], "The cat") == 0  # Turnout's embedded engine
    assert echoed_extras(["<s>", "x"], "The cat") == 0  # no match: score what came back


def _run(
    variant: str, tokens: float, users: int = 8, errors: int = 0, requests: int = 1000
) -> dict[str, object]:
    run = _load(variant, tokens)
    failed = {"?": {"output_tokens_per_s": 0.0}} if errors else {}
    taken = {"scenario": "steady", "users": users, "endpoint": "chat", "stream": True}
    return {**run, **taken, "per_variant": {**run["per_variant"], **failed},
            "overall": {"requests": requests, "errors": errors}}  # fmt: skip


def test_failed_requests_are_no_other_variant_and_a_failing_run_draws_no_ratio() -> None:
    base, failing = (
        join("a", [_run("a", 1000.0)], [], "addition"),
        join("b", [_run("b", 3000.0, errors=985)], [], "addition"),
    )
    assert not failing.shared_run and failing.error_rate == 0.985  # "?" held its failures, not a split
    assert "98.5%" in table_rows([base, failing])[2][9]
    said = verdict(failing, base, 1.0)
    assert "tokens/s" not in said and "× cost" not in said and "98.5% of b's load requests failed" in said


def test_runs_taken_differently_draw_no_speed_or_cost_ratio() -> None:
    one, eight = (
        join("a", [_run("a", 1000.0, users=1)], [], "addition"),
        join("b", [_run("b", 4000.0)], [], "addition"),
    )
    said = verdict(eight, one, 1.0)
    assert "×" not in said
    assert (
        "load runs taken differently (steady, 8 users, chat stream vs steady, 1 users, chat stream)" in said
    )
    assert "4.00× tokens/s" in verdict(eight, join("a", [_run("a", 1000.0)], [], "addition"), 1.0)


def test_a_perplexity_is_shown_as_one_and_lower_is_better() -> None:
    def perplexity(model: str, value: float) -> dict[str, object]:
        figures = {"metric": "perplexity", "value": value, "ci95": [value - 0.3, value + 0.4]}
        return {"model": model, "variants": {model: {}}, "tasks": {"text": figures}, "agreement": None}

    base = join("fp32", [], [perplexity("fp32", 2.35)], "text")
    worse = join("int4", [], [perplexity("int4", 3.50)], "text")
    assert table_rows([base, worse])[0][1] == "perplexity (lower is better)"
    assert table_rows([base, worse])[2][1:3] == ["3.50", "3.20–3.90"]
    said = verdict(worse, base, 1.0)
    assert "perplexity 3.50 vs 2.35 (+48.9%)" in said and "within" not in said and "lower is better" in said


def test_compare_prices_with_the_prices_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100-80gb: 1.0\n")
    monkeypatch.setenv("TURNOUT_PRICES_FILE", str(prices))
    row = join("a", [_load("a", 1000.0)], [], "addition", priced_catalog())
    assert row.usd_per_m_tokens == pytest.approx(1.0 / 3600 / 1000 * 1e6)


def _continuation(value: float, n: int = 100) -> dict[str, object]:
    return {
        "continuation": {"metric": "normalized_match", "value": value, "ci95": [value - 0.1, 1.0], "n": n}
    }


def test_an_eval_of_a_split_route_is_no_variants_own_and_its_own_eval_wins() -> None:
    from evals.runner import EvalRun, summarize

    run = EvalRun("http://x", "mix", ("continuation",), Path("out"))
    served = [("fp32", True)] * 50 + [("int4", True)] * 30 + [("int4", False)] * 20
    records = [{"task": "continuation", "dataset": "continuation@1", "variant": variant, "correct": right}
               for variant, right in served]  # fmt: skip
    mixed = summarize(run, records, {}, "now")
    assert mixed["tasks"]["continuation"]["value"] == 0.8  # the mix of both
    assert mixed["per_variant"]["fp32"]["tasks"]["continuation"]["value"] == 1.0
    assert mixed["per_variant"]["int4"]["tasks"]["continuation"]["n"] == 50
    fp32, int4 = join("fp32", [], [mixed], "continuation"), join("int4", [], [mixed], "continuation")
    assert (fp32.accuracy, int4.accuracy) == (1.0, 0.6) and fp32.split_eval and int4.split_eval
    assert table_rows([fp32, int4])[2][0] == "int4 §" and "§ scored in an eval of a split route" in (
        markdown([fp32, int4], [], "continuation", [])
    )
    # An older summary that kept no per-variant figures: no score, rather than the mix's.
    older = {key: value for key, value in mixed.items() if key != "per_variant"}
    assert join("int4", [], [older], "continuation").accuracy is None
    # The variant's own eval wins, whichever run is listed last.
    own = {"model": "int4", "variants": {"int4": {}}, "tasks": _continuation(0.9), "agreement": None}
    for evals in ([own, mixed], [mixed, own]):
        row = join("int4", [], evals, "continuation")
        assert row.accuracy == 0.9 and not row.split_eval
    # An eval straight against an engine (no x-turnout-variant on its answers) is its model's own.
    direct = {"model": "int4", "variants": {"?": {}}, "tasks": _continuation(0.7), "agreement": None}
    assert join("int4", [], [direct], "continuation").accuracy == 0.7


def test_naming_a_split_route_as_a_variant_says_to_name_its_variants(tmp_path: Path) -> None:
    import json

    from evals.report import compare
    from evals.runner import EvalRun, summarize

    run = EvalRun("http://x", "mix", ("continuation",), Path("out"))
    records = [{"task": "continuation", "dataset": "continuation@1", "variant": variant, "correct": True}
               for variant in ("fp32", "int4") * 5]  # fmt: skip
    folder = tmp_path / "ev_mix"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summarize(run, records, {}, "now")))
    with pytest.raises(ValueError, match="mix is a route split between fp32, int4; name its variants"):
        compare(["mix"], [], [folder], tmp_path / "report", task="continuation")  # it was a row of "-"
    # A route named after one of its variants (a canary on route int4: int4 and int4-new) is
    # that variant too, scored on its own prompts; and a run of the name alone is its own.
    canary = EvalRun("http://x", "int4", ("continuation",), Path("out"))
    records = [{"task": "continuation", "dataset": "continuation@1", "variant": variant, "correct": True}
               for variant in ("int4", "int4-new") * 5]  # fmt: skip
    (tmp_path / "ev_canary").mkdir()
    (tmp_path / "ev_canary" / "summary.json").write_text(json.dumps(summarize(canary, records, {}, "now")))
    assert "int4 §" in compare(
        ["int4", "int4-new"], [], [tmp_path / "ev_canary"], tmp_path / "r2", task="continuation"
    )
    alone = [{**record, "variant": "mix"} for record in records]
    (tmp_path / "ev_alone").mkdir()
    (tmp_path / "ev_alone" / "summary.json").write_text(json.dumps(summarize(run, alone, {}, "now")))
    assert "| mix |" in compare(
        ["mix"], [], [folder, tmp_path / "ev_alone"], tmp_path / "r3", task="continuation"
    )


def test_load_runs_asking_differently_shaped_requests_draw_no_ratio() -> None:
    long, short = (
        join("a", [_load("a", 1000.0)], [], "addition"),
        join("b", [_load("b", 5160.0, max_tokens=[1, 1])], [], "addition"),
    )
    said = verdict(short, long, 1.0)
    assert "×" not in said and "load requests asked differently (max tokens 1 vs 32)" in said
    slower = join("b", [_load("b", 900.0, requested_duration_s=60.0)], [], "addition")
    assert "0.90× tokens/s" in verdict(slower, long, 1.0)  # its pinned variant and duration: alike
    hot = join("b", [_load("b", 900.0, temperature=1.0)], [], "addition")
    assert "temperature 1.0 vs the server's" in verdict(hot, long, 1.0)
    traced = join("b", [_load("b", 900.0, shape="trace", prompt_tokens=None, max_tokens=None,
                              trace={"shapes": 3, "sha256": "ab12"})], [], "addition")  # fmt: skip
    assert "trace 3 shapes, sha256 ab12 vs -" in verdict(traced, long, 1.0)
    # An older summary.json without "request": read, and the verdict says the shape is assumed.
    older = _load("b", 900.0)
    del older["request"]
    said = verdict(join("b", [older], [], "addition"), long, 1.0)
    assert "0.90× tokens/s" in said and "requests assumed alike (not recorded in the load run of b)" in said


def test_a_variant_exactly_at_the_budget_is_within_it() -> None:
    def row(variant: str, right: int) -> Row:
        return Row(variant, right / 200, None, None, None, None, None, None, None, None, None)

    assert (
        verdict(row("int4", 198), row("fp32", 200), 1.0) == "int4: −1.0 pt accuracy: within the 1 pt budget"
    )
    assert verdict(row("int4", 197), row("fp32", 200), 1.0).endswith("outside the 1 pt budget")
    assert (
        verdict(row("int4", 199), row("fp32", 200), 0.5) == "int4: −0.5 pt accuracy: within the 0.5 pt budget"
    )


def test_an_agreement_nothing_measured_is_shown_as_not_measured() -> None:
    from evals.runner import EvalRun, summarize, summary_markdown

    run = EvalRun("http://x", "int4", ("text",), Path("out"), reference="fp32")
    records = [{"task": "text", "dataset": "text@1", "variant": "int4", "nll": 1.0, "tokens": 4}]
    summary = summarize(run, records, {}, "now")  # no generation task: no answer to compare
    assert summary["agreement"]["exact_output_agreement"] == {"value": None, "ci95": None, "n": 0}
    assert "Exact-output" not in summary_markdown(summary)
    row = join("int4", [], [summary], "text")
    assert row.agreement is None and table_rows([row])[1][3] == "-"
    older = {**summary, "agreement": {"exact_output_agreement": {"value": 0.0, "ci95": [0.0, 0.0], "n": 0}}}
    assert join("int4", [], [older], "text").agreement is None  # what summaries wrote before


def test_an_agreement_with_a_split_reference_route_says_it_is_a_mix() -> None:
    """A reference route that split its traffic answered from several variants: the agreement is
    with their mix, which summary.md and the comparison report both say, naming them."""
    from evals.runner import EvalRun, summarize, summary_markdown

    run = EvalRun("http://x", "int4", ("addition",), Path("out"), reference="tiny")
    records = [
        {"task": "addition", "dataset": "addition@1", "variant": "int4", "correct": True, "agree": True,
         "reference_variant": served}
        for served in ("fp32", "int8", "fp32")
    ]  # fmt: skip
    top1 = {"task": "top1", "variant": "int4", "agreed": 3, "positions": 4, "reference_variant": "fp32"}
    records.append(top1)
    summary = summarize(run, records, {}, "now")
    assert summary["agreement"]["reference_variants"] == ["fp32", "int8"]
    assert "**tiny is a split route**: its answers came from fp32, int8" in summary_markdown(summary)
    row = join("int4", [], [summary], "addition")
    assert row.mixed_reference == ("fp32", "int8") and table_rows([row])[1][3] == "100.0% ¶"
    assert "¶ agreement measured against a split reference route" in markdown([row], [], "addition", [])
    assert "int4 (against fp32, int8)" in markdown([row], [], "addition", [])

    one = [{**r, "reference_variant": "fp32"} for r in records]  # one variant answered: no mark
    alone = summarize(run, one, {}, "now")
    assert alone["agreement"]["reference_variants"] == ["fp32"] and "split" not in summary_markdown(alone)
    assert join("int4", [], [alone], "addition").mixed_reference == ()
    # no x-turnout-variant (a vLLM target): "?" is no variant of its own
    unknown = summarize(run, [{**r, "reference_variant": "?"} for r in records], {}, "now")
    assert "split" not in summary_markdown(unknown)


def test_every_reference_answer_fits_its_tasks_max_tokens() -> None:
    """cont-0048's answer is 19 tokens: with max_tokens 16 no model could get it right."""
    from evals.runner import GENERATION_TASKS

    tokenizers = pytest.importorskip("tokenizers")
    root = Path(__file__).resolve().parents[2]
    tokenizer = tokenizers.Tokenizer.from_file(
        str(root / "deploy/model/artifacts/turnout-tiny/hf/tokenizer.json")
    )
    for task, (name, _, max_tokens) in GENERATION_TASKS.items():
        for row in shipped()[name].rows:
            tokens = len(tokenizer.encode(row["answer"], add_special_tokens=False).ids)
            margin = 1 if task == "addition" else 4  # three digits and an end; a sentence may run on
            assert tokens + margin <= max_tokens, (
                f"{task} {row['id']}: {tokens} tokens, max_tokens {max_tokens}"
            )
    # The canary's eval gate reads the same datasets: its default must fit them too (it was 16,
    # so a gate on continuation with min_accuracy 1.0 rolled a perfect canary back).
    from serving.routing.spec import EvalGate

    gate_tokens = EvalGate(min_accuracy=0.5).max_tokens
    longest = max(
        len(tokenizer.encode(row["answer"], add_special_tokens=False).ids)
        for name in ("addition", "continuation")
        for row in shipped()[name].rows
    )
    assert longest + 4 <= gate_tokens, (longest, gate_tokens)


def test_plot_labels_alternate_sides_so_none_climbs_into_the_title() -> None:
    """Labels stepped up by index, every one higher: with a few variants they reached the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evals.report_plots import _label

    figure, axis = plt.subplots()
    try:
        for index in range(3):
            _label(axis, f"v{index}", (1.0, 100.0), index)
        offsets = [text.xyann for text in axis.texts]
        assert offsets[0][1] > 0 > offsets[1][1] and offsets[2][1] > 0  # above, below, above
        assert offsets[2][1] - offsets[0][1] == 11  # a step out only every other label
    finally:
        plt.close(figure)
