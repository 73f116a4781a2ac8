"""The Triton model repository the project ships, and the code its python-backend models run.

Off the gateway's process: these models run inside ``tritonserver`` (started by
``deploy.triton_runtime``), the engine at the far end of ``backends/triton.py``. ``models/``
is a plain Triton model repository serving the shipped model (``deploy/model/artifacts``)
through ONNX Runtime GenAI:

* ``turnout_tiny`` — text in, text out, ``dynamic_batching`` (one ORT GenAI batch per execute);
* ``turnout_tiny_stream`` — the same, decoupled: one response per token piece;
* ``ensemble`` / ``ensemble_stream`` — shaped like TensorRT-LLM's inflight-batcher ensemble
  (``preprocessing`` → ``tensorrt_llm`` / ``tensorrt_llm_stream`` → ``postprocessing``);
* ``turnout_tiny_vllm`` — shaped like Triton's vLLM backend (``sampling_parameters`` JSON);
* ``turnout_tiny_embed`` — texts in, embeddings out (``embed_models``), for ``/v1/embeddings``.

Every python-backend model runs the same small entry point, ``python_model.py``: it puts the
project root (a model-config parameter, relative to the model folder unless absolute) on
``sys.path`` and hands the work to the class named by its ``python_class`` parameter
(``text_models``, ``trtllm_models``, ``embed_models``), which reuse ``backends.ortgenai_runner``.
The model folder is the ``model_dir`` parameter. :func:`stage_repository` copies the repository
elsewhere with both parameters made absolute, a chosen precision and the entry point as each
python-backend model's ``1/model.py``, so the source tree is never written to and holds it once.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "models"
PYTHON_MODEL = Path(__file__).resolve().parent / "python_model.py"  # each python model's 1/model.py
PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODEL_NAMES = (
    "turnout_tiny",
    "turnout_tiny_stream",
    "turnout_tiny_vllm",
    "turnout_tiny_embed",
    "preprocessing",
    "tensorrt_llm",
    "tensorrt_llm_stream",
    "postprocessing",
    "ensemble",
    "ensemble_stream",
)
_PARAM = r'(parameters: \{{ key: "{key}" value: \{{ string_value: ")[^"]*(" \}} \}})'


def set_parameter(config_text: str, key: str, value: str) -> str:
    """Replace the one-line ``parameters: { key: "K" value: { string_value: "…" } }`` of ``key``."""
    text, count = re.subn(_PARAM.format(key=re.escape(key)), lambda m: f"{m[1]}{value}{m[2]}", config_text)
    if count == 0 and f'key: "{key}"' in config_text:
        raise ValueError(f'parameter "{key}" is not written on one line as stage_repository expects')
    return text


def stage_repository(dest: Path, precision: str = "fp32", model_root: Path | None = None) -> Path:
    """Copy the shipped repository to ``dest`` (made or replaced) with absolute paths; returns it.

    ``precision`` picks the ONNX Runtime GenAI folder (fp32, int8, int4) every model loads;
    ``model_root`` is another ``artifacts`` folder (default: the shipped one).
    """
    from deploy.model.artifacts import onnx_dir

    model_dir = onnx_dir(precision, model_root)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(MODELS_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for config in dest.glob("*/config.pbtxt"):
        (config.parent / "1").mkdir(exist_ok=True)  # each model's version folder (not in wheels)
        text = config.read_text()
        if 'backend: "python"' in text:
            shutil.copyfile(PYTHON_MODEL, config.parent / "1" / "model.py")
        text = set_parameter(text, "project_root", str(PROJECT_ROOT))
        for key in ("model_dir", "tokenizer_dir", "gpt_model_path"):
            text = set_parameter(text, key, str(model_dir))
        config.write_text(text)
    return dest
