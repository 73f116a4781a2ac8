#!/bin/sh
# Rendered by `turnout deploy render` from variant llama3-8b-triton-trtllm (bc02fe4867bf).
# Re-render from the spec instead of editing: the variant id names this exact spec.
set -eu
# TensorRT-LLM checkpoint -> TensorRT engine ($ENGINE_DIR).
CHECKPOINT_DIR="${CHECKPOINT_DIR:-/models/llama3-8b-triton-trtllm/trtllm-checkpoint}"
ENGINE_DIR="${ENGINE_DIR:-/models/llama3-8b-triton-trtllm/trtllm-engine}"
trtllm-build \
  --checkpoint_dir "$CHECKPOINT_DIR" \
  --output_dir "$ENGINE_DIR" \
  --max_batch_size 128 \
  --max_seq_len 8192 \
  --max_input_len 8191 \
  --max_num_tokens 8192 \
  --kv_cache_type paged \
  --use_paged_context_fmha enable \
  --tokens_per_block 64 \
  --gemm_plugin auto
