#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-70b-h100-tp4 (c0262e666f74).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# trtllm-serve (OpenAI API) on the PyTorch backend; extra arguments override.
MODEL="${MODEL:-meta-llama/Meta-Llama-3-70B-Instruct}"
exec trtllm-serve "$MODEL" \
  --host 0.0.0.0 \
  --port 8000 \
  --backend pytorch \
  --extra_llm_api_options "$(dirname "$0")/extra_llm_api_options.yaml" \
  "$@"
