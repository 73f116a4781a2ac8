#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-tpu-v5e (977f79ef6e0c).
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
  --tensor-parallel-size 4 \
  --pipeline-parallel-size 1 \
  --max-model-len 8192 \
  --block-size 64 \
  --gpu-memory-utilization 0.9 \
  --no-enable-prefix-caching \
  --max-num-seqs 128 \
  --host 0.0.0.0 \
  --port 8000 \
  "$@"
