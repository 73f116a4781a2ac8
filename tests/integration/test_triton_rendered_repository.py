"""A spec rendered for Triton, served as a user serves it, answering through the gateway.

The whole path with the CLI's own commands: ``turnout deploy render deploy/examples/tiny-cpu.yaml
--target triton`` writes a model repository; ``turnout backends up triton --model-repository``
serves it as it is in the cached ``tritonserver`` (in the foreground, until Ctrl-C); a
``turnout serve --config`` gateway with a ``triton`` variant naming the rendered models answers
the official ``openai`` client from it, whole and streamed. Ctrl-C leaves the rendered
repository where it was (only a staged copy of the shipped one is removed). Asking for the
shipped repository's options with it, naming a folder that holds no model, or one rendered for
a GPU engine (a backend this CPU server lacks), is refused with exit 2 before anything starts.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import openai
import yaml

from tests.integration.control_plane import running_gateway, write_config
from tests.integration.engines import distinct_ports, triton_install_or_skip
from tests.integration.foreground_cli import read_lines, stop_like_a_user, wait_for_line

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "deploy" / "examples" / "tiny-cpu.yaml"
CLI = [sys.executable, "-m", "serving.cli"]


def _render(out: Path, spec: Path = SPEC) -> Path:
    done = subprocess.run(
        [*CLI, "deploy", "render", str(spec), "--target", "triton", "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out / "triton" / "model_repository"


def _embedding_spec(folder: Path) -> Path:
    """tiny-cpu.yaml with ``task: embed``: its repository gets an embedding model too."""
    data = yaml.safe_load(SPEC.read_text())
    data["task"] = "embed"
    data["model"]["path"] = str((SPEC.parent / data["model"]["path"]).resolve())
    path = folder / "tiny-cpu-embed.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_rendered_repository_served_by_the_cli_answers_through_the_gateway(tmp_path: Path) -> None:
    triton_install_or_skip()
    plain = _render(tmp_path / "plain")  # a generating spec: no second copy of the model to embed
    assert sorted(path.parent.name for path in plain.glob("*/config.pbtxt")) == [
        "tiny-cpu-int4",
        "tiny-cpu-int4-stream",
    ]
    repository = _render(tmp_path / "out", _embedding_spec(tmp_path))
    models = sorted(path.parent.name for path in repository.glob("*/config.pbtxt"))
    assert models == ["tiny-cpu-int4", "tiny-cpu-int4-embed", "tiny-cpu-int4-stream"]
    http, grpc, metrics = distinct_ports(3)
    ports = ["--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    up = [*CLI, "backends", "up", "triton", "--model-repository", str(repository), *ports]
    up += ["--log", str(tmp_path / "tritonserver.log")]
    proc = subprocess.Popen(up, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: list[bytes] = []
    try:
        lines = read_lines(proc)
        assert wait_for_line(lines, b"triton ready", seen, 90), b"".join(seen)
        variant = {
            "kind": "triton",
            "preset": "turnout-tiny",
            "url": f"http://127.0.0.1:{http}",
            "model": "tiny-cpu-int4",
            "stream_model": "tiny-cpu-int4-stream",
            "embed_model": "tiny-cpu-int4-embed",
        }
        local = {"kind": "embedded", "precision": "int4"}
        config = write_config(
            tmp_path / "gateway.yaml",
            {"rendered": variant, "local": local},
            {"tiny": {"targets": [{"variant": "rendered"}]}, "local": {"targets": [{"variant": "local"}]}},
        )
        with running_gateway(config) as gateway:
            client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test", max_retries=0)
            asked = [{"role": "user", "content": "03+45="}]
            whole = client.chat.completions.create(model="tiny", messages=asked, max_tokens=8, temperature=0)
            assert whole.choices[0].message.content == "840"
            assert whole.usage is not None and whole.usage.completion_tokens == 4  # 8 4 0 </s>
            pieces = client.chat.completions.create(
                model="tiny", messages=asked, max_tokens=8, temperature=0, stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in pieces if c.choices) == "840"
            texts = ["03+45=", "the red"]
            embedded = client.embeddings.create(model="tiny", input=texts, encoding_format="float")
            same = client.embeddings.create(model="local", input=texts, encoding_format="float")
            for mine, theirs in zip(embedded.data, same.data, strict=True):
                assert max(abs(a - b) for a, b in zip(mine.embedding, theirs.embedding, strict=True)) < 1e-5
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    finally:
        stop_like_a_user(proc)
    assert wait_for_line(lines, None, seen, 30)
    out = b"".join(seen)
    assert proc.returncode == 0, out
    assert f"models from {repository.resolve()} (as given)".encode() in out
    assert sorted(path.parent.name for path in repository.glob("*/config.pbtxt")) == models  # left as it was


def test_the_shipped_repository_options_and_a_folder_without_models_are_refused(tmp_path: Path) -> None:
    repository = _render(tmp_path / "out")
    http, grpc, metrics = distinct_ports(3)
    ports = ["--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    up = [*CLI, "backends", "up", "triton", *ports, "--model-repository"]
    empty = tmp_path / "empty"
    empty.mkdir()
    for extra, said in (
        ([str(repository), "--precision", "int8"], "--precision is for the shipped repository"),
        ([str(repository), "--repo-dir", str(tmp_path / "r")], "--repo-dir is for the shipped repository"),
        ([str(empty)], f"--model-repository {empty} holds no model"),
        ([str(tmp_path / "nowhere")], f"--model-repository {tmp_path / 'nowhere'} is not a folder"),
    ):
        done = subprocess.run([*up, *extra], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()


def test_a_repository_rendered_for_a_gpu_engine_is_refused_naming_the_backend(tmp_path: Path) -> None:
    """It left tritonserver neither ready nor exiting until ``--timeout`` (120 s) ran out."""
    triton_install_or_skip()  # the check reads which backends the installed server has
    http, grpc, metrics = distinct_ports(3)
    ports = ["--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    specs = REPO / "tests" / "golden" / "render" / "_specs"
    for name, model, backend in (
        ("llama3-8b-triton-trtllm-h100", "tensorrt_llm", "tensorrtllm"),
        ("llama3-8b-triton-vllm-a100", "llama3-8b-triton-vllm", "vllm"),
    ):
        repository = _render(tmp_path / name, specs / f"{name}.yaml")
        up = [*CLI, "backends", "up", "triton", *ports, "--model-repository", str(repository)]
        done = subprocess.run(up, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert f"model {model} needs Triton's '{backend}' backend" in done.stderr
        assert "it has: python" in done.stderr and "Traceback" not in done.stderr


def test_a_model_that_names_its_framework_by_platform_is_checked_too(tmp_path: Path) -> None:
    """``platform: "onnxruntime_onnx"`` needs the onnxruntime backend as surely as ``backend:``
    would; an ensemble's platform is built in and needs none."""
    triton_install_or_skip()
    repository = tmp_path / "repo"
    for model, platform in (("pipeline", "ensemble"), ("scorer", "onnxruntime_onnx")):
        (repository / model / "1").mkdir(parents=True)
        (repository / model / "config.pbtxt").write_text(f'name: "{model}"\nplatform: "{platform}"\n')
    http, grpc, metrics = distinct_ports(3)
    ports = ["--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    up = [*CLI, "backends", "up", "triton", *ports, "--model-repository", str(repository)]
    done = subprocess.run(up, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "model scorer needs Triton's 'onnxruntime' backend" in done.stderr, done.stderr
    assert "pipeline" not in done.stderr and "Traceback" not in done.stderr
