"""Golden files: every example spec renders, for every target that applies, byte for byte as stored.

The specs are ``deploy/examples/*.yaml`` plus test-only ones in ``tests/golden/render/_specs/``
(engines the examples do not use: Triton's backends, trtllm-serve with AWQ, vLLM on CPU and
TPU v6e with autoscaling). Files live in ``tests/golden/render/<spec file stem>/<target>/…``;
absolute paths of this checkout are stored as ``<checkout>``. After an intended change, re-create
them with ``TURNOUT_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_render_golden.py`` and
review the diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.render import TARGETS, Target, applicable_targets, render
from deploy.spec import VariantSpec, load_spec

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "render"
SPEC_FILES = sorted((REPO / "deploy" / "examples").glob("*.yaml")) + sorted(
    (GOLDEN / "_specs").glob("*.yaml")
)
UPDATE = os.environ.get("TURNOUT_UPDATE_GOLDEN") == "1"
PLACEHOLDER = "<checkout>"


def load(path: Path) -> VariantSpec:
    return load_spec(path)


def normalized(content: str | bytes) -> bytes:
    data = content.encode() if isinstance(content, str) else content
    return data.replace(str(REPO).encode(), PLACEHOLDER.encode())


def cases() -> list[tuple[Path, Target]]:
    return [(path, target) for path in SPEC_FILES for target in applicable_targets(load(path))]


def _golden_files(folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return {str(p.relative_to(folder.parent)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("path", "target"), cases(), ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_render_matches_golden(path: Path, target: Target) -> None:
    files = render(load(path), target)
    base = GOLDEN / path.stem
    stored = _golden_files(base / target)
    assert all(name.startswith(f"{target}/") for name in files), sorted(files)
    if UPDATE:
        for stale in stored - set(files):
            (base / stale).unlink()
        for name, content in files.items():
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            (base / name).write_bytes(normalized(content))
        return
    assert set(files) == stored, (
        f"golden files differ for {path.name} {target}; TURNOUT_UPDATE_GOLDEN=1 re-creates"
    )
    for name, content in files.items():
        expected = (base / name).read_bytes()
        assert normalized(content) == expected, f"{base / name} differs; TURNOUT_UPDATE_GOLDEN=1 re-creates"


def test_every_spec_has_goldens_only_for_its_targets() -> None:
    for path in SPEC_FILES:
        wanted = set(applicable_targets(load(path)))
        present = (
            {p.name for p in (GOLDEN / path.stem).iterdir() if p.is_dir()}
            if (GOLDEN / path.stem).is_dir()
            else set()
        )
        assert present == wanted or UPDATE, (
            f"{path.stem}: golden targets {sorted(present)}, expected {sorted(wanted)}"
        )
    known = {p.stem for p in SPEC_FILES} | {"_specs"}
    orphans = {p.name for p in GOLDEN.iterdir() if p.is_dir()} - known
    assert not orphans, f"golden folders without a spec: {sorted(orphans)}"


def test_every_target_is_covered_by_some_spec() -> None:
    covered = {target for _, target in cases()}
    assert covered == set(TARGETS)
    engines = {load(path).engine for path in SPEC_FILES}
    assert engines == {"vllm", "trtllm", "triton-trtllm", "triton-vllm", "onnxruntime-genai"}


def test_rendering_is_deterministic_across_processes() -> None:
    """Same bytes in a fresh interpreter with another hash seed (no set or dict-order leaks)."""
    script = (
        "import hashlib, sys; from pathlib import Path\n"
        "from deploy.render import applicable_targets, render\nfrom deploy.spec import load_spec\n"
        "h = hashlib.sha256()\n"
        "for p in sys.argv[1:]:\n"
        "    s = load_spec(Path(p))\n"
        "    for t in applicable_targets(s):\n"
        "        for name, c in sorted(render(s, t).items()):\n"
        "            h.update(name.encode()); h.update(c.encode() if isinstance(c, str) else c)\n"
        "print(h.hexdigest())\n"
    )
    digests = set()
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", script, *map(str, SPEC_FILES)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_rendered_shell_scripts_parse() -> None:
    scripts = [
        (path, name, content)
        for path, target in cases()
        for name, content in render(load(path), target).items()
        if name.endswith(".sh")
    ]
    assert len(scripts) > 10
    for path, name, content in scripts:
        assert str(content).startswith("#!/bin/sh\n")
        done = subprocess.run(["sh", "-n"], input=str(content), capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, f"{path.stem} {name}: {done.stderr}"
