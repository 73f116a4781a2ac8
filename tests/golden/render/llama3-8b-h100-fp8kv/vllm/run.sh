#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-h100-fp8kv (96ef24855397).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# Starts vLLM's OpenAI server; extra arguments override (e.g. --port 8001).
cd "$(dirname "$0")"
set -a
. ./env
set +a
exec "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server \
  --model meta-llama/Meta-Llama-3-8B-Instruct \
  --served-model-name meta-llama/Meta-Llama-3-8B-Instruct \
  --dtype bfloat16 \
  --tensor-parallel-size 1 \
  --pipeline-parallel-size 1 \
  --max-model-len 8192 \
  --block-size 16 \
  --gpu-memory-utilization 0.9 \
  --kv-cache-dtype fp8 \
  --enable-prefix-caching \
  --max-num-seqs 256 \
  --max-num-batched-tokens 8192 \
  --compilation-config '{"cudagraph_capture_sizes":[1,2,4,8,16,32,64,128,256]}' \
  --host 0.0.0.0 \
  --port 8000 \
  "$@"
