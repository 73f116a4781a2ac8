"""Variants declared by deploy specs, served by a real gateway: the spec id is the variant id.

One spec runs the shipped int4 model embedded (``deploy/examples/tiny-cpu.yaml``); another is a
vLLM-on-CPU spec whose server is a fault server on 127.0.0.1. Routes and admin writes name them
by spec name; responses, metrics and stored versions carry the spec ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from backends.fault import FaultServer
from deploy.spec import load_spec
from tests.integration.control_plane import admin, chat, eventually, metric_value, put_route, running_gateway

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
TINY_SPEC = EXAMPLES / "tiny-cpu.yaml"


def _vllm_spec(folder: Path) -> Path:
    hf = TINY_SPEC.parent / "../model/artifacts/turnout-tiny/hf"
    spec = {
        "name": "tiny-vllm-cpu",
        "model": {"path": str(hf.resolve()), "served_name": "fake-model"},
        "engine": "vllm",
        "vendor": "cpu",
        "accelerator": "cpu-x86",
        "dtype": "fp32",
        "kv_cache": {"max_model_len": 512},
        "batching": {"max_num_seqs": 16},
    }
    path = folder / "specs" / "tiny-vllm-cpu.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultServer]:
    with FaultServer(reply="answer from vllm") as server:
        yield server


@pytest.fixture
def setup(tmp_path: Path, upstream: FaultServer) -> Iterator[tuple[str, str, str]]:
    vllm_spec = _vllm_spec(tmp_path)
    config = {
        "specs": [
            {"spec": str(TINY_SPEC)},
            {"spec": "specs/tiny-vllm-cpu.yaml", "base_url": upstream.base_url},  # relative to gateway.yaml
        ],
        "routes": {"tiny": {"targets": [{"variant": "tiny-cpu-int4"}], "fallbacks": ["tiny-vllm-cpu"]}},
        "store": {"url": f"sqlite:///{tmp_path / 'routes.db'}", "poll_interval_s": 0.1},
        "auth": {"anonymous_clients": True},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    with running_gateway(path) as gateway:
        yield gateway.url, load_spec(TINY_SPEC).id, load_spec(vllm_spec).id


def test_spec_id_names_the_variant_everywhere(setup: tuple[str, str, str]) -> None:
    url, tiny_id, vllm_id = setup
    reply = chat(url, "tiny", max_tokens=4, temperature=0)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-turnout-variant"] == tiny_id
    assert metric_value(url, "turnout_variant_info", variant=tiny_id, spec="tiny-cpu-int4") == 1
    assert (
        metric_value(url, "turnout_variant_info", variant=vllm_id, spec="tiny-vllm-cpu", engine="vllm") == 1
    )
    stored = httpx.get(f"{url}/admin/routes/tiny", headers=admin()).json()["spec"]
    assert stored["targets"][0]["variant"] == tiny_id and stored["fallbacks"] == [vllm_id]


def test_admin_writes_may_name_spec_variants_by_name(setup: tuple[str, str, str]) -> None:
    url, _, vllm_id = setup
    written = put_route(url, "tiny", {"targets": [{"variant": "tiny-vllm-cpu"}]}, version=1)
    assert written.status_code == 200, written.text
    assert written.json()["spec"]["targets"] == [{"variant": vllm_id, "weight": 1.0}]
    eventually(lambda: chat(url, "tiny").headers.get("x-turnout-variant") == vllm_id, timeout=5)
    assert chat(url, "tiny").json()["choices"][0]["message"]["content"] == "answer from vllm"
    unknown = put_route(url, "tiny", {"targets": [{"variant": "no-such-spec"}]})
    assert unknown.status_code == 422 and "unknown variant 'no-such-spec'" in unknown.text
