"""vLLM renderer: the spec → CLI / environment mapping per vendor, stated in ``deploy.render.vllm``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy import accelerators
from deploy.plan import GIB, memory_budget
from deploy.render import TargetNotApplicable, render, write
from deploy.render.common import cpu_kv_cache_gib, model_source
from deploy.render.vllm import cli_args, engine_args, environment, server_args
from deploy.spec import VariantSpec, load_spec, parse_spec
from deploy.validate import problems

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
BASE: dict[str, Any] = {
    "name": "v",
    "model": {"architecture": "llama-3-8b", "served_name": "meta-llama/Meta-Llama-3-8B-Instruct"},
    "engine": "vllm",
    "vendor": "nvidia",
    "accelerator": "h100-80gb",
    "kv_cache": {"max_model_len": 8192},
}


def spec(**changes: Any) -> VariantSpec:
    made = parse_spec({**BASE, **changes})
    assert problems(made) == []
    return made


def pairs(args: list[str]) -> dict[str, str | None]:
    """``--flag value`` / ``--flag`` words as a dict (value None for a bare flag)."""
    out: dict[str, str | None] = {}
    for i, word in enumerate(args):
        if word.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else "--"
            out[word] = None if following.startswith("--") else following
    return out


def test_defaults_on_an_h100() -> None:
    args = pairs(server_args(spec()))
    assert args["--model"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert args["--dtype"] == "bfloat16"
    assert args["--max-model-len"] == "8192"
    assert args["--gpu-memory-utilization"] == "0.9"
    assert args["--block-size"] == "16"
    assert args["--max-num-seqs"] == "256"
    assert "--no-enable-prefix-caching" in args  # vLLM's default is on; the spec's is off
    assert "--enforce-eager" in args  # cuda_graphs.enabled defaults to false
    assert "--quantization" not in args and "--kv-cache-dtype" not in args
    assert args["--host"] == "0.0.0.0" and args["--port"] == "8000"


@pytest.mark.parametrize(
    ("quantization", "dtype", "accelerator", "flag"),
    [("fp8", "bf16", "h100-80gb", "fp8"), ("awq-int4", "fp16", "l40s", "awq"),
     ("gptq-int4", "fp16", "a100-80gb", "gptq"), ("int8-wa", "bf16", "a100-80gb", "compressed-tensors")],
)  # fmt: skip
def test_quantization_flags(quantization: str, dtype: str, accelerator: str, flag: str) -> None:
    args = pairs(server_args(spec(quantization=quantization, dtype=dtype, accelerator=accelerator)))
    assert args["--quantization"] == flag


def test_kv_cache_graphs_and_batching() -> None:
    made = spec(
        kv_cache={
            "dtype": "fp8",
            "block_size": 32,
            "memory_fraction": 0.8,
            "max_model_len": 4096,
            "prefix_caching": True,
        },
        batching={"max_num_seqs": 64, "max_num_batched_tokens": 4096},
        cuda_graphs={"enabled": True, "capture_sizes": [1, 8, 64]},
    )
    words = server_args(made)
    args = pairs(words)
    assert args["--kv-cache-dtype"] == "fp8"
    assert args["--block-size"] == "32" and args["--gpu-memory-utilization"] == "0.8"
    assert "--enable-prefix-caching" in args and "--no-enable-prefix-caching" not in args
    assert args["--max-num-batched-tokens"] == "4096"
    assert "--enforce-eager" not in args
    assert args["--compilation-config"] == '{"cudagraph_capture_sizes":[1,8,64]}'
    graphs_on = pairs(server_args(spec(cuda_graphs={"enabled": True})))
    assert "--enforce-eager" not in graphs_on and "--compilation-config" not in graphs_on


def test_parallelism() -> None:
    changes = {"model": {"architecture": "llama-3-70b"}, "device_count": 8, "tensor_parallel": 4}
    made = parse_spec({**BASE, **changes, "pipeline_parallel": 2})
    args = pairs(server_args(made))
    assert args["--tensor-parallel-size"] == "4" and args["--pipeline-parallel-size"] == "2"


def test_rocm_cdna3_gets_aiter_and_cdna2_does_not() -> None:
    mi300 = spec(vendor="amd", accelerator="mi300x")
    assert environment(mi300)["VLLM_ROCM_USE_AITER"] == "1"
    mi250 = spec(vendor="amd", accelerator="mi250", dtype="fp16")
    assert "VLLM_ROCM_USE_AITER" not in environment(mi250)
    assert "--enforce-eager" in server_args(mi250)  # HIP graphs off unless enabled


def test_tpu_has_no_eager_flag_and_no_extra_env() -> None:
    made = load_spec(EXAMPLES / "llama3-8b-tpu-v5e.yaml")
    args = pairs(server_args(made))
    assert "--enforce-eager" not in args
    assert args["--tensor-parallel-size"] == "4" and args["--block-size"] == "64"
    assert environment(made) == {"VLLM_NO_USAGE_STATS": "1"}


def test_cpu_sizes_its_kv_cache_in_whole_gib(tmp_path: Path) -> None:
    hf = Path(__file__).resolve().parents[2] / "deploy" / "model" / "artifacts" / "turnout-tiny" / "hf"
    made = parse_spec(
        {"name": "c", "model": {"path": str(hf)}, "engine": "vllm", "vendor": "cpu", "accelerator": "cpu-x86",
         "dtype": "fp32", "kv_cache": {"max_model_len": 512}, "batching": {"max_num_seqs": 8}}
    )  # fmt: skip
    env = environment(made)
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the tiny model's 8 × 512 tokens need far less than 1 GiB
    args = pairs(server_args(made))
    assert "--gpu-memory-utilization" not in args
    assert args["--dtype"] == "float32" and "--enforce-eager" in args
    assert args["--model"] == str(hf)
    big = spec(vendor="cpu", accelerator="cpu-x86", dtype="bf16", batching={"max_num_seqs": 16})
    # Llama-3-8B bf16: 128 KiB per token × 8192 tokens × 16 sequences = 16 GiB.
    assert cpu_kv_cache_gib(big) == 16
    # 256 sequences would want 256 GiB, past the 256 GiB socket × 0.9 less 15 GiB of weights:
    # the engine gets what is left, as vLLM takes what is left on a GPU, and the pod fits a node.
    full = spec(vendor="cpu", accelerator="cpu-x86", dtype="bf16", batching={"max_num_seqs": 256})
    budget = memory_budget(full, full.facts(), accelerators.get("cpu-x86"))
    assert cpu_kv_cache_gib(full) == int(budget.kv_capacity // GIB) < 256
    memory = render(full, "k8s")["k8s/deployment.yaml"]
    limit = yaml.safe_load(memory)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "memory"
    ]
    assert int(limit.removesuffix("Gi")) <= 256


def test_model_source_rules(tmp_path: Path) -> None:
    assert model_source(spec()) == "meta-llama/Meta-Llama-3-8B-Instruct"
    local = spec(model={"architecture": "llama-3-8b", "served_name": "llama-awq"})
    assert model_source(local) == "/models/v"
    assert engine_args(local, "/x")["served_model_name"] == "llama-awq"


def test_cli_args_conversion() -> None:
    words = cli_args({"a_b": 1, "on": True, "off": False, "cfg": {"k": [1, 2]}})
    assert words == ["--a-b", "1", "--on", "--no-off", "--cfg", '{"k":[1,2]}']


def test_run_script_and_files() -> None:
    files = render(load_spec(EXAMPLES / "llama3-8b-h100-fp8kv.yaml"), "vllm")
    run = str(files["vllm/run.sh"])
    assert run.startswith(
        "#!/bin/sh\n# Rendered by `turnout deploy render` from variant llama3-8b-h100-fp8kv ("
    )
    assert 'exec "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server' in run
    assert "--compilation-config '{\"cudagraph_capture_sizes\":[1,2,4,8,16,32,64,128,256]}'" in run
    args = str(files["vllm/args.txt"]).splitlines()
    assert args == server_args(load_spec(EXAMPLES / "llama3-8b-h100-fp8kv.yaml"))


def test_vllm_target_needs_the_vllm_engine() -> None:
    with pytest.raises(TargetNotApplicable, match="vllm renders for engines vllm"):
        render(load_spec(EXAMPLES / "llama3-70b-h100-tp4.yaml"), "vllm")


def test_run_script_passes_exactly_the_rendered_args(tmp_path: Path) -> None:
    """run.sh sources env and hands the server args.txt word for word (shell quoting included)."""
    made = load_spec(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")
    write(render(made, "vllm"), tmp_path)
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "VLLM_NO_USAGE_STATS=$VLLM_NO_USAGE_STATS" "$@"\n')
    fake.chmod(0o755)
    done = subprocess.run(
        ["sh", str(tmp_path / "vllm" / "run.sh"), "--port", "9001"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "VLLM_PYTHON": str(fake)},
        check=True,
    )
    lines = done.stdout.splitlines()
    expected = (tmp_path / "vllm" / "args.txt").read_text().splitlines()
    assert lines == [
        "VLLM_NO_USAGE_STATS=1",
        "-m",
        "vllm.entrypoints.openai.api_server",
        *expected,
        "--port",
        "9001",
    ]


def test_an_embedding_variant_runs_vllms_pooling_runner_converted_to_embed() -> None:
    words = pairs(server_args(spec(task="embed")))
    assert words["--runner"] == "pooling" and words["--convert"] == "embed"
    assert "--runner" not in pairs(server_args(spec())) and "--convert" not in pairs(server_args(spec()))
