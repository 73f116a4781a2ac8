#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-70b-h100-tp4 (c0262e666f74).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# Hugging Face checkpoint -> TensorRT-LLM checkpoint ($CHECKPOINT_DIR).
MODEL_DIR="${MODEL_DIR:-meta-llama/Meta-Llama-3-70B-Instruct}"
CHECKPOINT_DIR="${CHECKPOINT_DIR:-/models/llama3-70b-h100-tp4/trtllm-checkpoint}"
TRTLLM_EXAMPLES="${TRTLLM_EXAMPLES:-/app/tensorrt_llm/examples}"
python3 "$TRTLLM_EXAMPLES/models/core/llama/convert_checkpoint.py" \
  --model_dir "$MODEL_DIR" \
  --output_dir "$CHECKPOINT_DIR" \
  --dtype bfloat16 \
  --tp_size 4 \
  --pp_size 1
