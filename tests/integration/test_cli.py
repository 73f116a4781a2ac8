"""``turnout serve`` as a user runs it: a bad config stops it at start with a clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_invalid_config_fails_at_start(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "variants:\n  a: {kind: embedded, precision: fp64}\nroutes:\n  a: {targets: [{variant: a}]}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert str(config) in done.stderr
    assert "variants.a.precision" in done.stderr
    assert "fp32" in done.stderr  # the reason lists what is allowed


def test_help_lists_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert "serve" in done.stdout and "model" in done.stdout
