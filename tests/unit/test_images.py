"""The container images the Kubernetes render names are the ones deploy/images builds.

No Docker engine runs on this project's machines, so the images are not built here; this checks
what can be checked without one: each Dockerfile names (and builds) the tag the render writes,
on the Python the package requires and the Ray version the RayService declares, and copies every
package the wheel holds. The wheel itself is installed and served in
``tests/integration/test_wheel_install.py``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from deploy.render.common import IMAGES, RAY_VERSION, ray_image

REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO / "deploy" / "images"
BUILT = {
    "Dockerfile": IMAGES[("onnxruntime-genai", "cpu")],
    "ray.Dockerfile": ray_image("cpu"),
}


@pytest.mark.parametrize(("dockerfile", "tag"), sorted(BUILT.items()))
def test_each_image_the_render_names_has_a_dockerfile_that_builds_it(dockerfile: str, tag: str) -> None:
    text = (IMAGES_DIR / dockerfile).read_text()
    assert f"docker build -f deploy/images/{dockerfile} -t {tag} ." in text
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = [name.rstrip("*") for name in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    for package in packages:  # a package left out of the image would be missing from its wheel
        assert f"COPY {package} {package}" in text, package
    assert "FROM python:3.11-slim AS wheel" in text
    assert pyproject["project"]["requires-python"].startswith(">=3.11")


def test_the_ray_image_is_the_ray_version_the_rayservice_declares() -> None:
    text = (IMAGES_DIR / "ray.Dockerfile").read_text()
    assert re.search(rf"^ARG RAY_VERSION={re.escape(RAY_VERSION)}$", text, re.MULTILINE)
    assert "FROM rayproject/ray:${RAY_VERSION}-py311-cpu" in text
    assert "[ray,postgres]" in text  # the gateway workers read TURNOUT_STORE_URL (PostgreSQL)
