"""Triton Inference Server: a model repository for the spec, every ``config.pbtxt`` from the protobuf.

Off the request path (``turnout deploy render --target triton``); files land under
``triton/model_repository/`` plus ``triton/run.sh``. Per engine:

- ``triton-trtllm``: TensorRT-LLM's ensemble layout (``deploy.render.triton_trtllm``).
- ``triton-vllm``: one model named after the spec, ``backend: "vllm"``, decoupled, no batch
  dimension (vLLM batches continuously), ``instance_group`` ``KIND_MODEL`` (vLLM places its own
  workers), and ``1/model.json``: the engine arguments of ``deploy.render.vllm.engine_args``
  (what the backend passes to ``AsyncEngineArgs``).
- ``onnxruntime-genai`` (CPU): the project's python-backend model (``deploy/triton_repo``), so the
  repository loads in the ``tritonserver`` of ``deploy.triton_runtime``: ``<name>`` (Triton's
  dynamic batcher: ``max_batch_size`` = ``max_num_seqs``, ``max_queue_delay_microseconds``,
  ``preferred_batch_size`` from the spec) and ``<name>-stream`` (the same, decoupled). Each gets
  the shipped shim as ``1/model.py``; parameters name the project root (this installation), the
  ``python_class`` and ``model_dir``: the ONNX Runtime GenAI folder for the spec's quantization
  next to its Hugging Face folder (``<model>/hf`` → ``<model>/int4``…, the layout ``turnout model
  build`` writes; other folders are built with ``python -m onnxruntime_genai.models.builder``).
  Tensors: ``text_input`` and optional ``max_tokens``, ``temperature``, ``top_p``, ``top_k``,
  ``seed``, ``stop``, ``ignore_eos`` (+ ``stream``) → ``text_output``, ``finish_reason``,
  ``prompt_tokens``, ``completion_tokens``. With ``task: embed``, also ``<name>-embed``
  (``deploy.triton_repo.embed_models``): ``text_input`` ``[n]`` → ``embedding`` ``[n, hidden]``,
  ``prompt_tokens`` ``[n]``, no batch dimension; a ``triton`` variant reaches it as its
  ``embed_model``. (Not for a generating spec: it loads the model a second time.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy.render import RenderError
from deploy.render.common import HTTP_PORT, header, model_source, ort_precision, shell_script, work_dir
from deploy.render.triton_pb import config_text, parameters, tensor
from deploy.render.triton_trtllm import trtllm_models
from deploy.render.vllm import engine_args
from deploy.spec import VariantSpec

REPOSITORY = "triton/model_repository"
TEXT_MODEL_CLASS = "deploy.triton_repo.text_models:TextModel"
EMBED_MODEL_CLASS = "deploy.triton_repo.embed_models:EmbedModel"
_TEXT_INPUTS = (
    ("text_input", "TYPE_STRING", (1,)),
    ("max_tokens", "TYPE_INT32", (1,)),
    ("temperature", "TYPE_FP32", (1,)),
    ("top_p", "TYPE_FP32", (1,)),
    ("top_k", "TYPE_INT32", (1,)),
    ("seed", "TYPE_UINT64", (1,)),
    ("stop", "TYPE_STRING", (-1,)),
    ("ignore_eos", "TYPE_BOOL", (1,)),
)
_TEXT_OUTPUTS = (
    ("text_output", "TYPE_STRING", (-1,)),
    ("finish_reason", "TYPE_STRING", (-1,)),
    ("prompt_tokens", "TYPE_INT32", (1,)),
    ("completion_tokens", "TYPE_INT32", (1,)),
)


def _project_root() -> Path:
    """The folder that holds this installation's ``deploy`` and ``backends`` packages."""
    from deploy.triton_repo import PROJECT_ROOT

    return PROJECT_ROOT


def _shim() -> str:
    """The shipped python-backend entry point every ``deploy/triton_repo`` model uses."""
    from deploy.triton_repo import PYTHON_MODEL

    return PYTHON_MODEL.read_text()


def ort_model_dir(spec: VariantSpec) -> str:
    hf = spec.model.resolved_path()
    if hf is None:  # a named architecture: its ONNX build lives on the models volume
        return f"{work_dir(spec)}/{ort_precision(spec)}"
    return str(hf.parent / ort_precision(spec))


def ort_config(spec: VariantSpec, name: str, *, decoupled: bool) -> dict[str, Any]:
    batching: dict[str, Any] = {"max_queue_delay_microseconds": spec.batching.max_queue_delay_us}
    if spec.batching.preferred_batch_sizes:
        batching["preferred_batch_size"] = list(spec.batching.preferred_batch_sizes)
    inputs = [
        tensor(n, t, d, optional=n != "text_input", ragged=n == "stop")
        for n, t, d in (*_TEXT_INPUTS, *((("stream", "TYPE_BOOL", (1,)),) if decoupled else ()))
    ]
    config: dict[str, Any] = {
        "name": name,
        "backend": "python",
        "max_batch_size": spec.batching.max_num_seqs,
        "dynamic_batching": batching,
        "input": inputs,
        "output": [tensor(*out) for out in _TEXT_OUTPUTS],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "parameters": parameters(
            {
                "project_root": str(_project_root()),
                "python_class": TEXT_MODEL_CLASS,
                "model_dir": ort_model_dir(spec),
                "default_max_tokens": "16",
                # The longest sequence the model serves: the spec's cap, or the model's context.
                "max_model_len": str(spec.max_model_len()),
            }
        ),
    }
    if decoupled:
        config["model_transaction_policy"] = {"decoupled": True}
    return config


def ort_embed_config(spec: VariantSpec, name: str) -> dict[str, Any]:
    """The embedding model: a request's texts in one call (no batch dimension), vectors out."""
    return {
        "name": name,
        "backend": "python",
        "max_batch_size": 0,
        "input": [tensor("text_input", "TYPE_STRING", (-1,))],
        "output": [tensor("embedding", "TYPE_FP32", (-1, -1)), tensor("prompt_tokens", "TYPE_INT32", (-1,))],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "parameters": parameters(
            {
                "project_root": str(_project_root()),
                "python_class": EMBED_MODEL_CLASS,
                "model_dir": ort_model_dir(spec),
                "max_model_len": str(spec.max_model_len()),
            }
        ),
    }


def vllm_config(spec: VariantSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "backend": "vllm",
        "max_batch_size": 0,
        "model_transaction_policy": {"decoupled": True},
        "instance_group": [{"count": 1, "kind": "KIND_MODEL"}],
    }


def _pbtxt(spec: VariantSpec, config: dict[str, Any]) -> str:
    return header(spec) + config_text(config)


def _rank_command(rank: int, ports: str) -> str:
    """One MPI rank's tritonserver: rank 0 loads the whole repository (and takes ``run.sh``'s
    arguments); the others load only the engine model, whose backend they serve as workers."""
    command = f'  -n 1 tritonserver --model-repository="$REPO" {ports}'
    if rank > 0:
        command += " --model-control-mode=explicit --load-model=tensorrt_llm"
    command += f" --disable-auto-complete-config --backend-config=python,shm-region-prefix-name=prefix{rank}_"
    return command + (' "$@"' if rank == 0 else "")


def _run_script(spec: VariantSpec) -> str:
    ports = f"--http-port {HTTP_PORT} --grpc-port {HTTP_PORT + 1} --metrics-port {HTTP_PORT + 2}"
    body = 'cd "$(dirname "$0")"\nREPO="$PWD/model_repository"\n'
    world = spec.tensor_parallel * spec.pipeline_parallel
    if spec.engine == "triton-trtllm":
        body += (
            ': "${TRTLLM_BACKEND_SRC:?set it to the triton_backend folder of a TensorRT-LLM checkout}"\n'
            "for step in preprocessing postprocessing; do\n"
            '  [ -f "$REPO/$step/1/model.py" ] ||\n'
            '    cp "$TRTLLM_BACKEND_SRC/all_models/inflight_batcher_llm/$step/1/model.py" "$REPO/$step/1/"\n'
            "done\n"
        )
        if world > 1:
            body += (
                f"# {world} ranks (TP {spec.tensor_parallel} x PP {spec.pipeline_parallel}) under MPI, as "
                "TensorRT-LLM's scripts/launch_triton_server.py\n# starts them, but run here in the "
                "foreground (that script spawns mpirun and exits, ending a container).\n"
                "exec mpirun --allow-run-as-root \\\n"
                + " : \\\n".join(_rank_command(rank, ports) for rank in range(world))
                + "\n"
            )
            return shell_script(spec, body)
    return shell_script(spec, body + f'exec tritonserver --model-repository "$REPO" {ports} "$@"\n')


def render_triton(spec: VariantSpec) -> dict[str, str | bytes]:
    """The model repository and ``triton/run.sh`` for ``spec`` (engines triton-*, onnxruntime-genai)."""
    files: dict[str, str | bytes] = {}
    if spec.engine == "triton-trtllm":
        for name, config in trtllm_models(spec).items():
            files[f"{REPOSITORY}/{name}/config.pbtxt"] = _pbtxt(spec, config)
            if name != "ensemble" and name != "tensorrt_llm":
                files[f"{REPOSITORY}/{name}/1/.keep"] = "TensorRT-LLM's model.py goes here (triton/run.sh).\n"
        files[f"{REPOSITORY}/ensemble/1/.keep"] = ""
        files[f"{REPOSITORY}/tensorrt_llm/1/.keep"] = ""
    elif spec.engine == "triton-vllm":
        files[f"{REPOSITORY}/{spec.name}/config.pbtxt"] = _pbtxt(spec, vllm_config(spec))
        model_json = engine_args(spec, model_source(spec, container=True))
        files[f"{REPOSITORY}/{spec.name}/1/model.json"] = json.dumps(model_json, indent=2) + "\n"
    elif spec.engine == "onnxruntime-genai":
        for name, decoupled in ((spec.name, False), (f"{spec.name}-stream", True)):
            files[f"{REPOSITORY}/{name}/config.pbtxt"] = _pbtxt(
                spec, ort_config(spec, name, decoupled=decoupled)
            )
            files[f"{REPOSITORY}/{name}/1/model.py"] = _shim()
        if spec.task == "embed":
            embed = f"{spec.name}-embed"
            files[f"{REPOSITORY}/{embed}/config.pbtxt"] = _pbtxt(spec, ort_embed_config(spec, embed))
            files[f"{REPOSITORY}/{embed}/1/model.py"] = _shim()
    else:
        raise RenderError(f"engine {spec.engine} has no Triton repository")
    files["triton/run.sh"] = _run_script(spec)
    return files
