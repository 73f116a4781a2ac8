"""Capacity math for a variant on an accelerator: memory fit, KV-cache capacity, rooflines, cost.

Off the request path: ``turnout plan`` and ``deploy.validate`` call these before launch. Every
function is pure arithmetic on a spec, its model facts and a catalog entry (no clock, no I/O).
Bytes are bytes; ``*_gib`` values are GiB (2**30 bytes). The model, stated:

- Weights: ``num_params`` × bytes per weight (fp32 4, fp16/bf16 2; fp8 and int8-wa 1; AWQ/GPTQ
  int4 0.5 + 2.5/128 for fp16 scales and 4-bit zeros per 128-weight group; ONNX Runtime int4
  0.5 + 4.5/32 and int8 1 + 5/32 for fp32 scales and zero points per 32-weight block). Quantized
  variants keep the input embedding and lm_head in ``dtype`` (ONNX Runtime quantizes lm_head).
  Split evenly over tensor × pipeline parallel devices (replicated norms are ignored: < 0.1%).
- KV cache per token: 2 (K and V) × layers × KV heads × head_dim × bytes of ``kv_cache.dtype``
  (``auto`` = ``dtype``). Per device: layers / PP (rounded up) × KV heads / TP (rounded up: when
  TP exceeds the KV heads, each device holds a replicated head, as vLLM and TensorRT-LLM do).
- Overhead per device: runtime context (1.0 GiB on NVIDIA/AMD GPUs for CUDA/ROCm context, NCCL and
  allocator slack; 0.5 on TPU; 0.25 on CPU) + 0.5 GiB when CUDA graphs are captured + activations
  of one prefill step: tokens × (2 × intermediate / TP + 4 × hidden) × activation bytes, tokens =
  ``max_num_batched_tokens`` or min(max_model_len, 8192), plus fp32 logits for ``max_num_seqs`` ×
  vocab / TP. Available: ``memory_fraction`` × device memory. A variant fits when weights +
  overhead + the KV cache of one full ``max_model_len`` sequence fit in what is available.
- vLLM on CPU does not take the room left for KV cache itself: it is given
  ``VLLM_CPU_KVCACHE_SPACE``, whole GiB (``cpu_kv_cache_gib``: enough for ``max_num_seqs`` full
  sequences, at most the room left floored to whole GiB, at least 1). That grant is its KV
  capacity here, and it fits only when the grant holds one ``max_model_len`` sequence's KV blocks
  (vLLM refuses to start otherwise), so rounding down can make a variant that fits by bytes not fit.
- Decode roofline (memory-bandwidth bound): one step reads the device's weights once plus the KV
  cache of every sequence in the batch, each sequence assumed at ``context`` tokens (the worst
  case). Single stream crosses the pipeline stages one after another; at max batch the stages are
  assumed overlapped. Max batch = min(``max_num_seqs``, sequences whose KV fits at ``context``).
- Prefill roofline (compute bound): 2 × params FLOPs per token + causal attention 2 × layers ×
  (heads × head_dim) × context² per prompt, over all devices' dense FLOPs at the precision the
  GEMMs run in (fp8 → fp8, int8-wa and ONNX Runtime int8/int4 → int8, fp32 → fp32, else bf16).
- Not modelled: interconnect time (tensor-parallel all-reduces; on PCIe-only devices such as the
  L40S real TP decode falls well short of the bound), kernel efficiency, scheduling and sampling.
- Cost per million output tokens: device_count × price per device-hour / (decode tokens/s at max
  batch × 3600) × 1e6, per replica (replicas scale cost and throughput alike); per million input
  tokens alike over the prefill roofline (providers price the two apart; an embedding variant's
  whole work is input).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict

from deploy.accelerators import Accelerator
from deploy.model_facts import ModelFacts
from deploy.spec import Quantization, VariantSpec

GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# Quantization → (bytes per weight, are the input embedding AND lm_head kept in dtype?)
QUANTIZED_WEIGHT: dict[str, tuple[float, bool]] = {
    "fp8": (1.0, True),
    "int8-wa": (1.0, True),
    "awq-int4": (0.5 + 2.5 / 128, True),
    "gptq-int4": (0.5 + 2.5 / 128, True),
    "ort-int8": (1.0 + 5 / 32, False),
    "ort-int4": (0.5 + 4.5 / 32, False),
}
RUNTIME_OVERHEAD_GIB = {"nvidia": 1.0, "amd": 1.0, "google": 0.5, "cpu": 0.25}
CUDA_GRAPHS_GIB = 0.5
PREFILL_TOKENS_CAP = 8192
Precision = Literal["fp32", "bf16", "fp8", "int8"]


def weight_bytes(facts: ModelFacts, dtype: str, quantization: Quantization) -> float:
    """All weights of the model, in bytes."""
    if quantization == "none":
        return float(facts.num_params * DTYPE_BYTES[dtype])
    per_weight, keep_both = QUANTIZED_WEIGHT[quantization]
    kept = facts.embedding_params if keep_both else facts.vocab_size * facts.hidden_size
    return kept * DTYPE_BYTES[dtype] + (facts.num_params - kept) * per_weight


def kv_element_bytes(spec: VariantSpec) -> int:
    return DTYPE_BYTES[spec.dtype if spec.kv_cache.dtype == "auto" else spec.kv_cache.dtype]


def kv_bytes_per_token(facts: ModelFacts, element_bytes: int) -> int:
    """KV cache of one token for the whole model: 2 × layers × KV heads × head_dim × bytes."""
    return 2 * facts.num_layers * facts.num_kv_heads * facts.head_dim * element_bytes


def kv_bytes_per_token_per_device(facts: ModelFacts, element_bytes: int, tp: int, pp: int) -> int:
    layers = math.ceil(facts.num_layers / pp)
    heads = math.ceil(facts.num_kv_heads / tp)  # ≥ 1: replicated when tp > KV heads
    return 2 * layers * heads * facts.head_dim * element_bytes


def overhead_bytes(spec: VariantSpec, facts: ModelFacts, accelerator: Accelerator) -> float:
    """Runtime context + CUDA graphs + one prefill step's activations and logits, per device."""
    tp = spec.tensor_parallel
    tokens = spec.batching.max_num_batched_tokens or min(spec.max_model_len(), PREFILL_TOKENS_CAP)
    width = 2 * facts.intermediate_size / tp + 4 * facts.hidden_size
    activations = tokens * width * DTYPE_BYTES[spec.dtype]
    logits = spec.batching.max_num_seqs * facts.vocab_size / tp * 4
    graphs = CUDA_GRAPHS_GIB if spec.cuda_graphs.enabled else 0.0
    return (RUNTIME_OVERHEAD_GIB[accelerator.vendor] + graphs) * GIB + activations + logits


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes per device: what the variant needs against what the memory fraction allows."""

    weights: float
    kv_one_sequence: float
    overhead: float
    available: float
    max_model_len: int
    kv_per_token: int  # per device
    # The KV cache the engine is given outright (vLLM on CPU: VLLM_CPU_KVCACHE_SPACE), None when
    # it takes what is left; then ``kv_one_sequence_blocks`` (one sequence in whole KV blocks,
    # vLLM's own rule) must fit in it.
    kv_granted: float | None = None
    kv_one_sequence_blocks: float = 0.0

    @property
    def needed(self) -> float:
        return self.weights + self.kv_one_sequence + self.overhead

    @property
    def kv_room(self) -> float:
        """Bytes left for the KV cache after weights and overhead (0 when none)."""
        return max(0.0, self.available - self.weights - self.overhead)

    @property
    def granted_too_small(self) -> bool:
        return self.kv_granted is not None and self.kv_granted < self.kv_one_sequence_blocks

    @property
    def fits(self) -> bool:
        return self.needed <= self.available and not self.granted_too_small

    @property
    def kv_capacity(self) -> float:
        """Bytes of KV cache the engine gets: the grant, else the room left (0 when none)."""
        return self.kv_room if self.kv_granted is None else self.kv_granted

    @property
    def kv_tokens(self) -> int:
        return int(self.kv_capacity // self.kv_per_token)

    def describe(self, accelerator: Accelerator, fraction: float) -> str:
        if self.needed <= self.available and self.kv_granted is not None and self.granted_too_small:
            return (
                f"vLLM on CPU is given VLLM_CPU_KVCACHE_SPACE={self.kv_granted / GIB:.0f} GiB (whole GiB of "
                f"the {self.kv_room / GIB:.2f} GiB left after weights and overhead), less than the "
                f"{self.kv_one_sequence_blocks / GIB:.2f} GiB KV of one {self.max_model_len}-token "
                "sequence, and vLLM refuses to start: raise kv_cache.memory_fraction or lower "
                "kv_cache.max_model_len"
            )
        return (
            f"needs {self.needed / GIB:.1f} GiB per device: weights {self.weights / GIB:.1f} "
            f"+ KV {self.kv_one_sequence / GIB:.1f} (one {self.max_model_len}-token sequence) "
            f"+ overhead {self.overhead / GIB:.1f}; {accelerator.product} {accelerator.memory_gib:g} GiB "
            f"× {fraction:.2f} = {self.available / GIB:.1f} GiB available"
        )


def memory_budget(spec: VariantSpec, facts: ModelFacts, accelerator: Accelerator) -> MemoryBudget:
    devices = spec.tensor_parallel * spec.pipeline_parallel
    per_token = kv_bytes_per_token_per_device(
        facts, kv_element_bytes(spec), spec.tensor_parallel, spec.pipeline_parallel
    )
    length = spec.max_model_len()
    budget = MemoryBudget(
        weights=weight_bytes(facts, spec.dtype, spec.quantization) / devices,
        kv_one_sequence=float(per_token * length),
        overhead=overhead_bytes(spec, facts, accelerator),
        available=spec.kv_cache.memory_fraction * accelerator.memory_gib * GIB,
        max_model_len=length,
        kv_per_token=per_token,
    )
    if spec.engine == "vllm" and accelerator.vendor == "cpu":
        block = spec.kv_cache.block_size
        budget = replace(
            budget,
            kv_granted=float(cpu_kv_cache_gib(spec, facts, budget.kv_room) * GIB),
            kv_one_sequence_blocks=float(math.ceil(length / block) * block * per_token),
        )
    return budget


def full_batch_kv_bytes(spec: VariantSpec, facts: ModelFacts) -> int:
    """KV cache bytes of ``max_num_seqs`` sequences at the full context."""
    per_token = kv_bytes_per_token(facts, kv_element_bytes(spec))
    return per_token * spec.max_model_len() * spec.batching.max_num_seqs


def cpu_kv_cache_gib(spec: VariantSpec, facts: ModelFacts, room: float) -> int:
    """Whole GiB of KV cache for vLLM on a CPU (``VLLM_CPU_KVCACHE_SPACE``, an integer): enough
    for ``max_num_seqs`` full-length sequences, but no more than ``room`` (the bytes the fraction
    leaves after weights and overhead: what vLLM takes by itself on a GPU) floored; at least 1.
    A batch of 256 8k-token Llama-3-8B sequences wants 256 GiB of KV, more than a 256 GiB socket
    holds beside its weights: the engine gets what fits, and its scheduler runs fewer sequences
    at once. ``MemoryBudget.fits`` checks the result holds one full sequence."""
    wanted = math.ceil(full_batch_kv_bytes(spec, facts) / GIB)
    return max(1, min(wanted, math.floor(room / GIB)))


def max_sequences(kv_tokens: int, context: int, block_size: int) -> int:
    """Sequences of ``context`` tokens whose KV blocks fit in ``kv_tokens`` tokens of cache."""
    per_sequence = math.ceil(context / block_size) * block_size
    return kv_tokens // per_sequence


def decode_tokens_per_s(
    weights: float, kv_per_token: int, context: int, batch: int, bandwidth: float, stages: int = 1
) -> float:
    """Bandwidth-bound decode tokens/s: ``batch`` / time to read weights + the batch's KV.

    ``weights`` and ``kv_per_token`` are per device, ``bandwidth`` bytes/s per device; with
    ``stages`` > 1 the step crosses pipeline stages in turn (use 1 when they overlap).
    """
    if batch <= 0:
        return 0.0
    step = stages * (weights + batch * context * kv_per_token) / bandwidth
    return batch / step


def compute_precision(spec: VariantSpec, accelerator: Accelerator) -> Precision:
    """The precision the GEMMs run in, which picks the FLOPs figure for prefill."""
    if spec.quantization == "fp8":
        return "fp8"
    if spec.quantization == "int8-wa":
        return "int8"
    if spec.quantization in ("ort-int8", "ort-int4"):
        return "int8" if accelerator.int8_tops is not None else "fp32"
    return "fp32" if spec.dtype == "fp32" else "bf16"


def prefill_flops(facts: ModelFacts, context: int) -> float:
    """FLOPs to prefill one ``context``-token prompt: 2·params·L + causal attention 2·layers·d·L²."""
    attention_width = facts.num_attention_heads * facts.head_dim
    return 2.0 * facts.num_params * context + 2.0 * facts.num_layers * attention_width * context**2


def prefill_tokens_per_s(facts: ModelFacts, context: int, flops_per_s: float) -> float:
    return context / (prefill_flops(facts, context) / flops_per_s)


def cost_per_million_tokens(devices: int, price_per_hour: float, tokens_per_s: float) -> float | None:
    if tokens_per_s <= 0:
        return None
    return devices * price_per_hour / (tokens_per_s * 3600) * 1e6


class PlanRow(BaseModel):
    """One variant on one accelerator (per replica)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accelerator: str
    device_count: int
    context: int
    fits: bool
    weights_gib_per_device: float
    kv_bytes_per_token: int  # whole model
    kv_bytes_per_token_per_device: int
    kv_tokens: int  # per replica: tokens of KV cache that fit
    max_seqs: int  # concurrent sequences at ``context`` (capped by max_num_seqs)
    decode_tok_s_single: float
    decode_tok_s_max_batch: float
    prefill_tok_s: float | None
    usd_per_hour: float
    usd_per_m_output_tokens: float | None
    usd_per_m_input_tokens: float | None  # at the prefill roofline
    needed_gib_per_device: float
    available_gib_per_device: float
    problems: tuple[str, ...] = ()  # filled by deploy.plan_table (validation on this accelerator)


def plan_row(spec: VariantSpec, facts: ModelFacts, accelerator: Accelerator, context: int) -> PlanRow:
    """Plan ``spec`` as written, but on ``accelerator``, for sequences of ``context`` tokens."""
    budget = memory_budget(spec, facts, accelerator)
    bandwidth = accelerator.memory_bandwidth_gbps * 1e9
    fitting = max_sequences(budget.kv_tokens, context, spec.kv_cache.block_size)
    batch = min(spec.batching.max_num_seqs, fitting)
    stages = spec.pipeline_parallel
    single = decode_tokens_per_s(budget.weights, budget.kv_per_token, context, 1, bandwidth, stages)
    at_max = decode_tokens_per_s(budget.weights, budget.kv_per_token, context, batch, bandwidth)
    flops = accelerator.flops(compute_precision(spec, accelerator))
    devices = spec.device_count
    price = devices * accelerator.price_per_hour_usd
    prefill = None if flops is None else prefill_tokens_per_s(facts, context, flops * devices)
    return PlanRow(
        accelerator=accelerator.name,
        device_count=devices,
        context=context,
        fits=budget.fits,
        weights_gib_per_device=budget.weights / GIB,
        kv_bytes_per_token=kv_bytes_per_token(facts, kv_element_bytes(spec)),
        kv_bytes_per_token_per_device=budget.kv_per_token,
        kv_tokens=budget.kv_tokens,
        max_seqs=batch,
        decode_tok_s_single=single if fitting else 0.0,
        decode_tok_s_max_batch=at_max,
        prefill_tok_s=prefill,
        usd_per_hour=price,
        usd_per_m_output_tokens=cost_per_million_tokens(devices, accelerator.price_per_hour_usd, at_max),
        usd_per_m_input_tokens=None
        if prefill is None
        else cost_per_million_tokens(devices, accelerator.price_per_hour_usd, prefill),
        needed_gib_per_device=budget.needed / GIB,
        available_gib_per_device=budget.available / GIB,
    )
