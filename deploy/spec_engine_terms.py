"""The engines' own names for a variant spec's fields, for the message a spec that uses one
gets (pure data; read by ``deploy.unknown_keys`` through ``VariantSpec.TERMS_ELSEWHERE``).

Off the request path: ``turnout deploy validate``, ``turnout plan`` and ``specs:`` in a gateway
config. People who write specs know vLLM's flags, TensorRT-LLM's build and runtime options,
Triton's ``config.pbtxt`` and Ray Serve's deployment options; a spec names each setting once,
in its own words, and the renderers (``deploy.render``) turn it back into each engine's.
"""

from __future__ import annotations


def _is(engine_name: str, field: str) -> str:
    return f"{engine_name} is '{field}' in a spec"


ENGINE_TERMS: dict[str, str] = {
    # KV cache
    "gpu_memory_utilization": _is("vLLM's --gpu-memory-utilization", "kv_cache.memory_fraction"),
    "free_gpu_memory_fraction": "TensorRT-LLM's free_gpu_memory_fraction is 'kv_cache.memory_fraction' "
    "in a spec (a share of the whole device; the render gives TensorRT-LLM its share of what is left)",
    "kv_cache_dtype": _is("vLLM's --kv-cache-dtype", "kv_cache.dtype"),
    "tokens_per_block": _is("TensorRT-LLM's tokens_per_block", "kv_cache.block_size"),
    "enable_prefix_caching": _is("vLLM's --enable-prefix-caching", "kv_cache.prefix_caching"),
    "enable_block_reuse": _is("TensorRT-LLM's enable_block_reuse", "kv_cache.prefix_caching"),
    "max_seq_len": _is("TensorRT-LLM's max_seq_len", "kv_cache.max_model_len"),
    # parallelism
    "tensor_parallel_size": _is("vLLM's --tensor-parallel-size", "tensor_parallel"),
    "pipeline_parallel_size": _is("vLLM's --pipeline-parallel-size", "pipeline_parallel"),
    "tp_size": _is("TensorRT-LLM's tp_size", "tensor_parallel"),
    "pp_size": _is("TensorRT-LLM's pp_size", "pipeline_parallel"),
    # batching
    "max_batch_size": _is("TensorRT-LLM's and Triton's max_batch_size", "batching.max_num_seqs"),
    "max_num_tokens": _is("TensorRT-LLM's max_num_tokens", "batching.max_num_batched_tokens"),
    "max_queue_delay_microseconds": _is(
        "Triton's max_queue_delay_microseconds", "batching.max_queue_delay_us"
    ),
    "preferred_batch_size": _is("Triton's preferred_batch_size", "batching.preferred_batch_sizes"),
    # CUDA graphs
    "enforce_eager": _is("vLLM's --enforce-eager", "cuda_graphs: {enabled: false}"),
    "cuda_graph_sizes": _is("vLLM's --cuda-graph-sizes", "cuda_graphs.capture_sizes"),
    "cuda_graph_batch_sizes": _is("TensorRT-LLM's cuda_graph_batch_sizes", "cuda_graphs.capture_sizes"),
    # model, quantization, replicas
    "served_model_name": _is("vLLM's --served-model-name", "model.served_name"),
    "quant_algo": _is("TensorRT-LLM's quant_algo", "quantization"),
    "num_replicas": _is("Ray Serve's num_replicas", "replicas"),
}
