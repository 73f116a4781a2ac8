"""vLLM: the OpenAI server's command-line arguments and environment, per vendor.

Off the request path: ``turnout deploy render --target vllm`` writes ``vllm/args.txt`` (one
argument per line, what ``vllm serve`` and ``python -m vllm.entrypoints.openai.api_server``
accept), ``vllm/env`` (``KEY=value`` lines) and ``vllm/run.sh``. ``engine_args`` is the single
mapping from a spec to vLLM's engine arguments (``AsyncEngineArgs`` field names); the CLI and
the Triton vLLM backend's ``model.json`` are both made from it, and
``tests/integration/test_render_real.py`` checks both against vLLM 0.32's own parser and class.

The mapping, stated:
- ``task: embed`` → ``--runner pooling --convert embed``: the model serves ``/v1/embeddings`` (its
  normalized last hidden state), the same vectors as the embedded engine's.
- ``dtype`` → ``--dtype float32|float16|bfloat16``; TP/PP → ``--tensor-/--pipeline-parallel-size``.
- ``quantization``: fp8 → ``fp8`` (online fp8 from a bf16/fp16 checkpoint); int8-wa →
  ``compressed-tensors`` (a W8A8 checkpoint made with llm-compressor); awq-int4 → ``awq`` and
  gptq-int4 → ``gptq`` (pre-quantized checkpoints; vLLM upgrades them to its Marlin kernels).
- ``kv_cache.dtype``: fp8 → ``fp8``, fp16/bf16 → ``float16``/``bfloat16``; auto → left out.
- ``--block-size``, ``--max-model-len``, ``--max-num-seqs``, ``--max-num-batched-tokens`` as given;
  ``--gpu-memory-utilization`` = ``kv_cache.memory_fraction`` (not on CPU, which sizes its KV cache
  by ``VLLM_CPU_KVCACHE_SPACE`` GiB instead: enough for ``max_num_seqs`` full sequences).
- Prefix caching is written both ways (``--no-enable-prefix-caching``): vLLM's default is on.
- CUDA graphs off → ``--enforce-eager`` on NVIDIA, AMD (HIP graphs) and CPU; nothing on TPU
  (XLA compiles whole graphs; eager mode there would only slow it down). On with capture sizes →
  ``--compilation-config {"cudagraph_capture_sizes": [...]}`` (vLLM 0.32 has no
  ``--cuda-graph-sizes``); on without sizes → vLLM's own list.
- Environment: ``VLLM_NO_USAGE_STATS=1``; ``HF_HUB_OFFLINE=1`` for a local folder; ROCm on
  CDNA3 (MI300-class) ``VLLM_ROCM_USE_AITER=1`` (AMD's AITER kernels, which CDNA2 lacks); CPU
  ``VLLM_TARGET_DEVICE=cpu`` and ``VLLM_CPU_KVCACHE_SPACE``. TPU needs none.
"""

from __future__ import annotations

import json
from typing import Any

from deploy import accelerators
from deploy.render.common import (
    HTTP_PORT,
    VLLM_DTYPES,
    cpu_kv_cache_gib,
    header,
    model_source,
    shell_command,
    shell_script,
)
from deploy.spec import VariantSpec

QUANTIZATION = {"fp8": "fp8", "int8-wa": "compressed-tensors", "awq-int4": "awq", "gptq-int4": "gptq"}
KV_DTYPES = {"fp8": "fp8", "fp16": "float16", "bf16": "bfloat16"}
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def engine_args(spec: VariantSpec, model: str) -> dict[str, Any]:
    """vLLM engine arguments for ``spec`` loading ``model`` (``AsyncEngineArgs`` field names)."""
    kv = spec.kv_cache
    args: dict[str, Any] = {
        "model": model,
        "served_model_name": spec.served_name,
        **({"runner": "pooling", "convert": "embed"} if spec.task == "embed" else {}),
        "dtype": VLLM_DTYPES[spec.dtype],
        "tensor_parallel_size": spec.tensor_parallel,
        "pipeline_parallel_size": spec.pipeline_parallel,
        "max_model_len": spec.max_model_len(),
        "block_size": kv.block_size,
    }
    if spec.vendor != "cpu":
        args["gpu_memory_utilization"] = kv.memory_fraction
    if spec.quantization in QUANTIZATION:
        args["quantization"] = QUANTIZATION[spec.quantization]
    if kv.dtype in KV_DTYPES:
        args["kv_cache_dtype"] = KV_DTYPES[kv.dtype]
    args["enable_prefix_caching"] = kv.prefix_caching
    args["max_num_seqs"] = spec.batching.max_num_seqs
    if spec.batching.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = spec.batching.max_num_batched_tokens
    graphs = spec.cuda_graphs
    if not graphs.enabled and spec.vendor != "google":
        args["enforce_eager"] = True
    if graphs.enabled and graphs.capture_sizes:
        args["compilation_config"] = {"cudagraph_capture_sizes": list(graphs.capture_sizes)}
    return args


def cli_args(engine: dict[str, Any]) -> list[str]:
    """Engine arguments as vLLM command-line words (``False`` → ``--no-<flag>``)."""
    words: list[str] = []
    for key, value in engine.items():
        flag = key.replace("_", "-")
        if value is True:
            words.append(f"--{flag}")
        elif value is False:
            words.append(f"--no-{flag}")
        elif isinstance(value, dict | list):
            words += [f"--{flag}", json.dumps(value, separators=(",", ":"))]
        else:
            words += [f"--{flag}", str(value)]
    return words


def server_args(spec: VariantSpec, *, container: bool = False) -> list[str]:
    """Everything after the server command: engine arguments plus host and port."""
    model = model_source(spec, container=container)
    return [*cli_args(engine_args(spec, model)), "--host", "0.0.0.0", "--port", str(HTTP_PORT)]


def environment(spec: VariantSpec) -> dict[str, str]:
    """Environment variables the server needs on the spec's vendor."""
    env = {"VLLM_NO_USAGE_STATS": "1"}
    if spec.model.path is not None:
        env["HF_HUB_OFFLINE"] = "1"
    acc = accelerators.get(spec.accelerator)
    if spec.vendor == "amd" and acc.architecture == "cdna3":
        env["VLLM_ROCM_USE_AITER"] = "1"
    if spec.vendor == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env["VLLM_CPU_KVCACHE_SPACE"] = str(cpu_kv_cache_gib(spec))
    return env


def _run_script(spec: VariantSpec, args: list[str]) -> str:
    command = 'exec "${VLLM_PYTHON:-python3}" ' + shell_command(["-m", SERVER_MODULE, *args])
    return shell_script(
        spec,
        "# Starts vLLM's OpenAI server; extra arguments override (e.g. --port 8001).\n"
        'cd "$(dirname "$0")"\n'
        "set -a\n. ./env\nset +a\n"
        f'{command} \\\n  "$@"\n',
    )


def render_vllm(spec: VariantSpec) -> dict[str, str | bytes]:
    """``vllm/args.txt``, ``vllm/env`` and ``vllm/run.sh`` for ``spec`` (engine ``vllm``)."""
    args = server_args(spec)
    env = environment(spec)
    env_text = header(spec) + "".join(f"{key}={value}\n" for key, value in env.items())
    return {
        "vllm/args.txt": "".join(f"{word}\n" for word in args),
        "vllm/env": env_text,
        "vllm/run.sh": _run_script(spec, args),
    }
