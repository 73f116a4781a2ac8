"""Named starting points for a variant's settings: an engine's serving face on a vendor's hardware.

Read with the config (``backends/settings.py``), off the request path. A variant that says
``preset: NAME`` gets these fields unless it sets them itself, so

    tiny-trtllm: {kind: triton, preset: trtllm-ensemble, url: http://triton:8000}

is TensorRT-LLM's Triton ensemble (``tensors: trtllm``, ``engine: triton-trtllm``,
``model: ensemble``, NVIDIA). TensorRT-LLM's other face, ``trtllm-serve``, is an OpenAI server:
``kind: openai_http, preset: trtllm-serve``. The vendor profiles (NVIDIA CUDA, AMD ROCm, Google
TPU, CPU) are the ``vendor`` / ``accelerator`` fields, which label the variant's metrics
(``turnout_variant_info``) and comparison reports; the adapter is the same.
"""

from __future__ import annotations

from typing import Any

OPENAI_HTTP_PRESETS: dict[str, dict[str, Any]] = {
    "vllm-cuda": {"engine": "vllm", "vendor": "nvidia"},
    "vllm-rocm": {"engine": "vllm", "vendor": "amd"},
    "vllm-tpu": {"engine": "vllm", "vendor": "google", "accelerator": "tpu"},
    "vllm-cpu": {"engine": "vllm", "vendor": "cpu", "accelerator": "cpu-x86"},
    "trtllm-serve": {"engine": "trtllm-serve", "vendor": "nvidia"},
    "sglang": {"engine": "sglang", "vendor": "nvidia"},
}

TRITON_PRESETS: dict[str, dict[str, Any]] = {
    # TensorRT-LLM's inflight-batcher layout (triton_backend/all_models/inflight_batcher_llm).
    "trtllm-ensemble": {
        "tensors": "trtllm",
        "engine": "triton-trtllm",
        "model": "ensemble",
        "vendor": "nvidia",
    },
    # Triton's vLLM backend (its sample repository names the model vllm_model).
    "triton-vllm": {"tensors": "vllm", "engine": "triton-vllm", "model": "vllm_model", "vendor": "nvidia"},
    # The repository this project ships (deploy/triton_repo), on the CPU.
    "turnout-tiny": {
        "tensors": "turnout",
        "engine": "triton",
        "model": "turnout_tiny",
        "stream_model": "turnout_tiny_stream",
        "embed_model": "turnout_tiny_embed",
        "vendor": "cpu",
        "accelerator": "cpu-x86",
    },
}


def apply_preset(data: Any, presets: dict[str, dict[str, Any]]) -> Any:
    """``data`` with the fields of its ``preset`` filled in where ``data`` does not set them."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    name = data["preset"]
    if not isinstance(name, str) or name not in presets:
        raise ValueError(f"unknown preset {name!r}; expected one of: {', '.join(presets)}")
    return {**presets[name], **data}
