"""serving.ray_app builds the application the renderer describes, and refuses what it cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray Serve is not installed: pip install 'turnout[ray]'")

from backends.settings import BatchingSettings, EmbeddedSettings
from deploy.render.ray_serve import serve_config
from deploy.spec import AutoscalingSpec, load_spec
from serving import ray_app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
SPECS = REPO / "tests" / "golden" / "render" / "_specs"


def _bound(app: Any) -> dict[str, Any]:
    """Every deployment bound into ``app`` (the ingress and everything it holds), by name."""
    found: dict[str, Any] = {}
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
        found[bound.name] = node
        pending.extend(bound.init_args)
        pending.extend(bound.init_kwargs.values())
    return found


def _application(path: Path) -> dict[str, Any]:
    application: dict[str, Any] = serve_config(load_spec(path))["applications"][0]
    return application


def test_the_rendered_embedded_config_builds_the_deployments_it_configures() -> None:
    application = _application(EXAMPLES / "tiny-cpu.yaml")
    bound = _bound(ray_app.build_app(application["args"]))
    assert {d["name"] for d in application["deployments"]} == set(bound)
    gateway = bound["TurnoutGateway"]._bound_deployment
    assert gateway.num_replicas == application["args"]["gateway_replicas"] == 2


def test_a_rendered_remote_engine_is_reached_at_its_engine_url() -> None:
    application = _application(SPECS / "tiny-cpu-vllm.yaml")
    assert application["args"]["engine_url"] == "http://tiny-cpu-vllm:8000/v1"
    bound = _bound(ray_app.build_app(application["args"]))
    assert set(bound) == {"TurnoutGateway", "TurnoutRateCounter"}  # the engine is its own server
    config = bound["TurnoutGateway"]._bound_deployment.init_args[0]
    (variant,) = config["variants"].values()
    assert variant["kind"] == "openai_http" and variant["base_url"] == "http://tiny-cpu-vllm:8000/v1"
    assert variant["preset"] == "vllm-cpu" and variant["model"] == "turnout-tiny"
    assert list(config["routes"]) == ["turnout-tiny"]
    assert "store" not in config  # each replica reads TURNOUT_STORE_URL where it runs


def test_a_rendered_triton_engine_gets_the_triton_adapter() -> None:
    args = _application(SPECS / "llama3-8b-triton-vllm-a100.yaml")["args"]
    config = _bound(ray_app.build_app(args))["TurnoutGateway"]._bound_deployment.init_args[0]
    (variant,) = config["variants"].values()
    assert variant["kind"] == "triton" and variant["url"] == "http://llama3-8b-triton-vllm:8000/"


def test_a_remote_engine_without_an_engine_url_is_refused_with_what_to_do() -> None:
    args = dict(_application(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")["args"])
    del args["engine_url"]
    with pytest.raises(ValueError, match="engine_url must say where"):
        ray_app.build_app(args)


def test_a_gateway_config_gets_one_engine_deployment_per_embedded_variant() -> None:
    assert set(_bound(ray_app.build_app({"gateway_replicas": 2}))) == {
        "TurnoutGateway",
        "TurnoutRateCounter",
        "TurnoutEngine-turnout-tiny",
        "TurnoutEngine-turnout-tiny-int8",
        "TurnoutEngine-turnout-tiny-int4",
    }


def test_a_wrong_variant_id_is_refused() -> None:
    args = _application(EXAMPLES / "tiny-cpu.yaml")["args"]
    with pytest.raises(ValueError, match="does not match"):
        ray_app.build_app({**args, "variant_id": "000000000000"})


def test_engine_replicas_autoscale_by_default_and_follow_the_spec() -> None:
    settings = EmbeddedSettings(batching=BatchingSettings(max_batch_size=8, max_queue_size=64))
    assert ray_app.engine_options(None, settings) == {
        "max_ongoing_requests": 64,
        "autoscaling_config": {
            "min_replicas": 1, "initial_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 8.0,
        },
    }  # fmt: skip
    fixed = load_spec(EXAMPLES / "tiny-cpu.yaml")
    assert ray_app.engine_options(fixed, settings) == {"max_ongoing_requests": 64, "num_replicas": 1}
    scaling = AutoscalingSpec(min_replicas=1, max_replicas=3, target_ongoing_requests=4)
    scaled = fixed.model_copy(update={"replicas": 2, "autoscaling": scaling})
    assert ray_app.engine_options(scaled, settings)["autoscaling_config"] == {
        "min_replicas": 1, "initial_replicas": 2, "max_replicas": 3, "target_ongoing_requests": 4.0,
    }  # fmt: skip


def test_serves_proxy_queues_a_bounded_number_of_requests_for_the_gateway() -> None:
    """Past the replicas' 1,024 ongoing requests each, Serve's proxy answers 503 rather than
    queueing without bound (its default): stalled uploads had every later request wait for good."""
    config = ray_app.GATEWAY_DEPLOYMENT._deployment_config
    assert (config.max_ongoing_requests, config.max_queued_requests) == (1024, 1024)


def test_the_rayservice_serves_the_shipped_model_from_its_own_install() -> None:
    """In Turnout's Ray image the shipped model is installed with the package: the RayService's
    config says so (``shipped_model``) instead of a /models/<name> an operator would have to fill."""
    application = serve_config(load_spec(EXAMPLES / "tiny-cpu.yaml"), container=True)["applications"][0]
    assert application["args"]["shipped_model"] is True and "model_source" not in application["args"]
    bound = _bound(ray_app.build_app(application["args"]))
    variant_id, engine = bound["TurnoutEngine"]._bound_deployment.init_args[:2]
    settings = EmbeddedSettings.model_validate(engine)
    assert variant_id == application["args"]["variant_id"]
    assert settings.model_dir is not None and settings.model_dir.name == "int4"
    assert (settings.model_dir / "genai_config.json").is_file()
    assert settings.spec_name == "tiny-cpu-int4"  # turnout_variant_info names the id
