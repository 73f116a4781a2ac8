"""The package as a wheel, as the container images install it: the model ships inside it.

Builds the wheel from this checkout (no network: ``--no-build-isolation`` uses the setuptools
already here), installs it alone into a fresh folder and serves from a directory that is not the
checkout, so nothing is read from the repository: ``turnout serve`` with no config must answer
from the model files the wheel carries (the same step deploy/images/Dockerfile runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx

from serving.launcher import free_port, wait_ready

REPO = Path(__file__).resolve().parents[2]
MODEL_FILES = ("genai_config.json", "model.onnx", "model.onnx.data", "tokenizer.json")


def test_the_wheel_alone_serves_the_shipped_model(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(wheels), str(REPO)]  # fmt: skip
    subprocess.run(build, check=True, capture_output=True, timeout=300, cwd=tmp_path)
    wheel = next(wheels.glob("turnout-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for precision in ("fp32", "int8", "int4"):
        for name in MODEL_FILES:
            assert f"deploy/model/artifacts/turnout-tiny/{precision}/{name}" in names
    assert "deploy/model/artifacts/turnout-tiny/hf/model.safetensors" in names

    site = tmp_path / "site"
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--target",
        str(site),
        str(wheel),
    ]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "TURNOUT_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"}
    where = subprocess.run(
        [sys.executable, "-c", "import deploy.model.artifacts as a; print(a.ARTIFACTS_DIR)"],
        env=env, cwd=elsewhere, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout  # the wheel's copy, not the checkout

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = [sys.executable, "-m", "serving.cli", "serve", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(serve, env=env, cwd=elsewhere, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}/ready", proc, 60)
        body = {"model": "turnout-tiny-int8", "messages": [{"role": "user", "content": "12+34="}]}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30)
        assert reply.json()["choices"][0]["message"]["content"] == "640", log.read_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
