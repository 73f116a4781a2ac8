"""serving.ray_app builds the application the renderer describes, and refuses what it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray Serve is not installed: pip install 'turnout[ray]'")

from deploy.render.ray_serve import serve_config
from deploy.spec import load_spec
from serving import ray_app

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def _deployment_names(app: object) -> set[str]:
    """Names of the deployments bound into ``app`` (the ingress and everything it holds)."""
    found: set[str] = set()
    pending = [app]
    while pending:
        node = pending.pop()
        bound = getattr(node, "_bound_deployment", None)
        if bound is None:
            if isinstance(node, dict):
                pending.extend(node.values())
            elif isinstance(node, list | tuple):
                pending.extend(node)
            continue
        found.add(bound.name)
        pending.extend(bound.init_args)
        pending.extend(bound.init_kwargs.values())
    return found


def test_the_rendered_config_builds_with_the_deployment_names_it_configures() -> None:
    spec = load_spec(EXAMPLES / "tiny-cpu.yaml")
    application = serve_config(spec)["applications"][0]
    app = ray_app.build_app(application["args"])
    assert {d["name"] for d in application["deployments"]} <= _deployment_names(app)


def test_a_gateway_config_gets_one_engine_deployment_per_embedded_variant() -> None:
    app = ray_app.build_app({"gateway_replicas": 2})
    assert _deployment_names(app) == {
        "TurnoutGateway",
        "TurnoutRateCounter",
        "TurnoutEngine-turnout-tiny",
        "TurnoutEngine-turnout-tiny-int8",
        "TurnoutEngine-turnout-tiny-int4",
    }


def test_a_gpu_engine_spec_is_refused_with_what_to_do_instead() -> None:
    spec = load_spec(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")
    with pytest.raises(ValueError, match="runs as its own server"):
        ray_app.build_app(serve_config(spec)["applications"][0]["args"])


def test_a_wrong_variant_id_is_refused() -> None:
    args = serve_config(load_spec(EXAMPLES / "tiny-cpu.yaml"))["applications"][0]["args"]
    with pytest.raises(ValueError, match="does not match"):
        ray_app.build_app({**args, "variant_id": "000000000000"})
