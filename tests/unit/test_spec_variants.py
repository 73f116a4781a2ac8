"""gateway.yaml ``specs:``: each deploy spec becomes a variant keyed by the spec's stable id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from backends.settings import EmbeddedSettings, OpenAIHttpSettings, TritonSettings
from deploy.spec import load_spec
from serving.config import load_config
from serving.errors import ConfigError
from serving.routing.spec import RouteSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
H100_SPEC = EXAMPLES / "llama3-8b-h100-fp8kv.yaml"


def _config(folder: Path, specs: list[dict[str, Any]], routes: dict[str, Any], **extra: Any) -> Path:
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump({"specs": specs, "routes": routes, **extra}))
    return path


def _spec_file(folder: Path, source: Path, **changes: Any) -> Path:
    data = yaml.safe_load(source.read_text())
    data.update(changes)
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_embedded_spec_becomes_an_embedded_variant_keyed_by_its_id(tmp_path: Path) -> None:
    route = {"tiny": {"targets": [{"variant": "tiny-cpu-int4"}]}}
    config = load_config(_config(tmp_path, [{"spec": str(EXAMPLES / "tiny-cpu.yaml")}], route))
    spec_id = load_spec(EXAMPLES / "tiny-cpu.yaml").id
    settings = config.variants[spec_id]
    assert isinstance(settings, EmbeddedSettings)
    assert settings.precision == "int4" and settings.model_dir is not None
    assert (settings.model_dir / "genai_config.json").is_file() and settings.model_dir.name == "int4"
    assert (settings.batching.max_batch_size, settings.batching.max_queue_delay_ms) == (16, 2.0)
    assert settings.accelerator == "cpu-x86"
    assert config.routes["tiny"].targets[0].variant == spec_id
    assert config.variant_aliases == {"tiny-cpu-int4": spec_id}
    assert config.spec_names == {spec_id: "tiny-cpu-int4"}


def test_remote_engines_get_their_adapter_preset_vendor_and_accelerator(tmp_path: Path) -> None:
    vllm = {"spec": str(H100_SPEC), "base_url": "http://10.0.0.7:8000/v1"}
    ensemble = _spec_file(tmp_path, H100_SPEC, name="llama3-8b-triton", engine="triton-trtllm")
    triton = {"spec": ensemble.name, "grpc_url": "10.0.0.8:8001"}  # relative to gateway.yaml
    routes = {"chat": {"targets": [{"variant": "llama3-8b-h100-fp8kv"}], "fallbacks": ["llama3-8b-triton"]}}
    config = load_config(_config(tmp_path, [vllm, triton], routes))
    served = config.variants[load_spec(H100_SPEC).id]
    assert isinstance(served, OpenAIHttpSettings)
    assert (served.engine, served.vendor, served.accelerator) == ("vllm", "nvidia", "h100-80gb")
    assert served.model == "meta-llama/Meta-Llama-3-8B-Instruct" and served.preset == "vllm-cuda"
    fallback = config.variants[load_spec(ensemble).id]
    assert isinstance(fallback, TritonSettings)
    assert (fallback.tensors, fallback.model, fallback.protocol) == ("trtllm", "ensemble", "grpc")
    assert config.routes["chat"].fallbacks == [load_spec(ensemble).id]


def test_renaming_a_spec_keeps_its_variant_id(tmp_path: Path) -> None:
    renamed = _spec_file(tmp_path, EXAMPLES / "tiny-cpu.yaml", name="tiny-renamed")
    changed = _spec_file(tmp_path, EXAMPLES / "tiny-cpu.yaml", name="tiny-int8", quantization="ort-int8")
    original = load_spec(EXAMPLES / "tiny-cpu.yaml").id
    assert load_spec(renamed).id == original
    assert load_spec(changed).id != original


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"spec": str(H100_SPEC)}, "specs.0: base_url: a vllm spec needs its server's /v1 base URL"),
        (
            {"spec": str(EXAMPLES / "tiny-cpu.yaml"), "base_url": "http://127.0.0.1:9/v1"},
            "specs.0: base_url: an onnxruntime-genai spec runs in-process",
        ),
        ({"spec": "missing.yaml"}, "specs.0: spec: "),
        ({"spec": str(H100_SPEC), "base_url": "http://h:1/v1", "port": 1}, "specs.0.port: "),
    ],
)
def test_bad_spec_entries_fail_naming_the_field(tmp_path: Path, entry: dict[str, Any], expected: str) -> None:
    routes = {"r": {"targets": [{"variant": "x"}]}}
    with pytest.raises(ConfigError) as raised:
        load_config(_config(tmp_path, [entry], routes, variants={"x": {"kind": "embedded"}}))
    assert expected in str(raised.value)


def test_a_spec_that_would_not_fit_its_accelerator_is_refused(tmp_path: Path) -> None:
    seventy_b = {"architecture": "llama-3-70b"}
    too_big = _spec_file(tmp_path, H100_SPEC, name="llama3-70b-one-h100", model=seventy_b)
    routes = {"r": {"targets": [{"variant": "llama3-70b-one-h100"}]}}
    with pytest.raises(ConfigError) as raised:
        load_config(_config(tmp_path, [{"spec": str(too_big), "base_url": "http://h:1/v1"}], routes))
    assert "would not deploy" in str(raised.value) and "memory" in str(raised.value)


def test_a_spec_whose_model_cannot_be_read_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    unknown = _spec_file(tmp_path, H100_SPEC, name="unknown-arch", model={"architecture": "llama-9"})
    routes = {"r": {"targets": [{"variant": "unknown-arch"}]}}
    with pytest.raises(ConfigError) as raised:
        load_config(_config(tmp_path, [{"spec": str(unknown), "base_url": "http://h:1/v1"}], routes))
    assert f"{unknown}: model.architecture: unknown architecture 'llama-9'" in str(raised.value)


def test_a_spec_name_may_not_clash_with_a_named_variant(tmp_path: Path) -> None:
    routes = {"r": {"targets": [{"variant": "tiny-cpu-int4"}]}}
    entry = {"spec": str(EXAMPLES / "tiny-cpu.yaml")}
    path = _config(tmp_path, [entry], routes, variants={"tiny-cpu-int4": {"kind": "embedded"}})
    with pytest.raises(ConfigError, match="clashes with variant 'tiny-cpu-int4'"):
        load_config(path)


def test_renamed_rewrites_every_variant_reference() -> None:
    spec = RouteSpec.model_validate(
        {
            "targets": [{"variant": "a", "weight": 3}, {"variant": "b", "weight": 0}],
            "shadows": [{"variant": "s"}],
            "fallbacks": ["f", "keep"],
            "canary": {"stable": "a", "canary": "c", "gates": [{"metric": "error_rate", "max": 0.1}]},
        }
    )
    aliases = {"a": "id-a", "b": "id-b", "s": "id-s", "f": "id-f", "c": "id-c"}
    renamed = spec.renamed(aliases)
    assert [(t.variant, t.weight) for t in renamed.targets] == [("id-a", 3.0), ("id-b", 0.0)]
    assert [s.variant for s in renamed.shadows] == ["id-s"] and renamed.fallbacks == ["id-f", "keep"]
    assert renamed.canary is not None and (renamed.canary.stable, renamed.canary.canary) == ("id-a", "id-c")
    assert spec.renamed({}) is spec and spec.renamed({"other": "x"}) is spec


def test_a_specs_task_is_its_variants_and_a_route_may_not_mix_tasks(tmp_path: Path) -> None:
    embedder = _spec_file(tmp_path, H100_SPEC, name="llama3-8b-embed", task="embed")
    specs = [
        {"spec": str(H100_SPEC), "base_url": "http://10.0.0.7:8000/v1"},
        {"spec": embedder.name, "base_url": "http://10.0.0.9:8000/v1"},
    ]
    routes = {"vectors": {"targets": [{"variant": "llama3-8b-embed"}]}}
    config = load_config(_config(tmp_path, specs, routes))
    embedding = config.variants[load_spec(embedder).id]
    generating = config.variants[load_spec(H100_SPEC).id]
    assert isinstance(embedding, OpenAIHttpSettings) and embedding.task == "embed"
    assert isinstance(generating, OpenAIHttpSettings) and generating.task == "generate"  # the default
    mixed = {"chat": {"targets": [{"variant": "llama3-8b-h100-fp8kv"}], "fallbacks": ["llama3-8b-embed"]}}
    with pytest.raises(ConfigError) as refused:
        load_config(_config(tmp_path, specs, mixed))
    said = str(refused.value)
    assert "routes.chat.variants: " in said
    assert "(task: embed) and " in said and "(task: generate) are on one route" in said
