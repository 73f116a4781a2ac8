"""The package as a wheel, as the container images install it: the model ships inside it.

Builds the wheel from what deploy/images/Dockerfile copies (its ``COPY`` lines, copied into a
fresh folder, so no stale ``build/`` of the checkout's can slip in; no network:
``--no-build-isolation`` uses the setuptools already here), installs it alone into a fresh folder
and serves from a directory that is not the checkout, so nothing is read from the repository:
``turnout serve`` with no config must answer from the model files the wheel carries.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx

from serving.launcher import free_port, wait_ready

REPO = Path(__file__).resolve().parents[2]
MODEL_FILES = ("genai_config.json", "model.onnx", "model.onnx.data", "tokenizer.json")


def _dockerfile_sources(dest: Path) -> None:
    """Copy what the image's wheel stage copies (``COPY SRC DEST`` from the build context)."""
    dest.mkdir()
    for line in (REPO / "deploy" / "images" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            *sources, _ = line.split()[1:]
            for source in sources:
                path = REPO / source
                ignore = shutil.ignore_patterns("__pycache__")
                if path.is_dir():
                    shutil.copytree(path, dest / source, ignore=ignore)
                else:
                    shutil.copy2(path, dest / source)


def test_the_wheel_alone_serves_the_shipped_model(tmp_path: Path) -> None:
    wheels, source = tmp_path / "wheels", tmp_path / "src"
    _dockerfile_sources(source)
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(wheels), str(source)]  # fmt: skip
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
