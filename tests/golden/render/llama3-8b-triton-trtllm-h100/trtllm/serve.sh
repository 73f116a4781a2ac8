#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-triton-trtllm (bc02fe4867bf).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# trtllm-serve (OpenAI API) on the PyTorch backend; extra arguments override.
# The ModelOpt export from quantize_hf.sh.
MODEL="${MODEL:-/models/llama3-8b-triton-trtllm/quantized-hf}"
exec trtllm-serve "$MODEL" \
  --host 0.0.0.0 \
  --port 8000 \
  --backend pytorch \
  --extra_llm_api_options "$(dirname "$0")/extra_llm_api_options.yaml" \
  "$@"
