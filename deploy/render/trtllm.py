"""TensorRT-LLM: checkpoint conversion, engine build, and ``trtllm-serve``'s options YAML.

Off the request path (and off this machine: TensorRT-LLM needs an NVIDIA GPU). The scripts run
inside TensorRT-LLM's release container, whose examples live under ``$TRTLLM_EXAMPLES``
(default ``/app/tensorrt_llm/examples``). Two routes, both from one spec:

- ``trtllm/serve.sh`` + ``trtllm/extra_llm_api_options.yaml``: ``trtllm-serve`` on its PyTorch
  backend (TensorRT-LLM's default), straight from the Hugging Face checkpoint. The YAML holds
  LLM-API fields: ``tensor_parallel_size``, ``pipeline_parallel_size``, ``max_batch_size``
  (``max_num_seqs``), ``max_num_tokens``, ``max_seq_len``; ``kv_cache_config`` with
  ``free_gpu_memory_fraction``, ``enable_block_reuse`` (prefix caching), ``tokens_per_block`` and
  ``dtype``; ``cuda_graph_config`` (``batch_sizes`` from the capture sizes, else ``max_batch_size``,
  with padding) or ``null`` to turn CUDA graphs off (the backend's default is on). Quantized
  weights (fp8, int8-wa, AWQ) are served from a ModelOpt export: ``trtllm/quantize_hf.sh``.
- ``trtllm/convert.sh`` → ``trtllm/build.sh``: a TensorRT-LLM checkpoint and a TensorRT engine,
  what Triton's TensorRT-LLM backend (engine ``triton-trtllm``) runs. Unquantized and GPTQ
  (a pre-quantized checkpoint, read from its ``quantization_config``) go through the model's
  ``convert_checkpoint.py`` (``models/core/llama``, or ``models/core/qwen`` for Qwen2-style
  q/k/v biases); fp8 (``--qformat fp8``), int8-wa (``int8_sq``, SmoothQuant), AWQ (``int4_awq``,
  ModelOpt quantizes the unquantized checkpoint) and an fp8 KV cache (``--kv_cache_dtype fp8``)
  go through ``quantization/quantize.py``, as TensorRT-LLM documents. ``trtllm-build`` gets the
  batch and length limits, ``--kv_cache_type paged``, ``--use_paged_context_fmha enable`` (KV reuse
  and chunked context need it), ``--tokens_per_block`` and ``--gemm_plugin auto``.

Memory: ``kv_cache.memory_fraction`` is the share of the whole device the engine may use; TensorRT-
LLM's ``free_gpu_memory_fraction`` applies to what is free after weights and activations, so it is
converted: (fraction × memory − weights − overhead) / (memory − weights − overhead), with the
weights and overhead of ``deploy.plan``, rounded down to 0.01 (at least 0.01).
"""

from __future__ import annotations

import math
from typing import Any

from deploy import accelerators
from deploy.plan import GIB, memory_budget
from deploy.render.common import (
    HTTP_PORT,
    VLLM_DTYPES,
    Raw,
    header,
    model_source,
    shell_command,
    shell_script,
    to_yaml,
    work_dir,
)
from deploy.spec import VariantSpec

QFORMATS = {"fp8": "fp8", "int8-wa": "int8_sq", "awq-int4": "int4_awq"}
EXAMPLES_DEFAULT = "/app/tensorrt_llm/examples"


def free_memory_fraction(spec: VariantSpec) -> float:
    """``kv_cache.memory_fraction`` as TensorRT-LLM's fraction of free memory (module docstring)."""
    acc = accelerators.get(spec.accelerator)
    budget = memory_budget(spec, spec.facts(), acc)
    free = acc.memory_gib * GIB - budget.weights - budget.overhead
    fraction = budget.kv_capacity / free if free > 0 else 0.0
    return max(0.01, math.floor(fraction * 100) / 100)


def needs_quantize(spec: VariantSpec) -> bool:
    return spec.quantization in QFORMATS or spec.kv_cache.dtype == "fp8"


def _paths(spec: VariantSpec, names: tuple[str, ...]) -> str:
    work = work_dir(spec)
    defaults = {
        "MODEL_DIR": model_source(spec, container=True),
        "CHECKPOINT_DIR": f"{work}/trtllm-checkpoint",
        "ENGINE_DIR": f"{work}/trtllm-engine",
        "TRTLLM_EXAMPLES": EXAMPLES_DEFAULT,
    }
    return "".join(f'{name}="${{{name}:-{defaults[name]}}}"\n' for name in names)


def _quantize_args(spec: VariantSpec, output: str, export: str) -> list[str]:
    args = [
        "python3", Raw('"$TRTLLM_EXAMPLES/quantization/quantize.py"'),
        "--model_dir", Raw('"$MODEL_DIR"'), "--output_dir", Raw(output),
        "--dtype", VLLM_DTYPES[spec.dtype], "--qformat", QFORMATS.get(spec.quantization, "full_prec"),
    ]  # fmt: skip
    if spec.kv_cache.dtype == "fp8":
        args += ["--kv_cache_dtype", "fp8"]
    if spec.quantization == "awq-int4":
        args += ["--awq_block_size", "128"]
    if export == "tensorrt_llm":
        args += ["--tp_size", str(spec.tensor_parallel), "--pp_size", str(spec.pipeline_parallel)]
    return [*args, "--calib_size", "512", "--export_format", export]


def convert_command(spec: VariantSpec) -> list[str]:
    """HF checkpoint → TensorRT-LLM checkpoint (sharded for TP × PP), quantized as the spec says."""
    if needs_quantize(spec):
        return _quantize_args(spec, '"$CHECKPOINT_DIR"', "tensorrt_llm")
    family = "qwen" if spec.facts().attention_bias else "llama"
    return [
        "python3", Raw(f'"$TRTLLM_EXAMPLES/models/core/{family}/convert_checkpoint.py"'),
        "--model_dir", Raw('"$MODEL_DIR"'), "--output_dir", Raw('"$CHECKPOINT_DIR"'),
        "--dtype", VLLM_DTYPES[spec.dtype],
        "--tp_size", str(spec.tensor_parallel), "--pp_size", str(spec.pipeline_parallel),
    ]  # fmt: skip


def build_command(spec: VariantSpec) -> list[str]:
    """``trtllm-build``: the engine with the spec's batch, length and KV-cache settings."""
    length = spec.max_model_len()
    args = [
        "trtllm-build", "--checkpoint_dir", Raw('"$CHECKPOINT_DIR"'), "--output_dir", Raw('"$ENGINE_DIR"'),
        "--max_batch_size", str(spec.batching.max_num_seqs),
        "--max_seq_len", str(length), "--max_input_len", str(max(1, length - 1)),
    ]  # fmt: skip
    if spec.batching.max_num_batched_tokens is not None:
        args += ["--max_num_tokens", str(spec.batching.max_num_batched_tokens)]
    return [
        *args,
        "--kv_cache_type", "paged", "--use_paged_context_fmha", "enable",
        "--tokens_per_block", str(spec.kv_cache.block_size), "--gemm_plugin", "auto",
    ]  # fmt: skip


def serve_options(spec: VariantSpec) -> dict[str, Any]:
    """``trtllm-serve --extra_llm_api_options`` content (LLM-API fields, PyTorch backend)."""
    options: dict[str, Any] = {
        "tensor_parallel_size": spec.tensor_parallel,
        "pipeline_parallel_size": spec.pipeline_parallel,
        "max_batch_size": spec.batching.max_num_seqs,
    }
    if spec.batching.max_num_batched_tokens is not None:
        options["max_num_tokens"] = spec.batching.max_num_batched_tokens
    options["max_seq_len"] = spec.max_model_len()
    options["kv_cache_config"] = {
        "free_gpu_memory_fraction": free_memory_fraction(spec),
        "enable_block_reuse": spec.kv_cache.prefix_caching,
        "tokens_per_block": spec.kv_cache.block_size,
        "dtype": "fp8" if spec.kv_cache.dtype == "fp8" else "auto",
    }
    graphs = spec.cuda_graphs
    graph_config: dict[str, Any] | None = None
    if graphs.enabled and graphs.capture_sizes:
        graph_config = {"batch_sizes": list(graphs.capture_sizes), "enable_padding": True}
    elif graphs.enabled:
        graph_config = {"max_batch_size": spec.batching.max_num_seqs, "enable_padding": True}
    options["cuda_graph_config"] = graph_config
    return options


def served_model(spec: VariantSpec) -> str:
    """What ``trtllm-serve`` loads: the ModelOpt export of ``trtllm/quantize_hf.sh`` for quantized
    weights (fp8, int8-wa, AWQ), else the model itself (the local script and the k8s pod alike)."""
    if spec.quantization in QFORMATS:
        return f"{work_dir(spec)}/quantized-hf"
    return model_source(spec, container=True)


def _serve_script(spec: VariantSpec) -> str:
    quantized = spec.quantization in QFORMATS
    model = served_model(spec)
    options = Raw('"$(dirname "$0")/extra_llm_api_options.yaml"')
    argv = ["exec", "trtllm-serve", Raw('"$MODEL"'), "--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    command = shell_command([*argv, "--backend", "pytorch", "--extra_llm_api_options", options])
    note = "# The ModelOpt export from quantize_hf.sh.\n" if quantized else ""
    return shell_script(
        spec,
        "# trtllm-serve (OpenAI API) on the PyTorch backend; extra arguments override.\n"
        f'{note}MODEL="${{MODEL:-{model}}}"\n{command} \\\n  "$@"\n',
    )


def _script(spec: VariantSpec, what: str, argv: list[str]) -> str:
    names = tuple(
        name
        for name in ("MODEL_DIR", "CHECKPOINT_DIR", "ENGINE_DIR", "TRTLLM_EXAMPLES")
        if any(f"${name}" in word for word in argv)
    )
    return shell_script(spec, f"# {what}\n{_paths(spec, names)}{shell_command(argv)}\n")


def render_trtllm(spec: VariantSpec) -> dict[str, str | bytes]:
    """The ``trtllm/`` scripts and options YAML for ``spec`` (engines trtllm, triton-trtllm)."""
    files: dict[str, str | bytes] = {
        "trtllm/convert.sh": _script(
            spec,
            "Hugging Face checkpoint -> TensorRT-LLM checkpoint ($CHECKPOINT_DIR).",
            convert_command(spec),
        ),
        "trtllm/build.sh": _script(
            spec, "TensorRT-LLM checkpoint -> TensorRT engine ($ENGINE_DIR).", build_command(spec)
        ),
        "trtllm/extra_llm_api_options.yaml": header(spec) + to_yaml(serve_options(spec)),
        "trtllm/serve.sh": _serve_script(spec),
    }
    if spec.quantization in QFORMATS:
        output = f'"${{QUANTIZED_DIR:-{work_dir(spec)}/quantized-hf}}"'
        files["trtllm/quantize_hf.sh"] = _script(
            spec,
            "Quantize with ModelOpt and export a Hugging Face checkpoint for serve.sh.",
            _quantize_args(spec, output, "hf"),
        )
    return files
