#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-triton-vllm (880adb415aa3).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
cd "$(dirname "$0")"
REPO="$PWD/model_repository"
exec tritonserver --model-repository "$REPO" --http-port 8000 --grpc-port 8001 --metrics-port 8002 "$@"
