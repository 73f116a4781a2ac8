"""``turnout deploy render`` as an operator runs it: files written, refusals and exit statuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
VALID = """\
name: llama
model: {architecture: llama-3-8b, served_name: meta-llama/Meta-Llama-3-8B-Instruct}
engine: vllm
vendor: nvidia
accelerator: h100-80gb
kv_cache: {max_model_len: 8192}
"""


def test_render_writes_the_targets_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "deploy",
                "render",
                str(EXAMPLES / "llama3-8b-h100-fp8kv.yaml"),
                "--target",
                "vllm",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr()
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == ["vllm/args.txt", "vllm/env", "vllm/run.sh"]
    assert printed.out.split() == [str(out / name) for name in written]
    assert "rendered vllm for llama3-8b-h100-fp8kv (" in printed.err
    assert os.access(out / "vllm" / "run.sh", os.X_OK)
    assert "--kv-cache-dtype\nfp8\n" in (out / "vllm" / "args.txt").read_text()


def test_rendering_again_removes_what_the_earlier_render_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spec that dropped autoscaling must not leave its KEDA ScaledObject in k8s/ for
    ``kubectl apply -f`` to install; files Turnout did not render stay."""
    out, fp8kv = tmp_path / "out", EXAMPLES / "llama3-8b-h100-fp8kv.yaml"
    plain = tmp_path / "plain.yaml"
    plain.write_text(fp8kv.read_text().split("autoscaling:")[0])  # the same spec, not autoscaled
    assert main(["deploy", "render", str(fp8kv), "--target", "k8s", "--out", str(out)]) == 0
    assert (out / "k8s" / "scaledobject.yaml").is_file()
    (out / "k8s" / "kustomization.yaml").write_text("resources: [deployment.yaml]\n")  # the operator's own
    capsys.readouterr()
    assert main(["deploy", "render", str(plain), "--target", "k8s", "--out", str(out)]) == 0
    assert not (out / "k8s" / "scaledobject.yaml").exists()
    assert (out / "k8s" / "kustomization.yaml").is_file()
    assert f"removed {out / 'k8s' / 'scaledobject.yaml'}" in capsys.readouterr().err
    # Another variant rendered into the same folder removes nothing of this one's.
    assert main(["deploy", "render", str(fp8kv), "--target", "k8s", "--out", str(out)]) == 0
    other = EXAMPLES / "llama3-70b-h100-tp4.yaml"
    assert main(["deploy", "render", str(other), "--target", "k8s", "--out", str(out)]) == 0
    assert (out / "k8s" / "scaledobject.yaml").is_file()


@pytest.mark.parametrize(
    ("example", "target", "expected"),
    [
        ("llama3-70b-h100-tp4.yaml", "trtllm", {"trtllm/build.sh", "trtllm/convert.sh", "trtllm/serve.sh"}),
        ("tiny-cpu.yaml", "triton", {"triton/run.sh", "triton/model_repository/tiny-cpu-int4/config.pbtxt"}),
        ("llama3-8b-tpu-v5e.yaml", "k8s", {"k8s/deployment.yaml", "k8s/service.yaml", "k8s/rayservice.yaml"}),
        ("llama3-8b-awq.yaml", "ray", {"ray/serve_config.yaml"}),
    ],
)
def test_render_each_target(tmp_path: Path, example: str, target: str, expected: set[str]) -> None:
    assert (
        main(["deploy", "render", str(EXAMPLES / example), "--target", target, "--out", str(tmp_path)]) == 0
    )
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert expected <= written


def test_target_that_does_not_apply_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = EXAMPLES / "llama3-8b-tpu-v5e.yaml"
    assert main(["deploy", "render", str(spec), "--target", "trtllm", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "target trtllm does not apply to llama3-8b-tpu-v5e" in err
    assert "runs vllm on google tpu-v5e" in err
    assert "(its targets: vllm, ray, k8s)" in err
    assert not (tmp_path / "o").exists()


def test_invalid_spec_is_refused_with_its_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(VALID.replace("h100-80gb", "a100-80gb") + "tensor_parallel: 3\ndevice_count: 3\n")
    assert main(["deploy", "render", str(spec), "--target", "vllm", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "would not deploy; nothing rendered" in err
    assert "tensor_parallel: 3 does not divide the 32 attention heads" in err
    assert not (tmp_path / "o").exists()


def test_unreadable_or_malformed_spec_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["deploy", "render", str(tmp_path / "missing.yaml"), "--target", "k8s", "--out", str(tmp_path)])
        == 2
    )
    assert "cannot read spec" in capsys.readouterr().err
    spec = tmp_path / "typo.yaml"
    spec.write_text(VALID + "replcas: 2\n")
    assert main(["deploy", "render", str(spec), "--target", "k8s", "--out", str(tmp_path)]) == 2
    assert "replcas: unknown field" in capsys.readouterr().err


def test_a_spec_the_target_cannot_render_exits_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import deploy.render
    from deploy.render.triton_pb import config_text

    def render(spec: object, target: str) -> object:  # what a value past a protobuf field's range does
        return {"triton/x/config.pbtxt": config_text({"name": "x", "max_batch_size": 3_000_000_000})}

    monkeypatch.setattr(deploy.render, "render", render)
    spec = EXAMPLES / "tiny-cpu.yaml"
    assert main(["deploy", "render", str(spec), "--target", "triton", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{spec}: cannot render triton: Triton model config x: " in err and "max_batch_size" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_batch_sizes_past_int32_are_refused_by_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Triton's max_batch_size is an int32: 3e9 crashed the triton render with a protobuf ParseError.
    spec = tmp_path / "huge.yaml"
    spec.write_text(
        (EXAMPLES / "tiny-cpu.yaml").read_text().replace("max_num_seqs: 16", "max_num_seqs: 3000000000")
    )
    assert main(["deploy", "validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"{spec}: invalid variant spec" in err
    assert "batching.max_num_seqs: Input should be less than or equal to 2147483647" in err


def test_unknown_target_is_an_argument_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "deploy", "render", str(EXAMPLES / "tiny-cpu.yaml"),
         "--target", "helm", "--out", "/tmp/unused"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2
    assert "invalid choice: 'helm'" in done.stderr


def test_render_as_a_subprocess(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "deploy", "render",
         str(EXAMPLES / "llama3-70b-mi300x-tp2.yaml"), "--target", "k8s", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    deployment = (tmp_path / "k8s" / "deployment.yaml").read_text()
    assert "amd.com/gpu: '2'" in deployment
    assert "turnout.dev/variant-id: " in deployment


def test_cli_target_choices_match_the_renderers() -> None:
    from deploy.cli import RENDER_TARGETS
    from deploy.render import TARGETS

    assert RENDER_TARGETS == TARGETS


def test_plan_refuses_a_prices_file_with_nan_or_inf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: plan printed nan, and --json wrote Infinity (not JSON).
    prices = tmp_path / "prices.yaml"
    for value in (".nan", ".inf"):
        prices.write_text(f"h100-80gb: {value}\n")
        spec = str(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")
        assert main(["plan", spec, "--accelerators", "h100-80gb", "--prices", str(prices), "--json"]) == 2
        printed = capsys.readouterr()
        assert printed.out == "" and f"{prices}: h100-80gb: expected a finite price" in printed.err


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("{architecture: llama-9}", "model.architecture: unknown architecture"),
        ("{path: ./absent}", "model.path: "),
    ],
)
def test_a_model_that_cannot_be_read_exits_2_naming_the_file_in_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, field: str
) -> None:
    # validate said "would not deploy" (exit 1) while plan exited 2 without the file name.
    spec = tmp_path / "unreadable.yaml"
    spec.write_text(
        VALID.replace(
            "model: {architecture: llama-3-8b, served_name: meta-llama/Meta-Llama-3-8B-Instruct}",
            f"model: {model}",
        )
    )
    for argv in (
        ["deploy", "validate", str(spec)],
        ["plan", str(spec)],
        ["deploy", "render", str(spec), "--target", "vllm", "--out", str(tmp_path / "o")],
    ):
        assert main(argv) == 2, argv
        printed = capsys.readouterr()
        assert printed.err.startswith(f"turnout: {spec}: {field}"), (argv, printed.err)
        assert "would not deploy" not in printed.out + printed.err
