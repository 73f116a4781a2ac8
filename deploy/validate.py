"""Does a variant work? Parallelism, engine × vendor × quantization support, and memory fit.

Off the request path: ``turnout deploy validate`` (and ``turnout plan``, per accelerator) run
this before launch. ``problems(spec)`` returns every problem, each message starting with the
field path it is about; ``check(spec)`` raises ``SpecError`` listing them. Structure (types,
ranges, unknown names) was already checked when the spec was parsed (``deploy.spec``); a model
whose facts cannot be read (unknown ``model.architecture``, unreadable ``model.path``) is a spec
that cannot be understood, not one that would not deploy: both raise ``SpecError`` from
``VariantSpec.facts()`` instead (the CLI exits 2 for it, 1 for problems).

Decisions, stated:
- ``device_count`` must equal ``tensor_parallel × pipeline_parallel`` (devices per replica;
  never more devices than the engine uses).
- ``tensor_parallel`` must divide the attention heads. KV heads: when TP ≤ KV heads, TP must
  divide them; when TP > KV heads, TP must be a multiple of them and each device holds a
  replicated KV head, which vLLM and TensorRT-LLM both do (accepted; it costs KV memory, which
  ``deploy.plan`` counts).
- Engines by vendor: vLLM on all four; TensorRT-LLM, Triton (either backend) on NVIDIA only
  (Triton's official builds are NVIDIA/CPU, and its vLLM backend needs a GPU); ONNX Runtime GenAI
  is this project's CPU engine (CPU only, one device, fp32 activations, no prefix cache).
- Quantization: fp8 needs fp8 compute (Hopper, Ada, MI300-class); int8-wa needs int8 GEMMs;
  AWQ/GPTQ need their kernels (not on TPU), and under tensor parallelism each device's share of a
  row-parallel layer's input (the MLP's ``intermediate_size``, attention's heads × head_dim)
  must be whole quantization groups (the checkpoint's own, from its config.json; else 128, the
  group of AWQ/GPTQ checkpoints as published; none for per-channel): vLLM and TensorRT-LLM
  refuse to load one otherwise, and Qwen pads its 72B's MLP for exactly this; ORT
  int8/int4 only on ``onnxruntime-genai``, which takes only those or none. fp8 KV cache needs
  Hopper, Ada or MI300-class. CUDA graphs do not exist on TPU or CPU. TPUs compute in bf16 (no
  fp16) and run single-host slices here.
"""

from __future__ import annotations

from collections.abc import Mapping

from deploy import accelerators
from deploy.accelerators import Accelerator
from deploy.model_facts import ModelFacts
from deploy.plan import memory_budget
from deploy.spec import SpecError, VariantSpec

ENGINE_VENDORS = {
    "vllm": ("nvidia", "amd", "google", "cpu"),
    "trtllm": ("nvidia",),
    "triton-trtllm": ("nvidia",),
    "triton-vllm": ("nvidia",),
    "onnxruntime-genai": ("cpu",),
}
# onnxruntime-genai's quantizations, each with the name of its build folder beside the HF folder
ORT_PRECISIONS = {"none": "fp32", "ort-int8": "int8", "ort-int4": "int4"}
ORT_QUANTIZATIONS = tuple(ORT_PRECISIONS)
GPU_QUANTIZATIONS = ("fp8", "int8-wa", "awq-int4", "gptq-int4")
BATCHER_ENGINES = ("triton-trtllm", "onnxruntime-genai")  # triton-vllm: vLLM batches by itself
# Engines whose variants answer /v1/embeddings through Turnout: vLLM's pooling runner (the OpenAI
# adapter) and the embedded engine. trtllm-serve has no embeddings API, Triton's no OpenAI one.
EMBEDDING_ENGINES = ("vllm", "onnxruntime-genai")
# AWQ/GPTQ checkpoints' usual quantization group, when the model's config.json does not say its own
INT4_GROUP_SIZE = 128


def _parallelism(spec: VariantSpec, facts: ModelFacts) -> list[str]:
    tp, pp = spec.tensor_parallel, spec.pipeline_parallel
    found: list[str] = []
    if tp * pp != spec.device_count:
        found.append(
            f"device_count: {spec.device_count} must equal tensor_parallel × pipeline_parallel = {tp * pp}"
        )
    heads, kv = facts.num_attention_heads, facts.num_kv_heads
    if heads % tp:
        found.append(f"tensor_parallel: {tp} does not divide the {heads} attention heads of {facts.name}")
    if tp <= kv and kv % tp:
        found.append(f"tensor_parallel: {tp} does not divide the {kv} KV heads of {facts.name}")
    if tp > kv and tp % kv:
        found.append(
            f"tensor_parallel: {tp} exceeds the {kv} KV heads of {facts.name} and is not a multiple "
            "of them, so they cannot be replicated evenly"
        )
    if pp > facts.num_layers:
        found.append(f"pipeline_parallel: {pp} exceeds the {facts.num_layers} layers of {facts.name}")
    group = facts.quant_group_size or INT4_GROUP_SIZE  # the checkpoint's own, when its config says
    if spec.quantization in ("awq-int4", "gptq-int4") and tp > 1 and group > 0:  # -1: per-channel
        widths = {"intermediate_size": facts.intermediate_size,
                  "attention width": facts.num_attention_heads * facts.head_dim}  # fmt: skip
        for what, width in widths.items():
            if width % (tp * group):
                found.append(
                    f"tensor_parallel: {tp} splits the {what} {width} of {facts.name} into "
                    f"{width / tp:g}-wide shards, not whole {spec.quantization} groups of "
                    f"{group}; the engine refuses to load it (use a tensor_parallel whose "
                    "shards are)"
                )
    return found


def _engine(spec: VariantSpec, acc: Accelerator) -> list[str]:
    found: list[str] = []
    if acc.vendor != spec.vendor:
        found.append(f"vendor: {spec.vendor} does not match accelerator {acc.name} ({acc.vendor})")
    vendors = ENGINE_VENDORS[spec.engine]
    if acc.vendor not in vendors:
        found.append(f"engine: {spec.engine} runs only on {'/'.join(vendors)}, not on {acc.name}")
    if spec.engine == "onnxruntime-genai":
        if spec.quantization not in ORT_QUANTIZATIONS:
            allowed = ", ".join(ORT_QUANTIZATIONS)
            found.append(f"quantization: onnxruntime-genai takes {allowed}, not {spec.quantization}")
        if spec.dtype != "fp32":
            found.append(f"dtype: onnxruntime-genai on CPU runs fp32 activations, not {spec.dtype}")
        if spec.device_count != 1 or spec.tensor_parallel != 1 or spec.pipeline_parallel != 1:
            found.append("device_count: onnxruntime-genai runs on one device (no tensor/pipeline parallel)")
        if spec.kv_cache.prefix_caching:
            found.append("kv_cache.prefix_caching: onnxruntime-genai has no prefix cache")
        if spec.kv_cache.dtype != "auto":
            found.append("kv_cache.dtype: onnxruntime-genai keeps the KV cache in dtype (use auto)")
    elif spec.quantization.startswith("ort-"):
        found.append(f"quantization: {spec.quantization} runs only on the onnxruntime-genai engine")
    if spec.task == "embed" and spec.engine not in EMBEDDING_ENGINES:
        found.append(
            f"task: embed is served by {' or '.join(EMBEDDING_ENGINES)}; {spec.engine} serves no "
            "/v1/embeddings"
        )
    if spec.engine not in BATCHER_ENGINES:
        if spec.batching.max_queue_delay_us:
            found.append(f"batching.max_queue_delay_us: {spec.engine} batches continuously (no queue delay)")
        if spec.batching.preferred_batch_sizes:
            found.append(f"batching.preferred_batch_sizes: {spec.engine} has no dynamic batcher")
    return found


def _named(acc: Accelerator) -> str:
    """``a100-80gb (ampere)``; a TPU, whose architecture is its name, by its vendor instead."""
    kind = acc.vendor if acc.architecture == acc.name else acc.architecture
    return f"{acc.name} ({kind})"


def _hardware(spec: VariantSpec, acc: Accelerator) -> list[str]:
    found: list[str] = []
    q = spec.quantization
    if q in GPU_QUANTIZATIONS and spec.dtype == "fp32":
        found.append(f"dtype: {q} runs with fp16 or bf16 activations, not fp32")
    if q == "fp8" and not acc.fp8_compute:
        found.append(
            f"quantization: fp8 needs fp8 compute (Hopper, Ada or MI300-class); {_named(acc)} has none"
        )
    if q == "int8-wa" and not acc.int8_wa:
        found.append(f"quantization: int8-wa needs int8 GEMM kernels, not available on {acc.name}")
    if q in ("awq-int4", "gptq-int4") and not acc.awq_gptq:
        found.append(f"quantization: {q} has no kernels on {_named(acc)}")
    if spec.kv_cache.dtype == "fp8" and not acc.fp8_kv_cache:
        found.append(
            f"kv_cache.dtype: fp8 KV cache needs Hopper, Ada or MI300-class hardware, not {_named(acc)}"
        )
    if spec.cuda_graphs.enabled and (not acc.cuda_graphs or spec.engine == "onnxruntime-genai"):
        found.append(f"cuda_graphs.enabled: CUDA graphs do not exist on {acc.name} ({acc.vendor})")
    if spec.cuda_graphs.capture_sizes and not spec.cuda_graphs.enabled:
        found.append("cuda_graphs.capture_sizes: set, but cuda_graphs.enabled is false")
    per_node = acc.devices_per_node
    if per_node is not None and spec.device_count > per_node:
        found.append(
            f"device_count: {spec.device_count} {acc.name} for one replica, but a node holds "
            f"{per_node}; Turnout renders single-node engines (a multi-node vLLM on Ray or a "
            "LeaderWorkerSet is not rendered): use at most "
            f"{per_node} (tensor_parallel × pipeline_parallel) per replica"
        )
    if acc.vendor == "google":
        if spec.dtype == "fp16":
            found.append("dtype: TPUs compute in bf16, not fp16 (use bf16)")
        if spec.kv_cache.dtype == "fp16":
            found.append("kv_cache.dtype: TPUs hold the KV cache in bf16, not fp16 (use auto or bf16)")
        if spec.pipeline_parallel != 1:
            found.append("pipeline_parallel: vLLM on TPU shards with tensor parallelism only")
        if spec.device_count not in acc.tpu_topologies:
            shapes = ", ".join(f"{n} ({t})" for n, t in acc.tpu_topologies.items())
            found.append(f"device_count: {acc.name} single-host slices have {shapes} chips")
    return found


def _limits(spec: VariantSpec, facts: ModelFacts) -> list[str]:
    found: list[str] = []
    batching = spec.batching
    length = spec.kv_cache.max_model_len
    if length is not None and length > facts.max_context:
        found.append(
            f"kv_cache.max_model_len: {length} exceeds the max context {facts.max_context} of {facts.name}"
        )
    tokens = batching.max_num_batched_tokens
    if tokens is not None and tokens < batching.max_num_seqs:
        found.append(
            f"batching.max_num_batched_tokens: {tokens} is below max_num_seqs {batching.max_num_seqs}"
        )
    for field, sizes in (
        ("batching.preferred_batch_sizes", batching.preferred_batch_sizes),
        ("cuda_graphs.capture_sizes", spec.cuda_graphs.capture_sizes),
    ):
        if sizes and sizes[-1] > batching.max_num_seqs:
            found.append(f"{field}: {sizes[-1]} exceeds batching.max_num_seqs {batching.max_num_seqs}")
    return found


def problems(
    spec: VariantSpec,
    facts: ModelFacts | None = None,
    catalog: Mapping[str, Accelerator] | None = None,
) -> list[str]:
    """Every reason ``spec`` would not deploy, each starting with its field path (empty: ok).

    ``facts`` defaults to the spec's own (read lazily: ``SpecError`` when they cannot be read);
    ``catalog`` to the built-in one.
    """
    facts = facts or spec.facts()
    acc = accelerators.get(spec.accelerator, catalog)
    found = _parallelism(spec, facts) + _engine(spec, acc) + _hardware(spec, acc) + _limits(spec, facts)
    budget = memory_budget(spec, facts, acc)
    if not budget.fits:
        found.append("memory: " + budget.describe(acc, spec.kv_cache.memory_fraction))
    return found


def check(
    spec: VariantSpec,
    facts: ModelFacts | None = None,
    catalog: Mapping[str, Accelerator] | None = None,
) -> None:
    """Raise ``SpecError`` listing every problem of ``spec`` (one per line)."""
    found = problems(spec, facts, catalog)
    if found:
        lines = "\n".join(f"  {problem}" for problem in found)
        raise SpecError(f"{spec.name} ({spec.id}): {len(found)} problem(s)\n{lines}")
