"""What an unknown key in a spec, a gateway config or a route spec is told (deploy.unknown_keys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.spec import VariantSpec
from deploy.unknown_keys import key_places, unknown_key_message
from serving.config import GatewayConfig, load_config
from serving.errors import ConfigError
from serving.routing.spec import RouteSpec


def test_places_follow_sections_mappings_and_lists() -> None:
    spec = key_places(VariantSpec)
    assert spec["max_model_len"] == ("kv_cache.max_model_len",)
    assert spec["dtype"] == ("dtype", "kv_cache.dtype")
    gateway = key_places(GatewayConfig)
    assert gateway["max_batch_size"] == ("variants.*.batching.max_batch_size",)
    assert gateway["sample_rate"] == ("routes.*.shadows.sample_rate",)  # a list's items: its place


@pytest.mark.parametrize(
    ("model", "loc", "said"),
    [
        # an engine's own name: the field it is in a spec
        (VariantSpec, ("kv_cache", "gpu_memory_utilization"),
         "vLLM's --gpu-memory-utilization is 'kv_cache.memory_fraction' in a spec"),
        (VariantSpec, ("batching", "max_batch_size"),
         "TensorRT-LLM's and Triton's max_batch_size is 'batching.max_num_seqs' in a spec"),
        (VariantSpec, ("enforce_eager",),
         "vLLM's --enforce-eager is 'cuda_graphs: {enabled: false}' in a spec"),
        (VariantSpec, ("tensor_parallel_size",),
         "vLLM's --tensor-parallel-size is 'tensor_parallel' in a spec"),
        (GatewayConfig, ("variants", "v", "openai_http", "api_base"),
         "LiteLLM's api_base is 'base_url' here"),
        (GatewayConfig, ("variants", "v", "embedded", "batching", "max_num_seqs"),
         "vLLM's --max-num-seqs is 'batching.max_batch_size' here"),
        # a real key in the wrong section: where it goes (it used to suggest its own name)
        (VariantSpec, ("max_model_len",), "did you mean 'kv_cache.max_model_len'?"),
        (VariantSpec, ("max_num_seqs",), "did you mean 'batching.max_num_seqs'?"),
        (VariantSpec, ("batching", "dtype"), "did you mean 'dtype' or 'kv_cache.dtype'?"),
        (GatewayConfig, ("max_batch_size",), "did you mean 'variants.<name>.batching.max_batch_size'?"),
        # a typo: the key beside it, by its own name
        (VariantSpec, ("kv_cache", "block_sise"), "did you mean 'block_size'?"),
        (VariantSpec, ("quantize",), "did you mean 'quantization'?"),
        (GatewayConfig, ("server", "prot"), "did you mean 'port'?"),
        (GatewayConfig, ("variants", "v", "embedded", "batching", "max_batch_sise"),
         "did you mean 'max_batch_size'?"),
        (GatewayConfig, ("variants", "v", "openai_http", "timeouts", "raed"), "did you mean 'read'?"),
        # this section's key before a closer one elsewhere
        (GatewayConfig, ("routes", "r", "shadows", 0, "timeout"), "did you mean 'timeout_s'?"),
        (GatewayConfig, ("variants", "v", "openai_http", "timeout"), "did you mean 'timeouts'?"),
        (RouteSpec, ("shadows", 0, "rate"), "did you mean 'sample_rate'?"),
        # another member of a union has it
        (GatewayConfig, ("variants", "v", "embedded", "base_url"), "only kind 'openai_http' has it"),
        (GatewayConfig, ("variants", "v", "openai_http", "precision"), "only kind 'embedded' has it"),
        (GatewayConfig, ("variants", "v", "embedded", "preset"),
         "only kinds 'openai_http' and 'triton' have it"),
    ],
)  # fmt: skip
def test_what_an_unknown_key_is_told(model: type, loc: tuple[int | str, ...], said: str) -> None:
    assert unknown_key_message(model, loc, noun="field") == f"unknown field; {said}"


@pytest.mark.parametrize(
    ("model", "loc"),
    [
        (GatewayConfig, ("rate",)),  # error_rate and sample_rate both have the word: no guess
        (VariantSpec, ("colour",)),
    ],
)
def test_no_guess_when_nothing_is_near(model: type, loc: tuple[int | str, ...]) -> None:
    assert unknown_key_message(model, loc) == "unknown key"


def test_a_litellm_config_is_told_where_its_sections_go(tmp_path: Path) -> None:
    written = tmp_path / "litellm.yaml"
    written.write_text(
        "model_list:\n  - model_name: gpt\n    litellm_params: {model: openai/gpt, api_base: 'http://x'}\n"
        "general_settings: {master_key: sk-1234}\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_config(written)
    said = str(refused.value)
    assert "model_list: unknown key; LiteLLM's model_list is two sections here: 'variants'" in said
    assert "general_settings: unknown key; LiteLLM's general_settings are 'server' and 'auth' here" in said
