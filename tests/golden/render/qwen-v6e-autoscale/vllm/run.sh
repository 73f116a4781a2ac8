#!/bin/sh
# Rendered by `turnout deploy render` from variant qwen-tpu-v6e (aa90f525e58d).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# Starts vLLM's OpenAI server; extra arguments override (e.g. --port 8001).
cd "$(dirname "$0")"
set -a
. ./env
set +a
exec "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server \
  --model Qwen/Qwen2.5-7B-Instruct \
  --served-model-name Qwen/Qwen2.5-7B-Instruct \
  --dtype bfloat16 \
  --tensor-parallel-size 4 \
  --pipeline-parallel-size 1 \
  --max-model-len 16384 \
  --block-size 16 \
  --gpu-memory-utilization 0.9 \
  --enable-prefix-caching \
  --max-num-seqs 64 \
  --host 0.0.0.0 \
  --port 8000 \
  "$@"
