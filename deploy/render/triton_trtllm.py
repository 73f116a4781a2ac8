"""Triton model repository for TensorRT-LLM's backend: ``ensemble`` → pre/post-processing + engine.

Off the request path (``turnout deploy render --target triton`` for engine ``triton-trtllm``).
The layout and tensor names are TensorRT-LLM's inflight-batcher ones (``triton_backend/
all_models/inflight_batcher_llm``), text-generation subset: ``ensemble`` (``text_input``,
``max_tokens``, sampling inputs, ``stream`` → ``text_output``…) runs ``preprocessing`` (python:
tokenize), ``tensorrt_llm`` (``backend: "tensorrtllm"``, decoupled so ``stream`` works) and
``postprocessing`` (python: detokenize). The two python models' ``1/model.py`` are TensorRT-LLM's
own: ``triton/run.sh`` copies them from ``$TRTLLM_BACKEND_SRC`` (a TensorRT-LLM checkout's
``triton_backend`` folder); Turnout does not ship them.

``tensorrt_llm`` parameters from the spec: ``gpt_model_path`` (the engine ``trtllm/build.sh``
writes), ``gpt_model_type`` = ``inflight_fused_batching``, ``max_beam_width`` 1,
``batch_scheduler_policy`` ``guaranteed_no_evict``, ``kv_cache_free_gpu_mem_fraction`` (converted
as in ``deploy.render.trtllm``), ``enable_kv_cache_reuse`` (prefix caching),
``max_tokens_in_paged_kv_cache`` = ``max_num_seqs`` × ``max_model_len`` (never more KV than a full
batch can use), ``enable_chunked_context``, ``exclude_input_in_output``, and with CUDA graphs
``cuda_graph_mode`` (+ ``cuda_graph_cache_size`` = number of capture sizes, when given).
``dynamic_batching`` carries ``max_queue_delay_us`` and ``preferred_batch_sizes``.
"""

from __future__ import annotations

from typing import Any

from deploy.render.common import model_source, work_dir
from deploy.render.triton_pb import parameters, tensor
from deploy.render.trtllm import free_memory_fraction
from deploy.spec import VariantSpec

ENSEMBLE = "ensemble"
ENGINE_DIR = "{work}/trtllm-engine"  # where ``trtllm/build.sh`` writes the engine
# (ensemble input, data type, dims, preprocessing input or None, engine input or None); the
# first two are required, the rest optional.
_ENSEMBLE_INPUTS: tuple[tuple[str, str, tuple[int, ...], str | None, str | None], ...] = (
    ("text_input", "TYPE_STRING", (1,), "QUERY", None),
    ("max_tokens", "TYPE_INT32", (1,), "REQUEST_OUTPUT_LEN", None),
    ("bad_words", "TYPE_STRING", (-1,), "BAD_WORDS_DICT", None),
    ("stop_words", "TYPE_STRING", (-1,), "STOP_WORDS_DICT", None),
    ("end_id", "TYPE_INT32", (1,), "END_ID", None),
    ("pad_id", "TYPE_INT32", (1,), "PAD_ID", None),
    ("exclude_input_in_output", "TYPE_BOOL", (1,), None, "exclude_input_in_output"),
    ("top_k", "TYPE_INT32", (1,), None, "runtime_top_k"),
    ("top_p", "TYPE_FP32", (1,), None, "runtime_top_p"),
    ("temperature", "TYPE_FP32", (1,), None, "temperature"),
    ("length_penalty", "TYPE_FP32", (1,), None, "len_penalty"),
    ("repetition_penalty", "TYPE_FP32", (1,), None, "repetition_penalty"),
    ("min_tokens", "TYPE_INT32", (1,), None, "min_tokens"),
    ("presence_penalty", "TYPE_FP32", (1,), None, "presence_penalty"),
    ("frequency_penalty", "TYPE_FP32", (1,), None, "frequency_penalty"),
    ("seed", "TYPE_UINT64", (1,), None, "seed"),
    ("return_log_probs", "TYPE_BOOL", (1,), None, "return_log_probs"),
    ("return_num_input_tokens", "TYPE_BOOL", (1,), None, "return_num_input_tokens"),
    ("return_num_output_tokens", "TYPE_BOOL", (1,), None, "return_num_output_tokens"),
    ("beam_width", "TYPE_INT32", (1,), None, "beam_width"),
    ("stream", "TYPE_BOOL", (1,), None, "streaming"),
)
# Engine outputs that reach the ensemble's outputs under the same name.
_PASSED_OUTPUTS = (
    ("cum_log_probs", "TYPE_FP32", (-1,)),
    ("output_log_probs", "TYPE_FP32", (-1, -1)),
    ("batch_index", "TYPE_INT32", (1,)),
    ("sequence_index", "TYPE_INT32", (1,)),
    ("num_input_tokens", "TYPE_INT32", (1,)),
    ("num_output_tokens", "TYPE_INT32", (1,)),
)
# preprocessing output → (ensemble-internal tensor, engine input, data type, dims as
# preprocessing writes them); the engine takes [1]-shaped ones as scalars, the rest ragged.
_PRE_OUTPUTS = (
    ("INPUT_ID", "_INPUT_ID", "input_ids", "TYPE_INT32", (-1,)),
    ("REQUEST_INPUT_LEN", "_REQUEST_INPUT_LEN", "input_lengths", "TYPE_INT32", (1,)),
    ("REQUEST_OUTPUT_LEN", "_REQUEST_OUTPUT_LEN", "request_output_len", "TYPE_INT32", (-1,)),
    ("STOP_WORDS_IDS", "_STOP_WORDS_IDS", "stop_words_list", "TYPE_INT32", (2, -1)),
    ("BAD_WORDS_IDS", "_BAD_WORDS_IDS", "bad_words_list", "TYPE_INT32", (2, -1)),
    ("OUT_END_ID", "_PREPROCESSOR_END_ID", "end_id", "TYPE_INT32", (1,)),
    ("OUT_PAD_ID", "_PREPROCESSOR_PAD_ID", "pad_id", "TYPE_INT32", (1,)),
)
# What TensorRT-LLM's ``preprocessing/1/model.py`` reads from its own config at load (the
# data type of each, by name) or may write, beyond the tensors above: declared as in its
# reference ``config.pbtxt`` though the ensemble maps none of them, else ``initialize()`` fails
# on a missing entry (``None['data_type']``) and the whole ensemble stays down.
_PRE_OTHER_INPUTS = (
    ("DECODER_QUERY", "TYPE_STRING", (1,)),
    ("IMAGE_BYTES", "TYPE_UINT8", (-1, -1, -1, -1)),
    ("IMAGE_URL", "TYPE_STRING", (1,)),
    ("IMAGES", "TYPE_STRING", (-1,)),
    ("VIDEO_BYTES", "TYPE_UINT8", (-1, -1, -1, -1)),
    ("EMBEDDING_BIAS_WORDS", "TYPE_STRING", (-1,)),
    ("EMBEDDING_BIAS_WEIGHTS", "TYPE_FP32", (-1,)),
    ("PROMPT_TABLE_EXTRA_ID", "TYPE_UINT64", (1,)),
)
_PRE_OTHER_OUTPUTS = (
    ("DECODER_INPUT_ID", "TYPE_INT32", (-1,)),
    ("REQUEST_DECODER_INPUT_LEN", "TYPE_INT32", (1,)),
    ("EMBEDDING_BIAS", "TYPE_FP32", (-1,)),
    ("OUT_PROMPT_TABLE_EXTRA_IDS", "TYPE_UINT64", (-1,)),
    ("PIXEL_VALUES", "TYPE_FP16", (-1, -1, -1, -1)),
    ("ASPECT_RATIO_IDS", "TYPE_INT64", (-1,)),
    ("ASPECT_RATIO_MASK", "TYPE_INT64", (-1, -1)),
    ("CROSS_ATTENTION_MASK", "TYPE_INT64", (-1, -1, -1)),
    ("IMAGE_SIZES", "TYPE_INT64", (-1, 2)),
    ("IS_VIDEO_INPUT", "TYPE_BOOL", (1,)),
    ("ATTENTION_MASK", "TYPE_INT64", (-1,)),
    ("IMAGE_GRID_THW", "TYPE_INT64", (3,)),
    ("VISION_INPUT_ID", "TYPE_INT32", (-1,)),
)
_SCALAR_ENGINE_INPUTS = ("input_lengths", "request_output_len", "end_id", "pad_id")
_REQUIRED_ENGINE_INPUTS = ("input_ids", "input_lengths", "request_output_len")


def _batching(spec: VariantSpec) -> dict[str, Any]:
    batching: dict[str, Any] = {"max_queue_delay_microseconds": spec.batching.max_queue_delay_us}
    if spec.batching.preferred_batch_sizes:
        batching["preferred_batch_size"] = list(spec.batching.preferred_batch_sizes)
    return batching


def _cpu_instances() -> list[dict[str, Any]]:
    return [{"count": 1, "kind": "KIND_CPU"}]


def ensemble_config(spec: VariantSpec) -> dict[str, Any]:
    pre_map = {pre: name for name, _, _, pre, _ in _ENSEMBLE_INPUTS if pre}
    engine_map = {engine: name for name, _, _, _, engine in _ENSEMBLE_INPUTS if engine}
    engine_map.update({engine: internal for _, internal, engine, _, _ in _PRE_OUTPUTS})
    engine_outputs = {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"}
    engine_outputs.update({name: name for name, _, _ in _PASSED_OUTPUTS})
    steps = [
        {"model_name": "preprocessing", "model_version": -1, "input_map": pre_map,
         "output_map": {pre: internal for pre, internal, _, _, _ in _PRE_OUTPUTS}},
        {"model_name": "tensorrt_llm", "model_version": -1, "input_map": engine_map,
         "output_map": engine_outputs},
        {"model_name": "postprocessing", "model_version": -1,
         "input_map": {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"},
         "output_map": {"OUTPUT": "text_output"}},
    ]  # fmt: skip
    return {
        "name": ENSEMBLE,
        "platform": "ensemble",
        "max_batch_size": spec.batching.max_num_seqs,
        "input": [tensor(n, t, d, optional=i >= 2) for i, (n, t, d, _, _) in enumerate(_ENSEMBLE_INPUTS)],
        "output": [tensor("text_output", "TYPE_STRING", (-1,))] + [tensor(*out) for out in _PASSED_OUTPUTS],
        "ensemble_scheduling": {"step": steps},
    }


def preprocessing_config(spec: VariantSpec) -> dict[str, Any]:
    inputs = [
        tensor(pre, dtype, dims, optional=i >= 2)
        for i, (_, dtype, dims, pre, _) in enumerate(_ENSEMBLE_INPUTS)
        if pre is not None
    ]
    inputs += [tensor(*other, optional=True) for other in _PRE_OTHER_INPUTS]
    outputs = [tensor(pre, dtype, dims) for pre, _, _, dtype, dims in _PRE_OUTPUTS]
    outputs += [tensor(*other) for other in _PRE_OTHER_OUTPUTS]
    source = model_source(spec, container=True)
    return {
        "name": "preprocessing",
        "backend": "python",
        "max_batch_size": spec.batching.max_num_seqs,
        "dynamic_batching": {},
        "input": inputs,
        "output": outputs,
        "instance_group": _cpu_instances(),
        "parameters": parameters(
            {
                "tokenizer_dir": source,
                "add_special_tokens": "true",
                # Read unconditionally at load; empty = a text-only model (``visual_model_path``:
                # the name in TensorRT-LLM releases before the multimodal rename).
                "multimodal_model_path": "",
                "visual_model_path": "",
                "gpt_model_path": ENGINE_DIR.format(work=work_dir(spec)),
                "hf_model_path": source,
            }
        ),
    }


def postprocessing_config(spec: VariantSpec) -> dict[str, Any]:
    return {
        "name": "postprocessing",
        "backend": "python",
        "max_batch_size": spec.batching.max_num_seqs,
        "dynamic_batching": {},
        "input": [
            tensor("TOKENS_BATCH", "TYPE_INT32", (-1, -1)),
            tensor("SEQUENCE_LENGTH", "TYPE_INT32", (-1,)),
        ],
        "output": [tensor("OUTPUT", "TYPE_STRING", (-1,))],
        "instance_group": _cpu_instances(),
        "parameters": parameters(
            {"tokenizer_dir": model_source(spec, container=True), "skip_special_tokens": "true"}
        ),
    }


def _engine_parameters(spec: VariantSpec) -> dict[str, str]:
    values = {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": ENGINE_DIR.format(work=work_dir(spec)),
        "max_beam_width": "1",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": f"{free_memory_fraction(spec):g}",
        "enable_kv_cache_reuse": "true" if spec.kv_cache.prefix_caching else "false",
        "max_tokens_in_paged_kv_cache": str(spec.batching.max_num_seqs * spec.max_model_len()),
        "enable_chunked_context": "true",
        "exclude_input_in_output": "true",
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
    }
    if spec.cuda_graphs.enabled:
        values["cuda_graph_mode"] = "true"
        if spec.cuda_graphs.capture_sizes:
            values["cuda_graph_cache_size"] = str(len(spec.cuda_graphs.capture_sizes))
    return values


def engine_config(spec: VariantSpec) -> dict[str, Any]:
    inputs = []
    for _, dtype, dims, _, engine in _ENSEMBLE_INPUTS:
        if engine is not None:
            inputs.append(tensor(engine, dtype, dims, optional=True, scalar=True))
    for _, _, engine, dtype, dims in _PRE_OUTPUTS:
        optional = engine not in _REQUIRED_ENGINE_INPUTS
        if engine in _SCALAR_ENGINE_INPUTS:
            inputs.append(tensor(engine, dtype, (1,), optional=optional, scalar=True))
        else:
            inputs.append(tensor(engine, dtype, dims, optional=optional, ragged=True))
    outputs = [tensor("output_ids", "TYPE_INT32", (-1, -1)), tensor("sequence_length", "TYPE_INT32", (-1,))]
    return {
        "name": "tensorrt_llm",
        "backend": "tensorrtllm",
        "max_batch_size": spec.batching.max_num_seqs,
        "model_transaction_policy": {"decoupled": True},
        "dynamic_batching": _batching(spec),
        "input": sorted(inputs, key=lambda entry: str(entry["name"])),
        "output": outputs + [tensor(*out) for out in _PASSED_OUTPUTS],
        "instance_group": _cpu_instances(),
        "parameters": parameters(_engine_parameters(spec)),
    }


def trtllm_models(spec: VariantSpec) -> dict[str, dict[str, Any]]:
    """Model name → config (protobuf JSON form) for the TensorRT-LLM repository."""
    return {
        ENSEMBLE: ensemble_config(spec),
        "preprocessing": preprocessing_config(spec),
        "tensorrt_llm": engine_config(spec),
        "postprocessing": postprocessing_config(spec),
    }
