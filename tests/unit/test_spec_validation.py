"""Validation: parallelism, engine × vendor × quantization support, and memory fit, with named fields."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from deploy.spec import SpecError, VariantSpec, load_spec, parse_spec
from deploy.validate import check, problems

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
BASE: dict[str, Any] = {
    "name": "llama",
    "model": {"architecture": "llama-3-8b"},
    "engine": "vllm",
    "vendor": "nvidia",
    "accelerator": "h100-80gb",
    "kv_cache": {"max_model_len": 8192},
}


def spec(**changes: Any) -> VariantSpec:
    return parse_spec({**BASE, **changes})


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    assert problems(load_spec(path)) == []


def test_the_required_examples_exist() -> None:
    names = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert {
        "tiny-cpu.yaml", "llama3-8b-h100-fp8kv.yaml", "llama3-70b-h100-tp4.yaml",
        "llama3-70b-mi300x-tp2.yaml", "llama3-8b-awq.yaml", "llama3-8b-tpu-v5e.yaml",
    } <= names  # fmt: skip


def only(found: list[str], field: str) -> str:
    """The single problem about ``field`` (fails when there is none or several)."""
    matching = [p for p in found if p.startswith(f"{field}: ")]
    assert len(matching) == 1, found
    return matching[0]


def test_tp_must_divide_attention_heads() -> None:
    found = problems(spec(model={"architecture": "llama-3-70b"}, tensor_parallel=3, device_count=3))
    assert "tensor_parallel: 3 does not divide the 64 attention heads of llama-3-70b" in found
    assert "tensor_parallel: 3 does not divide the 8 KV heads of llama-3-70b" in found


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    # Llama-3-8B: 32 heads, 8 KV heads. TP 16 replicates each KV head on 2 devices (vLLM does).
    assert not [p for p in problems(spec(tensor_parallel=16, device_count=16)) if "heads" in p]
    # Qwen2.5-7B: 28 heads, 4 KV heads; TP 7 divides the heads but is no multiple of 4.
    found = problems(spec(model={"architecture": "qwen2.5-7b"}, tensor_parallel=7, device_count=7))
    assert "cannot be replicated evenly" in only(found, "tensor_parallel")


def test_device_count_is_tp_times_pp() -> None:
    found = problems(spec(tensor_parallel=2, pipeline_parallel=2, device_count=2))
    assert only(found, "device_count") == "device_count: 2 must equal tensor_parallel × pipeline_parallel = 4"
    assert problems(spec(tensor_parallel=2, pipeline_parallel=2, device_count=4)) == []


def test_one_replica_fits_on_one_node() -> None:
    """An 8-GPU node is the most one replica's pod can ask for (TP 16 or 64 used to validate
    and render into one pod no node could schedule)."""
    big = {"architecture": "llama-3-70b"}
    found = problems(spec(model=big, tensor_parallel=16, device_count=16))
    assert only(found, "device_count").startswith(
        "device_count: 16 h100-80gb for one replica, but a node holds 8"
    )
    assert not [p for p in problems(spec(model=big, tensor_parallel=8, device_count=8)) if "node" in p]
    mi300x = {"vendor": "amd", "accelerator": "mi300x"}
    found = problems(spec(model=big, **mi300x, tensor_parallel=4, pipeline_parallel=4, device_count=16))
    assert "a node holds 8" in only(found, "device_count")


def test_fp8_kv_cache_on_a100() -> None:
    found = problems(spec(accelerator="a100-80gb", kv_cache={"dtype": "fp8", "max_model_len": 8192}))
    assert found == [
        "kv_cache.dtype: fp8 KV cache needs Hopper, Ada or MI300-class hardware, not a100-80gb (ampere)"
    ]


def test_fp8_weights_need_fp8_compute() -> None:
    assert "fp8 compute" in only(problems(spec(accelerator="a100-80gb", quantization="fp8")), "quantization")
    assert problems(spec(accelerator="l40s", quantization="fp8")) == []
    assert problems(spec(accelerator="mi300x", vendor="amd", quantization="fp8")) == []


def test_cuda_graphs_on_tpu() -> None:
    tpu = {"accelerator": "tpu-v5e", "vendor": "google", "tensor_parallel": 4, "device_count": 4}
    found = problems(spec(**tpu, cuda_graphs={"enabled": True}))
    assert found == ["cuda_graphs.enabled: CUDA graphs do not exist on tpu-v5e (google)"]


def test_awq_on_tpu() -> None:
    tpu = {"accelerator": "tpu-v6e", "vendor": "google"}
    found = problems(spec(**tpu, quantization="awq-int4"))
    assert found == ["quantization: awq-int4 has no kernels on tpu-v6e (google)"]


def test_70b_fp16_on_one_h100_gives_the_numbers() -> None:
    found = problems(spec(model={"architecture": "llama-3-70b"}, dtype="fp16"))
    message = only(found, "memory")
    numbers = re.fullmatch(
        r"memory: needs ([\d.]+) GiB per device: weights ([\d.]+) \+ KV ([\d.]+) \(one 8192-token sequence\) "
        r"\+ overhead ([\d.]+); NVIDIA H100 80GB SXM 79.6 GiB × 0.90 = ([\d.]+) GiB available",
        message,
    )
    assert numbers, message
    needed, weights, kv, overhead, available = map(float, numbers.groups())
    assert weights == 131.4  # 70.55e9 params × 2 bytes = 141.1 GB
    assert kv == 2.5  # 8192 tokens × 320 KiB
    assert needed == pytest.approx(weights + kv + overhead, abs=0.15)
    assert available == 71.6


def test_engine_vendor_matrix() -> None:
    amd = {"accelerator": "mi300x", "vendor": "amd"}
    assert "runs only on nvidia" in only(problems(spec(**amd, engine="trtllm")), "engine")
    assert "runs only on nvidia" in only(problems(spec(**amd, engine="triton-vllm")), "engine")
    assert problems(spec(**amd)) == []
    assert "vendor: amd does not match" in only(problems(spec(vendor="amd")), "vendor")


def test_ort_quantization_only_on_onnxruntime_genai() -> None:
    assert "only on the onnxruntime-genai engine" in only(
        problems(spec(quantization="ort-int4")), "quantization"
    )
    cpu = {"engine": "onnxruntime-genai", "vendor": "cpu", "accelerator": "cpu-x86", "dtype": "fp32"}
    assert problems(spec(**cpu, quantization="ort-int8")) == []
    found = problems(spec(**cpu, quantization="awq-int4", kv_cache={"prefix_caching": True}))
    assert "onnxruntime-genai takes none, ort-int8, ort-int4" in only(found, "quantization")
    assert only(found, "kv_cache.prefix_caching")
    assert "fp32 activations" in only(problems(spec(**{**cpu, "dtype": "bf16"})), "dtype")


def test_tpu_rules() -> None:
    tpu = {"accelerator": "tpu-v5e", "vendor": "google"}
    assert "bf16, not fp16" in only(problems(spec(**tpu, dtype="fp16")), "dtype")
    found = problems(spec(**tpu, tensor_parallel=2, device_count=2))
    assert "1 (1x1), 4 (2x2), 8 (2x4)" in only(found, "device_count")


def test_limits() -> None:
    assert "exceeds the max context 8192" in only(
        problems(spec(kv_cache={"max_model_len": 16384})), "kv_cache.max_model_len"
    )
    found = problems(
        spec(batching={"max_num_seqs": 8}, cuda_graphs={"enabled": True, "capture_sizes": [1, 16]})
    )
    assert "16 exceeds batching.max_num_seqs 8" in only(found, "cuda_graphs.capture_sizes")
    assert only(problems(spec(cuda_graphs={"capture_sizes": [1, 2]})), "cuda_graphs.capture_sizes")
    assert only(problems(spec(batching={"max_queue_delay_us": 100})), "batching.max_queue_delay_us")
    # Triton's vLLM backend leaves batching to vLLM: its config has no dynamic_batching to hold them.
    on_triton_vllm = spec(
        engine="triton-vllm", batching={"max_queue_delay_us": 100, "preferred_batch_sizes": [4]}
    )
    assert "batches continuously" in only(problems(on_triton_vllm), "batching.max_queue_delay_us")
    assert only(problems(on_triton_vllm), "batching.preferred_batch_sizes")
    assert only(problems(spec(batching={"max_num_batched_tokens": 64})), "batching.max_num_batched_tokens")


def test_check_raises_with_every_problem() -> None:
    bad = spec(accelerator="a100-80gb", quantization="fp8", kv_cache={"dtype": "fp8", "max_model_len": 8192})
    with pytest.raises(SpecError) as caught:
        check(bad)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"llama ({bad.id}): 2 problem(s)"
    assert lines[1].startswith("  quantization: ") and lines[2].startswith("  kv_cache.dtype: ")
    check(spec())  # a valid spec passes silently


def test_unreadable_model_is_a_spec_error_not_a_problem(tmp_path: Path) -> None:
    # A spec that cannot be understood is not one that would not deploy (the CLI exits 2, not 1).
    with pytest.raises(SpecError, match=r"^<spec>: model\.path: "):
        problems(spec(model={"path": str(tmp_path)}))


def test_int4_shards_under_tensor_parallelism_are_whole_groups() -> None:
    """Qwen2.5-72B's MLP (29568 wide) splits 8 ways into 3696 = 28.9 groups of 128, so its AWQ and
    GPTQ checkpoints are published padded to 29696 (29 groups a device): read from a folder's
    config.json, the padded one loads at TP 8 and the unpadded one does not."""
    from deploy.model_facts import ModelFacts

    shape = {"name": "qwen2.5-72b", "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
             "num_kv_heads": 8, "head_dim": 128, "vocab_size": 152064, "num_params": 72_700_000_000,
             "max_context": 32768}  # fmt: skip
    released, padded = (
        ModelFacts(**shape, intermediate_size=29568),
        ModelFacts(**shape, intermediate_size=29696),
    )
    for quantization in ("awq-int4", "gptq-int4"):
        tp8 = spec(quantization=quantization, dtype="fp16", tensor_parallel=8, device_count=8)
        shards = [p for p in problems(tp8, released) if "shards" in p]
        assert shards == [
            f"tensor_parallel: 8 splits the intermediate_size 29568 of qwen2.5-72b into 3696-wide shards, "
            f"not whole {quantization} groups of 128; the engine refuses to load it (use a "
            "tensor_parallel whose shards are)"
        ]
        assert not [p for p in problems(tp8, padded) if "shards" in p]
        tp2 = spec(quantization=quantization, dtype="fp16", tensor_parallel=2, device_count=2)
        assert [p for p in problems(tp2, released) if "into 14784-wide shards" in p]  # 115.5 groups
        one = spec(quantization=quantization, dtype="fp16", accelerator="h200-141gb")
        assert not [p for p in problems(one, released) if p.startswith("tensor_parallel")]
    # A checkpoint whose config.json names its group: per-channel (-1) has none to split; 64 is
    # checked as 64 (29568 / 8 = 3696 = 57.75 groups of 64: still refused).
    per_channel = ModelFacts(**shape, intermediate_size=29568, quant_group_size=-1)
    tp8 = spec(quantization="awq-int4", dtype="fp16", tensor_parallel=8, device_count=8)
    assert not [p for p in problems(tp8, per_channel) if "shards" in p]
    by_64 = ModelFacts(**shape, intermediate_size=29568, quant_group_size=64)
    assert [p for p in problems(tp8, by_64) if "not whole awq-int4 groups of 64" in p]
    # Unquantized weights split anywhere the heads allow.
    assert not [p for p in problems(spec(tensor_parallel=8, device_count=8), released) if "shards" in p]


@pytest.mark.parametrize("engine", ["trtllm", "triton-trtllm", "triton-vllm"])
def test_an_embedding_variant_needs_an_engine_that_serves_embeddings(engine: str) -> None:
    found = problems(spec(engine=engine, task="embed"))
    assert "serves no /v1/embeddings" in only(found, "task") and "vllm or onnxruntime-genai" in only(
        found, "task"
    )
    assert not [p for p in problems(spec(task="embed")) if p.startswith("task: ")]


def test_task_generate_is_the_default_and_keeps_a_specs_id() -> None:
    assert spec().task == "generate" and spec(task="generate").id == spec().id
    assert spec(task="embed").id != spec().id  # another configuration, another variant
    with pytest.raises(SpecError, match="task"):
        spec(task="rerank")
