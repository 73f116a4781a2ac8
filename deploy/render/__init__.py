"""Renderers: one variant spec → each engine's and platform's own configuration files.

Off the request path: operators run ``turnout deploy render SPEC --target T --out DIR`` before
launch. Each renderer is a pure function ``render_<target>(spec) -> {relative path: content}``
(no clock, no randomness, no I/O beyond the model facts the spec resolves), so the same spec
always renders to the same bytes; the golden-file tests hold them to that.

Targets and the engines they apply to (a renderer is only called for a spec that passed
``deploy.validate``; vendor support is checked there):
- ``vllm`` (engine ``vllm``): server arguments and environment per vendor (``deploy.render.vllm``).
- ``trtllm`` (``trtllm``, ``triton-trtllm``): checkpoint conversion / quantization and
  ``trtllm-build`` commands, and ``trtllm-serve``'s options YAML (``deploy.render.trtllm``).
- ``triton`` (``triton-trtllm``, ``triton-vllm``, ``onnxruntime-genai``): a Triton model
  repository whose ``config.pbtxt`` files are built from Triton's model-config protobuf.
- ``ray`` (every engine): a Ray Serve config for the gateway application (``deploy.render.ray_serve``).
- ``k8s`` (every engine): Deployment + Service for the engine server and a KubeRay RayService.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from deploy.spec import ENGINES, VariantSpec

Target = Literal["vllm", "trtllm", "triton", "ray", "k8s"]
TARGETS: tuple[Target, ...] = ("vllm", "trtllm", "triton", "ray", "k8s")
TARGET_ENGINES: dict[Target, tuple[str, ...]] = {
    "vllm": ("vllm",),
    "trtllm": ("trtllm", "triton-trtllm"),
    "triton": ("triton-trtllm", "triton-vllm", "onnxruntime-genai"),
    "ray": ENGINES,
    "k8s": ENGINES,
}
_MODULES: dict[Target, tuple[str, str]] = {
    "vllm": ("deploy.render.vllm", "render_vllm"),
    "trtllm": ("deploy.render.trtllm", "render_trtllm"),
    "triton": ("deploy.render.triton", "render_triton"),
    "ray": ("deploy.render.ray_serve", "render_ray"),
    "k8s": ("deploy.render.k8s", "render_k8s"),
}
Files = dict[str, str | bytes]


class RenderError(ValueError):
    """A spec the renderer cannot turn into the target's files (the message says which and why);
    ``turnout deploy render`` prints it and exits 2."""


class TargetNotApplicable(RenderError):
    """The spec's engine has no use for the asked target; the message lists the ones it has."""


def applicable_targets(spec: VariantSpec) -> tuple[Target, ...]:
    return tuple(target for target in TARGETS if spec.engine in TARGET_ENGINES[target])


def renderer(target: Target) -> Callable[[VariantSpec], Files]:
    module, name = _MODULES[target]
    function: Callable[[VariantSpec], Files] = getattr(importlib.import_module(module), name)
    return function


def render(spec: VariantSpec, target: Target) -> Files:
    """The files of ``target`` for ``spec``; ``TargetNotApplicable`` when its engine has none."""
    if target not in TARGETS:
        raise TargetNotApplicable(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    if spec.engine not in TARGET_ENGINES[target]:
        engines = ", ".join(TARGET_ENGINES[target])
        raise TargetNotApplicable(
            f"target {target} does not apply to {spec.name}: {target} renders for engines {engines}, and "
            f"{spec.name} runs {spec.engine} on {spec.vendor} {spec.accelerator} "
            f"(its targets: {', '.join(applicable_targets(spec))})"
        )
    return renderer(target)(spec)


def remove_stale(files: Mapping[str, str | bytes], out_dir: Path, variant: str) -> list[Path]:
    """Remove files an earlier render of the same variant (by name) left in the folders
    ``files`` go to (``k8s/``…) that this render did not write: a spec that dropped
    ``autoscaling`` must not leave its old KEDA ScaledObject for ``kubectl apply -f k8s/`` to
    install. Only files whose render header names ``variant`` go, so other variants rendered
    into the same folder (models of one Triton repository) and the operator's own files stay;
    returns what went."""
    mark = f"Rendered by `turnout deploy render` from variant {variant} (".encode()
    folders = {Path(relative).parts[0] for relative in files if len(Path(relative).parts) > 1}
    keep = {out_dir / relative for relative in files}
    removed: list[Path] = []
    for folder in sorted(folders):
        for path in sorted((out_dir / folder).rglob("*")):
            if path in keep or not path.is_file():
                continue
            with path.open("rb") as head:
                if mark in head.read(512):
                    path.unlink()
                    removed.append(path)
    return removed


def write(files: Mapping[str, str | bytes], out_dir: Path) -> list[Path]:
    """Write ``files`` under ``out_dir`` (shell scripts executable); returns the paths written."""
    written: list[Path] = []
    for relative, content in sorted(files.items()):
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        if path.suffix == ".sh":
            path.chmod(0o755)
        written.append(path)
    return written
