#!/bin/sh
# Rendered by `turnout deploy render` from variant tiny-cpu-vllm-embed (135169c76c3a).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# Starts vLLM's OpenAI server; extra arguments override (e.g. --port 8001).
cd "$(dirname "$0")"
set -a
. ./env
set +a
exec "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server \
  --model <checkout>/deploy/model/artifacts/turnout-tiny/hf \
  --served-model-name turnout-tiny-embed \
  --runner pooling \
  --convert embed \
  --dtype float32 \
  --tensor-parallel-size 1 \
  --pipeline-parallel-size 1 \
  --max-model-len 512 \
  --block-size 16 \
  --no-enable-prefix-caching \
  --max-num-seqs 8 \
  --enforce-eager \
  --host 0.0.0.0 \
  --port 8000 \
  "$@"
