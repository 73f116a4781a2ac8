"""``turnout backends up vllm -- OPTIONS``: vLLM's own options reach the server it starts.

The command users run (README, "real backends"), in the foreground as they run it, with an
option whose effect shows in an answer: ``--enable-prompt-tokens-details`` adds
``prompt_tokens_details`` to usage. Options turnout sets itself are a usage error.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from deploy.vllm_runtime import VllmError, ensure_vllm
from serving.launcher import free_port
from tests.integration.foreground_cli import read_lines, stop_like_a_user, wait_for_line

START_LIMIT = 240.0


def test_vllm_options_reach_the_server() -> None:
    try:
        ensure_vllm()
    except VllmError as exc:
        pytest.skip(f"vLLM could not be installed ({exc}); run: turnout backends up vllm")
    port = free_port()
    cmd = [sys.executable, "-m", "serving.cli", "backends", "up", "vllm", "--port", str(port)]
    cmd += ["--", "--enable-prompt-tokens-details"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: list[bytes] = []
    try:
        lines = read_lines(proc)
        assert wait_for_line(lines, b"vllm ready", seen, START_LIMIT), b"".join(seen)
        body = {"model": "turnout-tiny", "messages": [{"role": "user", "content": "12+34="}], "max_tokens": 4}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60)
        assert reply.status_code == 200
        assert "prompt_tokens_details" in reply.json()["usage"]
    finally:
        stop_like_a_user(proc)
    assert proc.returncode == 0, b"".join(seen)


def test_an_option_turnout_sets_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "backends", "up", "vllm", "--", "--port=9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--port is set by turnout (use its own option)" in done.stderr
