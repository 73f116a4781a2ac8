"""TensorRT-LLM renderer: conversion route, build flags, trtllm-serve options, memory conversion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy import accelerators
from deploy.plan import GIB, memory_budget
from deploy.render import render
from deploy.render.trtllm import build_command, convert_command, free_memory_fraction, serve_options
from deploy.spec import VariantSpec, load_spec, parse_spec
from deploy.validate import problems

REPO = Path(__file__).resolve().parents[2]
TP4 = REPO / "deploy" / "examples" / "llama3-70b-h100-tp4.yaml"
BASE: dict[str, Any] = {
    "name": "t",
    "model": {"architecture": "llama-3-8b", "served_name": "meta-llama/Meta-Llama-3-8B-Instruct"},
    "engine": "trtllm",
    "vendor": "nvidia",
    "accelerator": "h100-80gb",
    "kv_cache": {"max_model_len": 8192},
}


def spec(**changes: Any) -> VariantSpec:
    made = parse_spec({**BASE, **changes})
    assert problems(made) == []
    return made


def opt(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_unquantized_goes_through_convert_checkpoint() -> None:
    words = convert_command(load_spec(TP4))
    assert words[1].endswith('/models/core/llama/convert_checkpoint.py"')
    assert (
        opt(words, "--dtype") == "bfloat16"
        and opt(words, "--tp_size") == "4"
        and opt(words, "--pp_size") == "1"
    )
    qwen = spec(model={"architecture": "qwen2.5-7b"})
    assert "/models/core/qwen/convert_checkpoint.py" in convert_command(qwen)[1]


@pytest.mark.parametrize(
    ("changes", "qformat", "kv"),
    [
        ({"quantization": "fp8"}, "fp8", None),
        ({"quantization": "int8-wa", "accelerator": "a100-80gb"}, "int8_sq", None),
        ({"quantization": "awq-int4", "dtype": "fp16", "accelerator": "l40s"}, "int4_awq", None),
        ({"kv_cache": {"dtype": "fp8", "max_model_len": 8192}}, "full_prec", "fp8"),
    ],
)
def test_quantized_goes_through_quantize_py(changes: dict[str, Any], qformat: str, kv: str | None) -> None:
    words = convert_command(spec(**changes))
    assert words[1].endswith('/quantization/quantize.py"')
    assert opt(words, "--qformat") == qformat
    assert opt(words, "--export_format") == "tensorrt_llm"
    if kv is None:
        assert "--kv_cache_dtype" not in words
    else:
        assert opt(words, "--kv_cache_dtype") == kv


def test_gptq_checkpoint_is_converted_as_it_is() -> None:
    words = convert_command(spec(quantization="gptq-int4", dtype="fp16", accelerator="a100-80gb"))
    assert "convert_checkpoint.py" in words[1] and "--qformat" not in words


def test_build_flags() -> None:
    words = build_command(load_spec(TP4))
    assert opt(words, "--max_batch_size") == "256"
    assert opt(words, "--max_seq_len") == "8192" and opt(words, "--max_input_len") == "8191"
    assert opt(words, "--max_num_tokens") == "8192"
    assert opt(words, "--kv_cache_type") == "paged" and opt(words, "--use_paged_context_fmha") == "enable"
    assert opt(words, "--tokens_per_block") == "32" and opt(words, "--gemm_plugin") == "auto"
    assert "--max_num_tokens" not in build_command(spec())


def test_serve_options() -> None:
    options = serve_options(load_spec(TP4))
    assert options["tensor_parallel_size"] == 4 and options["max_batch_size"] == 256
    assert options["max_seq_len"] == 8192 and options["max_num_tokens"] == 8192
    assert options["kv_cache_config"]["enable_block_reuse"] is True
    assert options["kv_cache_config"]["tokens_per_block"] == 32
    assert options["cuda_graph_config"] == {"max_batch_size": 256, "enable_padding": True}
    sized = serve_options(spec(cuda_graphs={"enabled": True, "capture_sizes": [1, 4, 16]}))
    assert sized["cuda_graph_config"] == {"batch_sizes": [1, 4, 16], "enable_padding": True}
    off = serve_options(spec(kv_cache={"dtype": "fp8", "max_model_len": 8192}))
    assert off["cuda_graph_config"] is None  # null turns off the PyTorch backend's default graphs
    assert off["kv_cache_config"]["dtype"] == "fp8" and off["kv_cache_config"]["enable_block_reuse"] is False


def test_free_memory_fraction_keeps_the_specs_total() -> None:
    made = load_spec(TP4)
    acc = accelerators.get("h100-80gb")
    budget = memory_budget(made, made.facts(), acc)
    fraction = free_memory_fraction(made)
    free = acc.memory_gib * GIB - budget.weights - budget.overhead
    total = budget.weights + budget.overhead + fraction * free
    assert total <= 0.9 * acc.memory_gib * GIB  # rounded down: never more than memory_fraction
    assert total > 0.89 * acc.memory_gib * GIB
    assert 0.5 < fraction < 0.9


def test_files_and_serve_script() -> None:
    files = render(load_spec(TP4), "trtllm")
    assert set(files) == {
        "trtllm/convert.sh",
        "trtllm/build.sh",
        "trtllm/extra_llm_api_options.yaml",
        "trtllm/serve.sh",
    }
    assert yaml.safe_load(files["trtllm/extra_llm_api_options.yaml"]) == serve_options(load_spec(TP4))
    serve = str(files["trtllm/serve.sh"])
    assert 'exec trtllm-serve "$MODEL"' in serve and "--backend pytorch" in serve
    assert 'MODEL="${MODEL:-meta-llama/Meta-Llama-3-70B-Instruct}"' in serve
    awq = render(
        load_spec(REPO / "tests" / "golden" / "render" / "_specs" / "llama3-8b-trtllm-awq-l40s.yaml"),
        "trtllm",
    )
    assert "--export_format hf" in str(awq["trtllm/quantize_hf.sh"])
    assert 'MODEL="${MODEL:-/models/llama3-8b-trtllm-awq/quantized-hf}"' in str(awq["trtllm/serve.sh"])
    # The pod serves the same export (it used to load the unquantized Hub checkpoint).
    pod = yaml.safe_load(
        render(
            load_spec(REPO / "tests" / "golden" / "render" / "_specs" / "llama3-8b-trtllm-awq-l40s.yaml"),
            "k8s",
        )["k8s/deployment.yaml"]
    )
    assert (
        pod["spec"]["template"]["spec"]["containers"][0]["args"][0]
        == "/models/llama3-8b-trtllm-awq/quantized-hf"
    )
