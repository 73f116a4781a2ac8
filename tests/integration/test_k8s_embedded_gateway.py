"""The embedded engine's Kubernetes Deployment serves its spec: its pod's command, run here.

The Deployment runs ``turnout serve --config /etc/turnout/gateway.yaml`` on the ConfigMap the
render writes. Here that file is taken from the rendered ConfigMap and served by a real
``turnout serve`` with the same arguments, so what a pod would answer is checked, not the YAML's
looks: the spec's served name, its id in ``x-turnout-variant``, its batching and precision.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import yaml

from deploy.model.artifacts import hf_dir
from deploy.render import render
from deploy.render.k8s_gateway import uses_shipped_model
from deploy.spec import load_spec
from serving.launcher import gateway_process

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "deploy" / "examples" / "tiny-cpu.yaml"


def _rendered(spec_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    files = render(load_spec(spec_path), "k8s")
    config_map = yaml.safe_load(files["k8s/configmap.yaml"])
    deployment = yaml.safe_load(files["k8s/deployment.yaml"])
    return config_map, deployment


def test_the_pod_command_serves_the_spec_with_its_own_id_and_settings(tmp_path: Path) -> None:
    spec = load_spec(TINY)
    config_map, deployment = _rendered(TINY)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    config_path = Path(args[args.index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    # the shipped model is in the image: no models volume to provision
    assert uses_shipped_model(spec) and [v["name"] for v in pod["volumes"]] == [mount["name"]]

    gateway_yaml = tmp_path / config_path.name
    gateway_yaml.write_text(config_map["data"][config_path.name])
    store = {"TURNOUT_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"}
    with gateway_process(gateway_yaml, env=store) as gateway:  # the pod also binds 0.0.0.0:8000
        models = httpx.get(gateway.url + "/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["turnout-tiny-int4"]
        body = {"model": "turnout-tiny-int4", "messages": [{"role": "user", "content": "12+34="}]}
        reply = httpx.post(gateway.url + "/v1/chat/completions", json=body)
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "640"
        assert reply.headers["x-turnout-variant"] == spec.id
        info = httpx.get(gateway.url + "/metrics").text
        assert f'variant="{spec.id}"' in info and 'engine="onnxruntime-genai"' in info
        assert f'spec="{spec.name}"' in info  # the id's name, as a gateway's specs: gives it
    variant = yaml.safe_load(config_map["data"][config_path.name])["variants"][spec.id]
    assert variant["precision"] == "int4" and variant["batching"] == {
        "max_batch_size": 16,
        "max_queue_delay_ms": 2.0,
    }


def test_weights_of_its_own_come_from_the_models_volume(tmp_path: Path) -> None:
    """A spec whose model is not the shipped one reads its ONNX build from /models/<name>."""
    shutil.copytree(hf_dir(), tmp_path / "my-model")
    text = TINY.read_text().replace("../model/artifacts/turnout-tiny/hf", "my-model")
    (tmp_path / "mine.yaml").write_text(text.replace("name: tiny-cpu-int4", "name: mine"))
    config_map, deployment = _rendered(tmp_path / "mine.yaml")
    variant = next(iter(yaml.safe_load(config_map["data"]["gateway.yaml"])["variants"].values()))
    assert variant["model_dir"] == "/models/mine"
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "turnout-models"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in mounts
