#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-triton-trtllm (bc02fe4867bf).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# Hugging Face checkpoint -> TensorRT-LLM checkpoint ($CHECKPOINT_DIR).
MODEL_DIR="${MODEL_DIR:-meta-llama/Meta-Llama-3-8B-Instruct}"
CHECKPOINT_DIR="${CHECKPOINT_DIR:-/models/llama3-8b-triton-trtllm/trtllm-checkpoint}"
TRTLLM_EXAMPLES="${TRTLLM_EXAMPLES:-/app/tensorrt_llm/examples}"
python3 "$TRTLLM_EXAMPLES/quantization/quantize.py" \
  --model_dir "$MODEL_DIR" \
  --output_dir "$CHECKPOINT_DIR" \
  --dtype bfloat16 \
  --qformat fp8 \
  --kv_cache_dtype fp8 \
  --tp_size 1 \
  --pp_size 1 \
  --calib_size 512 \
  --export_format tensorrt_llm
