#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-awq-l40s (dc28cfdf6bee).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# Starts vLLM's OpenAI server; extra arguments override (e.g. --port 8001).
cd "$(dirname "$0")"
set -a
. ./env
set +a
exec "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server \
  --model /models/llama3-8b-awq-l40s \
  --served-model-name llama-3-8b-instruct-awq \
  --dtype float16 \
  --tensor-parallel-size 1 \
  --pipeline-parallel-size 1 \
  --max-model-len 8192 \
  --block-size 16 \
  --gpu-memory-utilization 0.9 \
  --quantization awq \
  --no-enable-prefix-caching \
  --max-num-seqs 128 \
  --host 0.0.0.0 \
  --port 8000 \
  "$@"
