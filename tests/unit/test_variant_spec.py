"""Variant specs: YAML loading with file + field errors, the stable id, and model facts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from deploy import accelerators
from deploy.model.artifacts import hf_dir
from deploy.model_facts import (
    ModelFactsError,
    architectures,
    facts_from_config,
    facts_from_hf_folder,
    named_facts,
)
from deploy.spec import SpecError, VariantSpec, load_spec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
BASE: dict[str, Any] = {
    "name": "llama",
    "model": {"architecture": "llama-3-8b"},
    "engine": "vllm",
    "vendor": "nvidia",
    "accelerator": "h100-80gb",
}


def spec(**changes: Any) -> VariantSpec:
    return parse_spec({**BASE, **changes})


# --- model facts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("llama-3-8b", 8_030_261_248),  # the published checkpoints' parameter counts
        ("llama-3-70b", 70_553_706_496),
        ("llama-3.1-8b", 8_030_261_248),
        ("mistral-7b", 7_248_023_552),
        ("qwen2.5-7b", 7_615_616_512),
    ],
)
def test_named_parameter_counts(name: str, params: int) -> None:
    assert named_facts(name).num_params == params


def test_named_shapes() -> None:
    llama = named_facts("llama-3-70b")
    assert (llama.num_layers, llama.num_attention_heads, llama.num_kv_heads, llama.head_dim) == (
        80,
        64,
        8,
        128,
    )
    assert named_facts("llama-3.1-8b").max_context == 131072
    assert named_facts("llama-3-8b").max_context == 8192
    assert {"llama-3-8b", "llama-3-70b", "llama-3.1-70b", "turnout-tiny"} <= set(architectures())


def test_turnout_tiny_is_read_from_the_shipped_config() -> None:
    tiny = named_facts("turnout-tiny")
    config = json.loads((hf_dir() / "config.json").read_text())
    assert tiny.name == "turnout-tiny"
    assert tiny.num_layers == config["num_hidden_layers"]
    assert tiny.num_kv_heads == config["num_key_value_heads"]
    assert tiny.head_dim == config["head_dim"]
    assert tiny.max_context == config["max_position_embeddings"]
    assert tiny.num_params == 648_064  # the tensor sizes in its model.safetensors add up to this


def test_facts_from_a_local_folder_compute_params(tmp_path: Path) -> None:
    config = {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256,
        "tie_word_embeddings": True,
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = facts_from_hf_folder(tmp_path)
    assert facts.num_kv_heads == 4 and facts.head_dim == 16  # defaults: MHA, hidden / heads
    per_layer = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert facts.num_params == 100 * 64 + 2 * per_layer + 64  # tied: one embedding matrix
    assert facts.name == tmp_path.name and facts.quant_group_size is None
    awq = {**config, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64}}
    assert facts_from_config(awq, name="m", source=tmp_path).quant_group_size == 64
    gptq = {**config, "quantization_config": {"quant_method": "gptq", "group_size": -1}}
    assert facts_from_config(gptq, name="m", source=tmp_path).quant_group_size == -1


def test_facts_errors_name_the_source(tmp_path: Path) -> None:
    with pytest.raises(ModelFactsError, match="cannot read"):
        facts_from_hf_folder(tmp_path)
    with pytest.raises(ModelFactsError, match="model_type: 'mixtral' is not supported"):
        facts_from_config({"model_type": "mixtral"}, name="m", source=tmp_path)
    with pytest.raises(ModelFactsError, match="num_hidden_layers: expected a positive integer"):
        facts_from_config(
            {"model_type": "llama", "num_attention_heads": 2, "hidden_size": 8}, name="m", source=tmp_path
        )
    with pytest.raises(ModelFactsError, match="unknown architecture 'llama-4'"):
        named_facts("llama-4")


# --- loading ------------------------------------------------------------------------------------


def test_examples_load() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert len(files) >= 6
    for path in files:
        loaded = load_spec(path)
        assert loaded.facts().num_params > 0


def test_relative_model_path_resolves_against_the_spec_file() -> None:
    tiny = load_spec(EXAMPLES / "tiny-cpu.yaml")
    assert tiny.model.path == "../model/artifacts/turnout-tiny/hf"  # kept as written
    assert tiny.model.resolved_path() == hf_dir().resolve()
    assert tiny.facts().name == "turnout-tiny"
    assert tiny.max_model_len() == 512


def test_defaults_and_served_name() -> None:
    plain = spec()
    assert plain.dtype == "bf16" and plain.quantization == "none" and plain.device_count == 1
    assert plain.kv_cache.memory_fraction == 0.9 and not plain.cuda_graphs.enabled
    assert plain.max_model_len() == 8192  # the model's max context when unset
    assert plain.served_name == "llama"
    assert spec(model={"architecture": "llama-3-8b", "served_name": "meta/x"}).served_name == "meta/x"


def test_missing_model_folder_names_the_field(tmp_path: Path) -> None:
    broken = spec(model={"path": str(tmp_path / "nowhere")})
    with pytest.raises(SpecError, match=r"model\.path: .*cannot read"):
        broken.facts()


@pytest.mark.parametrize(
    ("changes", "where", "reason"),
    [
        ({"turbo": True}, "turbo", "unknown field"),
        # pydantic named its own type here: "a valid dictionary or instance of KvCacheSpec"
        ({"kv_cache": 5}, "kv_cache", "must be a mapping"),
        ({"kv_cache": {"dtype": "fp8", "page": 16}}, "kv_cache.page", "unknown field"),
        ({"accelerator": "h100"}, "accelerator", "unknown accelerator 'h100'"),
        ({"engine": "sglang"}, "engine", "'vllm'"),
        ({"quantization": "int3"}, "quantization", "'awq-int4'"),
        ({"model": {"architecture": "llama-3-8b", "path": "/x"}}, "model", "exactly one of"),
        ({"kv_cache": {"block_size": 24}}, "kv_cache.block_size", "power of two"),
        ({"kv_cache": {"memory_fraction": 1.5}}, "kv_cache.memory_fraction", "less than or equal to 1"),
        (
            {"cuda_graphs": {"enabled": True, "capture_sizes": [8, 4]}},
            "cuda_graphs.capture_sizes",
            "ascending",
        ),
        ({"name": "Llama_3"}, "name", "pattern"),
        ({"name": "n" * 64}, "name", "at most 63 characters"),  # a DNS label (no bound once 43 moved)
        # Strict types: lax pydantic read each of these as a number or bool without a word.
        ({"tensor_parallel": True}, "tensor_parallel", "Input should be a valid integer"),
        ({"replicas": "3"}, "replicas", "Input should be a valid integer"),
        (
            {"kv_cache": {"memory_fraction": True}},
            "kv_cache.memory_fraction",
            "Input should be a valid number",
        ),
        (
            {"kv_cache": {"prefix_caching": "on"}},
            "kv_cache.prefix_caching",
            "Input should be a valid boolean",
        ),
        ({"cuda_graphs": {"enabled": "yes"}}, "cuda_graphs.enabled", "Input should be a valid boolean"),
        ({"batching": {"preferred_batch_sizes": ["8"]}}, "batching.preferred_batch_sizes.0", "valid integer"),
        (  # rendered KEDA `threshold: inf`
            {"autoscaling": {"target_ongoing_requests": float("inf")}},
            "autoscaling.target_ongoing_requests",
            "Input should be a finite number",
        ),
        ({"kv_cache": {"memory_fraction": float("nan")}}, "kv_cache.memory_fraction", "finite number"),
        (  # vLLM's parser read `--served-model-name --trust-remote-code` as two options
            {"model": {"architecture": "llama-3-8b", "served_name": "--trust-remote-code"}},
            "model.served_name",
            "'--trust-remote-code' starts with '-'",
        ),
        ({"tensor_parallel": 0}, "tensor_parallel", "greater than or equal to 1"),
        (
            {"autoscaling": {"min_replicas": 3, "max_replicas": 2}},
            "autoscaling",
            "min_replicas 3 > max_replicas 2",
        ),
        ({"replicas": 5, "autoscaling": {"max_replicas": 4}}, "(top level)", "outside autoscaling bounds"),
    ],
)
def test_invalid_fields_are_named(tmp_path: Path, changes: dict[str, Any], where: str, reason: str) -> None:
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: invalid variant spec")
    assert f"  {where}: " in message and reason in message, message


@pytest.mark.parametrize(
    ("text", "reason"), [("name: [", "not valid YAML"), ("- a\n", "expected a mapping at the top level")]
)
def test_unparseable_files(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=reason):
        load_spec(path)
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec(tmp_path / "absent.yaml")


def test_frozen() -> None:
    with pytest.raises(ValueError, match="frozen"):
        spec().dtype = "fp16"  # type: ignore[misc]


# --- the id -------------------------------------------------------------------------------------


def test_id_is_short_hex_and_golden() -> None:
    ident = spec().id
    assert len(ident) == 12 and int(ident, 16) >= 0
    # The canonical form is a contract (the gateway's variant ids): changing it changes every id.
    canonical = (
        '{"accelerator":"h100-80gb","engine":"vllm","model":{"architecture":"llama-3-8b"},"vendor":"nvidia"}'
    )
    assert ident == hashlib.sha256(canonical.encode()).hexdigest()[:12] == "6b2bf58eb2ef"


def test_id_ignores_name_and_explicit_defaults() -> None:
    explicit = spec(
        name="other", dtype="bf16", device_count=1, kv_cache={"dtype": "auto", "block_size": 16}, replicas=1
    )
    assert explicit.id == spec().id


def test_id_changes_with_any_setting() -> None:
    ids = {
        spec().id,
        spec(dtype="fp16").id,
        spec(kv_cache={"dtype": "fp8"}).id,
        spec(accelerator="h200-141gb").id,
        spec(cuda_graphs={"enabled": True}).id,
        spec(model={"architecture": "llama-3.1-8b"}).id,
        spec(replicas=2).id,
    }
    assert len(ids) == 7


def test_on_moves_to_another_accelerator() -> None:
    original = spec()
    moved = original.on(accelerators.get("mi300x"))
    assert (moved.accelerator, moved.vendor) == ("mi300x", "amd")
    assert (original.accelerator, original.vendor) == ("h100-80gb", "nvidia")
    assert moved.facts() == original.facts()


def test_yaml_native_values_still_load(tmp_path: Path) -> None:
    # Strictness refuses strings and bools for numbers, not what YAML writes natively: an int for
    # a float field, lists for the tuple fields, a str path.
    path = tmp_path / "native.yaml"
    path.write_text(
        "name: native\nmodel: {path: ./hf}\nengine: triton-trtllm\nvendor: nvidia\naccelerator: h100-80gb\n"
        "kv_cache: {memory_fraction: 1, prefix_caching: true}\n"
        "batching: {max_num_seqs: 8, preferred_batch_sizes: [4, 8]}\n"
        "cuda_graphs: {enabled: true, capture_sizes: [1, 2]}\n"
        "replicas: 2\nautoscaling: {min_replicas: 1, max_replicas: 3, target_ongoing_requests: 4}\n"
    )
    loaded = load_spec(path)
    assert loaded.kv_cache.memory_fraction == 1.0 and isinstance(loaded.kv_cache.memory_fraction, float)
    assert loaded.batching.preferred_batch_sizes == (4, 8) and loaded.cuda_graphs.capture_sizes == (1, 2)
    assert loaded.autoscaling is not None and loaded.autoscaling.target_ongoing_requests == 4.0
    assert loaded.model.resolved_path() == tmp_path / "hf"
