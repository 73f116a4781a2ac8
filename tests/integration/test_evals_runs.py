"""``turnout eval`` and ``turnout compare`` against the session's gateway on the shipped model.

fp32 must answer ≥ 95% of the held-out sums through the API; int4's agreement with fp32 is
reported with an interval; the comparison report renders every section from real eval runs
and a load-test summary in the ``turnout.loadtest/1`` shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def turnout(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "serving.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def eval_dirs(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("evals")
    fp32 = turnout("eval", "--target", gateway_url, "--model", "turnout-tiny", "--tasks", "addition",
                   "--out", str(root / "fp32"))  # fmt: skip
    assert fp32.returncode == 0, fp32.stderr[-2000:]
    int4 = turnout("eval", "--target", gateway_url, "--model", "turnout-tiny-int4",
                   "--reference", "turnout-tiny", "--tasks", "addition,continuation", "--limit", "60",
                   "--out", str(root / "int4"))  # fmt: skip
    assert int4.returncode == 0, int4.stderr[-2000:]
    return {"fp32": root / "fp32", "int4": root / "int4"}


def test_fp32_answers_held_out_sums_through_the_api(eval_dirs: dict[str, Path]) -> None:
    summary = json.loads((eval_dirs["fp32"] / "summary.json").read_text())
    addition = summary["tasks"]["addition"]
    assert summary["schema"] == "turnout.eval/1" and addition["n"] == 200
    assert addition["value"] >= 0.95 and addition["ci95"][0] <= addition["value"] <= addition["ci95"][1]
    assert addition["dataset"] == "addition@1"
    assert summary["variants"]["turnout-tiny"]["accelerator"] == "cpu-x86"
    assert len((eval_dirs["fp32"] / "records.jsonl").read_text().splitlines()) == 200


def test_int4_agreement_with_fp32_is_reported_with_an_interval(eval_dirs: dict[str, Path]) -> None:
    summary = json.loads((eval_dirs["int4"] / "summary.json").read_text())
    agreement = summary["agreement"]["exact_output_agreement"]
    print(f"int4 vs fp32 exact-output agreement: {agreement}")
    assert agreement["n"] == 120 and 0.5 < agreement["value"] <= 1.0
    assert summary["agreement"]["reference_variants"] == ["turnout-tiny"]  # from x-turnout-variant
    assert agreement["ci95"][0] <= agreement["value"] <= agreement["ci95"][1]
    top1 = summary["agreement"]["top1_token_agreement"]
    print(f"int4 vs fp32 top-1 token agreement: {top1}")
    assert top1["n"] == 60 and 0.8 < top1["value"] <= 1.0
    assert top1["ci95"][0] <= top1["value"] <= top1["ci95"][1]
    text = (eval_dirs["int4"] / "summary.md").read_text()
    assert "Exact-output agreement with turnout-tiny" in text and "Top-1 token agreement" in text


def test_the_comparison_report_renders_every_section(eval_dirs: dict[str, Path], tmp_path: Path) -> None:
    load = tmp_path / "load"
    load.mkdir()
    block = {"requests": 100, "errors": 0, "errors_by_kind": {}, "req_per_s": 50.0, "output_tokens": 1000,
             "output_tokens_per_s": 500.0, "ttft_ms": {"p50": 10.0, "p90": 12.0, "p99": 20.0, "mean": 11.0},
             "itl_ms": {"p50": 1.0, "p90": 1.2, "p99": 2.0, "mean": 1.1}, "latency_ms": {"p50": 20.0},
             "request_tokens_per_s": {"p50": 300.0}}  # fmt: skip
    facts = {"kind": "embedded", "engine": "onnxruntime-genai", "vendor": "cpu", "accelerator": "cpu-x86"}
    per_variant = {"turnout-tiny": block, "turnout-tiny-int4": {**block, "output_tokens_per_s": 800.0}}
    loads = []
    for name, figures in per_variant.items():  # one run per variant (turnout loadtest --variant)
        folder = tmp_path / f"load-{name}"
        folder.mkdir()
        summary = {"schema": "turnout.loadtest/1", "route": "x", "per_variant": {name: figures},
                   "variants": {name: facts}}  # fmt: skip
        (folder / "summary.json").write_text(json.dumps(summary))
        loads.append(str(folder))
    evals = [str(eval_dirs["fp32"]), str(eval_dirs["int4"])]
    out = tmp_path / "report"
    variants = "turnout-tiny,turnout-tiny-int4"
    done = turnout("compare", "--variants", variants, "--load", *loads, "--eval", *evals, "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = (out / "report.md").read_text()
    sections = ("# Variant comparison", "## Verdicts", "## Plots", "| turnout-tiny-int4 |", "1.60× tokens/s")
    for section in sections:
        assert section in report, section
    assert "within the 1 pt budget" in report or "outside the 1 pt budget" in report
    assert "<table" in (out / "report.html").read_text()
    for png in ("accuracy_vs_cost.png", "latency_vs_throughput.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")
    # Both variants in one split run: each one's tokens/s is its traffic share, so no cost and
    # no speed ratio, and the table says why.
    (load / "summary.json").write_text(json.dumps({"schema": "turnout.loadtest/1", "route": "x",
        "per_variant": per_variant, "variants": dict.fromkeys(per_variant, facts)}))  # fmt: skip
    shared = turnout("compare", "--variants", variants, "--load", str(load), "--eval", *evals,
                     "--out", str(tmp_path / "shared"))  # fmt: skip
    assert shared.returncode == 0, shared.stderr
    assert "| turnout-tiny-int4 † |" in shared.stdout and "share of the traffic" in shared.stdout
    assert "× tokens/s" not in shared.stdout and "× cost" not in shared.stdout
    for wrong, said in (("--baseline", "is not one of --variants"), ("--task", "the eval runs measured")):
        refused = turnout("compare", "--variants", variants, "--eval", *evals, "--out", str(tmp_path / "x"),
                          wrong, "nope")  # fmt: skip
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr


def test_log_likelihood_tasks_score_text_and_choices(gateway_url: str, tmp_path: Path) -> None:
    done = turnout("eval", "--target", gateway_url, "--model", "turnout-tiny", "--tasks", "text,choice",
                   "--limit", "30", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    tasks = json.loads((tmp_path / "summary.json").read_text())["tasks"]
    text, choice = tasks["text"], tasks["choice"]
    print(f"perplexity {text['value']:.3f} {text['ci95']}, choice accuracy {choice['value']:.2f}")
    assert text["metric"] == "perplexity" and 1.0 < text["value"] < 10.0
    assert text["ci95"][0] <= text["value"] <= text["ci95"][1] and text["n"] == 30
    assert choice["metric"] == "accuracy" and choice["value"] >= 0.8  # counting and copying were learned
    unknown = turnout("eval", "--target", gateway_url, "--model", "turnout-tiny", "--tasks", "nope",
                      "--out", str(tmp_path))  # fmt: skip
    assert unknown.returncode == 2 and "unknown task 'nope'" in unknown.stderr
