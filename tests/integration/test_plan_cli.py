"""``turnout plan`` and ``turnout deploy validate`` as an operator runs them: output and exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serving.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
SPECS = sorted(EXAMPLES.glob("*.yaml"))
VALID = """\
name: llama
model: {architecture: llama-3-8b}
engine: vllm
vendor: nvidia
accelerator: h100-80gb
kv_cache: {max_model_len: 8192}
"""


def turnout(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serving.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_example_validates_and_plans(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")
    assert main(["plan", str(path)]) == 0
    table = capsys.readouterr().out
    own = next(line for line in table.splitlines() if " * " in f"{line} ")
    assert " yes " in own  # supported and fits on its own accelerator


def test_validate_ok_as_a_subprocess() -> None:
    done = turnout("deploy", "validate", str(EXAMPLES / "llama3-70b-mi300x-tp2.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("ok: llama3-70b-mi300x-tp2 (")


def _with(extra: str) -> str:
    """VALID with the keys of ``extra`` replaced (a key given twice is itself an error)."""
    return yaml.safe_dump({**yaml.safe_load(VALID), **yaml.safe_load(extra)}, sort_keys=False)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (
            "tensor_parallel: 3\ndevice_count: 3\n",
            "tensor_parallel: 3 does not divide the 32 attention heads",
        ),
        (
            "accelerator: a100-80gb\nkv_cache: {dtype: fp8, max_model_len: 8192}\n",
            "kv_cache.dtype: fp8 KV cache",
        ),
        ("model: {architecture: llama-3-70b}\ndtype: fp16\n", "memory: needs 136.4 GiB per device"),
        ("vendor: google\naccelerator: tpu-v5e\ncuda_graphs: {enabled: true}\n", "cuda_graphs.enabled"),
    ],
)
def test_validate_problems_exit_1(tmp_path: Path, extra: str, field: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(_with(extra))
    done = turnout("deploy", "validate", str(spec))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "would not deploy" in done.stdout
    assert field in done.stdout


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("accelerator: h100\n", "accelerator: unknown accelerator 'h100'"),
        ("kv_cache: {max_model_len: 8192, size: 3}\n", "kv_cache.size: unknown field"),
        (
            "kv_cache: {max_model_len: 8192, dtpye: fp8}\n",
            "kv_cache.dtpye: unknown field; did you mean 'dtype'?",
        ),
    ],
)
def test_malformed_spec_exits_2_with_file_and_field(tmp_path: Path, extra: str, where: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(_with(extra))
    for command in (("deploy", "validate"), ("plan",)):
        done = turnout(*command, str(spec))
        assert done.returncode == 2
        assert f"{spec}: invalid variant spec" in done.stderr
        assert where in done.stderr


def test_plan_table_json_chart_and_prices(tmp_path: Path) -> None:
    spec = EXAMPLES / "llama3-70b-h100-tp4.yaml"
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100-80gb: 2.0\n")
    chart = tmp_path / "plan.png"
    done = turnout(
        "plan", str(spec), "--accelerators", "h100-80gb,mi300x", "--context", "4096", "--prices", str(prices),
        "--png", str(chart),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("llama3-70b-h100-tp4 (") and "context 4096" in lines[0]
    assert any(line.startswith("h100-80gb *") and " 8.00 " in line for line in lines)  # 4 × $2.00
    assert "mi300x: engine: trtllm runs only on nvidia" in done.stdout
    assert chart.read_bytes()[:4] == b"\x89PNG"

    as_json = turnout(
        "plan", str(spec), "--accelerators", "h100-80gb", "--json", env={"TURNOUT_PRICES_FILE": str(prices)}
    )
    report = json.loads(as_json.stdout)
    row = report["rows"][0]
    assert report["model"] == "llama-3-70b" and row["usd_per_hour"] == 8.0
    assert row["kv_bytes_per_token"] == 320 * 1024 and row["fits"] is True


def test_plan_argument_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = str(EXAMPLES / "llama3-8b-awq.yaml")
    assert main(["plan", spec, "--accelerators", "h100-80gb,b200"]) == 2
    assert "--accelerators: unknown accelerator 'b200'" in capsys.readouterr().err
    assert main(["plan", spec, "--context", "0"]) == 2
    assert main(["plan", spec, "--context", "16384"]) == 2
    assert "exceeds the spec's max_model_len 8192" in capsys.readouterr().err
    assert main(["plan", spec, "--prices", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read prices" in capsys.readouterr().err


def test_help_lists_plan_and_deploy() -> None:
    done = turnout("--help")
    assert "plan" in done.stdout and "deploy" in done.stdout
