#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-triton-trtllm (bc02fe4867bf).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
cd "$(dirname "$0")"
REPO="$PWD/model_repository"
: "${TRTLLM_BACKEND_SRC:?set it to the triton_backend folder of a TensorRT-LLM checkout}"
for step in preprocessing postprocessing; do
  [ -f "$REPO/$step/1/model.py" ] ||
    cp "$TRTLLM_BACKEND_SRC/all_models/inflight_batcher_llm/$step/1/model.py" "$REPO/$step/1/"
done
exec tritonserver --model-repository "$REPO" --http-port 8000 --grpc-port 8001 --metrics-port 8002 "$@"
