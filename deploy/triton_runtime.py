"""A real Triton Inference Server on this machine's CPU: install it (cached) and run it.

Operator and test tooling, not the request path: ``tritonserver`` is the engine at the far
end of ``backends/triton.py``. PyPI's ``nvidia-pytriton`` wheel carries a ``tritonserver``
2.51 binary (python backend only) and pins numpy<2, so it gets a venv of its own under the
cache directory, with ``onnxruntime-genai`` for the models in ``deploy/triton_repo``; made
once and reused (a marker file records the versions).

DESIGN.md's quirks: the binary, backends and caches are copied out of the wheel with this
Python's (3.11) python-backend stub; ``LD_LIBRARY_PATH`` holds the wheel's bundled libraries
and libpython's folder, and the venv's ``bin`` comes first on ``PATH`` (otherwise the stub
picks another numpy and garbles BYTES tensors). The server is stopped with SIGTERM and its
python-backend shared memory is removed from ``/dev/shm`` (each server has its own prefix).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from deploy.local_ports import refuse_taken
from deploy.vllm_runtime import cache_dir

REQUIREMENTS = ("nvidia-pytriton==0.7.0", "onnxruntime-genai==0.18.0", "numpy<2")
PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
_VERSIONS = " ".join((*REQUIREMENTS, f"python{PY_VERSION}"))  # what the marker file records
_MARKER = "turnout-triton.ok"
_SHM_PREFIX = "triton_python_backend_shm_region_"
INSTALL_HINT = "turnout backends up triton  (installs into $TURNOUT_CACHE/triton, default ~/.cache/turnout)"
_OFFLINE_SIGNS = (  # pip's ways of saying that PyPI cannot be reached: the tests skip, not fail
    "No matching distribution found", "Could not find a version", "NewConnectionError",
    "Temporary failure in name resolution", "Network is unreachable", "ConnectTimeoutError",
)  # fmt: skip


class TritonError(RuntimeError):
    """Installing or running Triton failed; the message says which step and shows its output."""

    def __init__(self, message: str, *, offline: bool = False) -> None:
        super().__init__(message)
        self.offline = offline  # PyPI was unreachable (not a bug in the install steps)


@dataclass(frozen=True, slots=True)
class TritonInstall:
    """The cached venv and the server folder copied out of the wheel."""

    root: Path
    libs_dir: Path  # <site-packages>/nvidia_pytriton.libs
    python_libdir: Path  # where libpython3.11.so lives (<python prefix>/lib)

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def server_dir(self) -> Path:
        return self.root / "server"

    @property
    def tritonserver(self) -> Path:
        return self.server_dir / "bin" / "tritonserver"

    def env(self) -> dict[str, str]:
        """The environment ``tritonserver`` (and its python-backend stubs) must run in."""
        env = dict(os.environ)
        libs = f"{self.libs_dir}:{self.python_libdir}"
        env["LD_LIBRARY_PATH"] = f"{libs}:{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else libs
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '')}"
        for name in ("PYTHONPATH", "PYTHONHOME"):  # the stub must see the venv's numpy, not ours
            env.pop(name, None)
        return env


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(cmd: list[str], step: str, timeout: float) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:  # pip that long: PyPI is unreachable or crawling
        raise TritonError(
            f"{step} timed out after {timeout:.0f}s: {' '.join(cmd)}", offline="pip" in cmd
        ) from exc
    if done.returncode != 0:
        out, offline = done.stdout + done.stderr, any(sign in done.stderr for sign in _OFFLINE_SIGNS)
        raise TritonError(
            f"{step} failed (exit {done.returncode}): {' '.join(cmd)}\n{_tail(out)}", offline=offline
        )
    return done.stdout


def installed(root: Path | None = None) -> TritonInstall | None:
    """The cached install if it is complete and has the expected versions, else None."""
    root = root or cache_dir() / "triton"
    try:
        info = json.loads((root / _MARKER).read_text())
        install = TritonInstall(root, Path(info["libs_dir"]), Path(info["python_libdir"]))
    except (OSError, ValueError, KeyError):
        return None
    complete = install.tritonserver.is_file() and (install.venv / "bin" / "python").is_file()
    return install if complete and info.get("versions") == _VERSIONS else None


def ensure_triton(root: Path | None = None, timeout: float = 600.0) -> TritonInstall:
    """The cached Triton install, made on first use (about 30 s here; a few ms once cached)."""
    root = root or cache_dir() / "triton"
    found = installed(root)
    if found is not None:
        return found
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".install.lock").open("w") as lock:  # one installer at a time (parallel test runs)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return installed(root) or _install(root, timeout)


def _install(root: Path, timeout: float) -> TritonInstall:
    (root / _MARKER).unlink(missing_ok=True)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], "creating the Triton venv", 120)
    python = str(venv / "bin" / "python")
    _run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *REQUIREMENTS],
        f"pip install {' '.join(REQUIREMENTS)}",
        timeout,
    )
    probe = (
        "import json, sysconfig, numpy, onnxruntime_genai, pytriton, pathlib;"
        "assert int(numpy.__version__.split('.')[0]) < 2, numpy.__version__;"
        "site = pathlib.Path(pytriton.__file__).parent.parent;"
        "print(json.dumps({'site': str(site), 'libdir': sysconfig.get_config_var('LIBDIR')}))"
    )
    paths = json.loads(_run([python, "-c", probe], "importing pytriton, numpy and onnxruntime_genai", 120))
    site = Path(paths["site"])
    dist = site / "pytriton" / "tritonserver"
    stub = dist / "python_backend_stubs" / PY_VERSION / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonError(f"nvidia-pytriton has no python-backend stub for Python {PY_VERSION} ({stub})")
    server = root / "server"
    shutil.rmtree(server, ignore_errors=True)
    for part in ("bin", "backends", "caches"):
        shutil.copytree(dist / part, server / part)
    shutil.copy2(stub, server / "backends" / "python" / "triton_python_backend_stub")
    install = TritonInstall(root, site / "nvidia_pytriton.libs", Path(paths["libdir"]))
    info = {"versions": _VERSIONS, "libs_dir": str(install.libs_dir), "python_libdir": paths["libdir"]}
    (root / _MARKER).write_text(json.dumps(info))
    return install


@dataclass(slots=True)
class TritonServer:
    """A running ``tritonserver``; :meth:`stop` ends it and clears its shared memory."""

    proc: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    metrics_port: int
    log: Path
    shm_prefix: str
    started_in_s: float = 0.0
    _stopped: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log_tail(self, lines: int = 40) -> str:
        """The log's error lines (``E…`` records, load failures), then its last ``lines`` lines."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        errors = [line for line in text.splitlines() if line.startswith("E") or "UNAVAILABLE" in line]
        head = "\n".join(errors[:20])
        return f"errors:\n{head}\n...\n{_tail(text, lines)}" if errors else _tail(text, lines)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (then SIGKILL after ``timeout``) the server's process group; clear its shm."""
        if self._stopped:
            return
        self._stopped = True
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError):  # a stub left behind, or a server that hung
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        for region in Path("/dev/shm").glob(f"{self.shm_prefix}*"):
            region.unlink(missing_ok=True)


def start_triton(
    install: TritonInstall,
    repo_dir: Path,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    *,
    timeout: float = 60.0,
    log: Path | None = None,
    extra_args: tuple[str, ...] = (),
) -> TritonServer:
    """Start ``tritonserver`` on 127.0.0.1 and wait (at most ``timeout``) until it is ready."""
    busy = refuse_taken((http_port, grpc_port, metrics_port), "tritonserver")
    if busy is not None:
        raise TritonError(busy)
    log = log or install.root / "logs" / f"tritonserver-{http_port}.log"  # default: one per port, reused
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        out = log.open("wb")
    except OSError as exc:
        raise TritonError(f"cannot write the log {log}: {exc.strerror or exc}") from None
    shm_prefix = f"{_SHM_PREFIX}turnout_{uuid.uuid4().hex[:12]}_"
    cmd = [
        str(install.tritonserver), "--model-repository", str(repo_dir),
        "--backend-directory", str(install.server_dir / "backends"),
        "--cache-directory", str(install.server_dir / "caches"),
        "--http-address", "127.0.0.1", "--http-port", str(http_port),
        "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port),
        "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
        "--allow-http", "true", "--allow-grpc", "true", "--allow-metrics", "true",
        "--allow-gpu-metrics", "false", "--allow-cpu-metrics", "true",
        "--pinned-memory-pool-byte-size", "0", "--strict-readiness", "true",
        "--exit-timeout-secs", "5", "--log-verbose", "0",
        "--backend-config", f"python,shm-region-prefix-name={shm_prefix}",
        *extra_args,
    ]  # fmt: skip
    started = time.monotonic()
    try:
        with out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=install.env(), start_new_session=True
            )
    except OSError as exc:  # the install is broken (a file it cannot run): installed() is not enough
        raise TritonError(
            f"cannot run {cmd[0]} ({exc.strerror or exc}); remove {install.root} and run "
            "`turnout backends up triton` again to reinstall it"
        ) from exc
    server = TritonServer(proc, http_port, grpc_port, metrics_port, log, shm_prefix)
    try:
        _wait_ready(server, started, timeout, cmd)
    except BaseException:  # also Ctrl-C while waiting: never leave a server behind
        server.stop()
        raise
    server.started_in_s = time.monotonic() - started
    return server


def _wait_ready(server: TritonServer, started: float, timeout: float, cmd: list[str]) -> None:
    while True:
        if server.proc.poll() is not None:
            raise TritonError(
                f"tritonserver exited with {server.proc.returncode} while starting "
                f"({' '.join(cmd[:3])} …); log {server.log}:\n{server.log_tail()}"
            )
        url = f"{server.http_url}/v2/health/ready"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
            if reply.status == 200:
                return
        if time.monotonic() > started + timeout:
            raise TritonError(
                f"tritonserver not ready within {timeout:.0f}s; log {server.log}:\n{server.log_tail()}"
            )
        time.sleep(0.1)


@contextlib.contextmanager
def triton_server(
    install: TritonInstall,
    repo_dir: Path,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    *,
    timeout: float = 60.0,
    log: Path | None = None,
) -> Iterator[TritonServer]:
    """:func:`start_triton` for the length of a ``with`` block; always stopped."""
    server = start_triton(install, repo_dir, http_port, grpc_port, metrics_port, timeout=timeout, log=log)
    try:
        yield server
    finally:
        server.stop()
