#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-trtllm-awq (d553ff290422).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# Quantize with ModelOpt and export a Hugging Face checkpoint for serve.sh.
MODEL_DIR="${MODEL_DIR:-meta-llama/Meta-Llama-3-8B-Instruct}"
TRTLLM_EXAMPLES="${TRTLLM_EXAMPLES:-/app/tensorrt_llm/examples}"
python3 "$TRTLLM_EXAMPLES/quantization/quantize.py" \
  --model_dir "$MODEL_DIR" \
  --output_dir "${QUANTIZED_DIR:-/models/llama3-8b-trtllm-awq/quantized-hf}" \
  --dtype float16 \
  --qformat int4_awq \
  --awq_block_size 128 \
  --calib_size 512 \
  --export_format hf
