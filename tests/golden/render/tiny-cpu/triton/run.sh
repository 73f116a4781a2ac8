#!/bin/sh
# Rendered by `turnout deploy render` from variant tiny-cpu-int4 (d9cee4737e94).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
cd "$(dirname "$0")"
REPO="$PWD/model_repository"
exec tritonserver --model-repository "$REPO" --http-port 8000 --grpc-port 8001 --metrics-port 8002 "$@"
