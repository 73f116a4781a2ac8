"""Triton renderer: config.pbtxt built from (and parsing back into) Triton's model-config protobuf."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format  # type: ignore[import-untyped]

from deploy.render import RenderError, render
from deploy.render.triton_pb import config_text, parse_text, tensor
from deploy.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "tests" / "golden" / "render" / "_specs"
TINY = REPO / "deploy" / "examples" / "tiny-cpu.yaml"
REPOSITORY = "triton/model_repository"


def configs(path: Path) -> dict[str, Any]:
    files = render(load_spec(path), "triton")
    return {
        name.split("/")[2]: parse_text(str(content))
        for name, content in files.items()
        if name.endswith("config.pbtxt")
    }


def test_unknown_fields_and_enum_values_are_rejected() -> None:
    with pytest.raises(RenderError, match=r"Triton model config m: .*max_batch_sise"):
        config_text({"name": "m", "max_batch_sise": 4})
    with pytest.raises(RenderError, match="TYPE_STRNG"):
        config_text({"name": "m", "input": [tensor("x", "TYPE_STRNG", (1,))]})
    with pytest.raises(RenderError, match=r"max_batch_size.*out of range"):  # an int32 field
        config_text({"name": "m", "max_batch_size": 3_000_000_000})


def test_cpu_python_models_carry_the_specs_batching() -> None:
    found = configs(TINY)
    assert set(found) == {"tiny-cpu-int4", "tiny-cpu-int4-stream"}
    plain, stream = found["tiny-cpu-int4"], found["tiny-cpu-int4-stream"]
    for config in (plain, stream):
        assert config.backend == "python"
        assert config.max_batch_size == 16
        assert config.dynamic_batching.max_queue_delay_microseconds == 2000
        assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
        assert config.parameters["model_dir"].string_value.endswith(
            "deploy/model/artifacts/turnout-tiny/int4"
        )
        assert config.parameters["python_class"].string_value == "deploy.triton_repo.text_models:TextModel"
        assert Path(config.parameters["project_root"].string_value, "deploy", "triton_repo").is_dir()
    assert not plain.model_transaction_policy.decoupled and stream.model_transaction_policy.decoupled
    assert [t.name for t in stream.input][-1] == "stream" and "stream" not in [t.name for t in plain.input]
    files = render(load_spec(TINY), "triton")
    shim = (REPO / "deploy" / "triton_repo" / "python_model.py").read_text()
    assert files[f"{REPOSITORY}/tiny-cpu-int4/1/model.py"] == shim


def test_vllm_backend_model() -> None:
    path = SPECS / "llama3-8b-triton-vllm-a100.yaml"
    config = configs(path)["llama3-8b-triton-vllm"]
    assert config.backend == "vllm" and config.max_batch_size == 0
    assert config.model_transaction_policy.decoupled
    assert config.instance_group[0].kind == config.instance_group[0].KIND_MODEL
    files = render(load_spec(path), "triton")
    engine = json.loads(str(files[f"{REPOSITORY}/llama3-8b-triton-vllm/1/model.json"]))
    assert engine["tensor_parallel_size"] == 2 and engine["quantization"] == "gptq"
    assert engine["gpu_memory_utilization"] == 0.85 and engine["enforce_eager"] is True


def test_trtllm_ensemble_is_wired_consistently() -> None:
    path = SPECS / "llama3-8b-triton-trtllm-h100.yaml"
    found = configs(path)
    assert set(found) == {"ensemble", "preprocessing", "tensorrt_llm", "postprocessing"}
    ensemble = found["ensemble"]
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 128
    ensemble_inputs = {t.name for t in ensemble.input}
    assert {"text_input", "max_tokens", "stream", "temperature", "top_p", "stop_words"} <= ensemble_inputs
    produced = set(ensemble_inputs)
    for step in ensemble.ensemble_scheduling.step:
        model = found[step.model_name]
        model_inputs = {t.name for t in model.input}
        model_outputs = {t.name for t in model.output}
        assert set(step.input_map) <= model_inputs, step.model_name
        assert set(step.input_map.values()) <= produced, step.model_name
        assert set(step.output_map) <= model_outputs, step.model_name
        required = {t.name for t in model.input if not t.optional}
        assert required <= set(step.input_map), step.model_name
        produced |= set(step.output_map.values())
    assert {t.name for t in ensemble.output} <= produced


# What TensorRT-LLM's own preprocessing/1/model.py (triton_backend/all_models/
# inflight_batcher_llm, 1.0 and main) looks up in its config in initialize(): a parameter read
# with model_config['parameters'][...] and the data type of each tensor by name. Missing one,
# the model fails to load (KeyError, or None['data_type']) and the ensemble with it.
PREPROCESSING_READS_PARAMETERS = {"tokenizer_dir", "multimodal_model_path"}
PREPROCESSING_READS_INPUTS = {"EMBEDDING_BIAS_WORDS", "EMBEDDING_BIAS_WEIGHTS"}
PREPROCESSING_READS_OUTPUTS = {
    "INPUT_ID", "DECODER_INPUT_ID", "REQUEST_INPUT_LEN", "REQUEST_DECODER_INPUT_LEN",
    "BAD_WORDS_IDS", "STOP_WORDS_IDS", "OUT_END_ID", "OUT_PAD_ID", "OUT_PROMPT_TABLE_EXTRA_IDS",
    "PIXEL_VALUES", "IMAGE_SIZES",
}  # fmt: skip


def test_trtllm_preprocessing_declares_what_tensorrt_llms_model_py_reads_at_load() -> None:
    pre = configs(SPECS / "llama3-8b-triton-trtllm-h100.yaml")["preprocessing"]
    params = {key: value.string_value for key, value in pre.parameters.items()}
    assert set(params) >= PREPROCESSING_READS_PARAMETERS
    assert params["multimodal_model_path"] == "" and params["visual_model_path"] == ""  # text only
    assert params["gpt_model_path"] == "/models/llama3-8b-triton-trtllm/trtllm-engine"
    assert {t.name for t in pre.input} >= PREPROCESSING_READS_INPUTS
    assert {t.name for t in pre.output} >= PREPROCESSING_READS_OUTPUTS
    assert all(t.optional for t in pre.input if t.name not in ("QUERY", "REQUEST_OUTPUT_LEN"))


def test_trtllm_engine_parameters() -> None:
    engine = configs(SPECS / "llama3-8b-triton-trtllm-h100.yaml")["tensorrt_llm"]
    assert engine.backend == "tensorrtllm" and engine.model_transaction_policy.decoupled
    params = {key: value.string_value for key, value in engine.parameters.items()}
    assert params["gpt_model_type"] == "inflight_fused_batching"
    assert params["gpt_model_path"] == "/models/llama3-8b-triton-trtllm/trtllm-engine"
    assert params["enable_kv_cache_reuse"] == "true"
    assert params["max_tokens_in_paged_kv_cache"] == str(128 * 8192)
    assert params["cuda_graph_mode"] == "true" and params["cuda_graph_cache_size"] == "8"
    assert 0 < float(params["kv_cache_free_gpu_mem_fraction"]) < 1
    assert engine.dynamic_batching.max_queue_delay_microseconds == 100
    scalars = {t.name for t in engine.input if t.HasField("reshape")}
    assert {"input_lengths", "request_output_len", "temperature", "streaming"} <= scalars
    ragged = {t.name for t in engine.input if t.allow_ragged_batch}
    assert ragged == {"input_ids", "stop_words_list", "bad_words_list"}


def test_trtllm_run_script_fetches_tensorrt_llms_python_models() -> None:
    files = render(load_spec(SPECS / "llama3-8b-triton-trtllm-h100.yaml"), "triton")
    run = str(files["triton/run.sh"])
    assert "all_models/inflight_batcher_llm/$step/1/model.py" in run
    assert "exec tritonserver --model-repository" in run


def test_trtllm_with_two_ranks_runs_mpirun_in_the_foreground(tmp_path: Path) -> None:
    """TensorRT-LLM's launch_triton_server.py starts mpirun with Popen and returns: as a
    container's main process it ended the container at once. run.sh now execs mpirun itself;
    a stand-in mpirun on PATH shows what it would get."""
    spec_text = (SPECS / "llama3-8b-triton-trtllm-h100.yaml").read_text()
    spec_path = tmp_path / "tp2.yaml"
    spec_path.write_text(spec_text.replace("dtype: bf16", "dtype: bf16\ntensor_parallel: 2"))
    out = tmp_path / "out"
    for name, content in render(load_spec(spec_path), "triton").items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(str(content))
    src = tmp_path / "trtllm_backend"
    for step in ("preprocessing", "postprocessing"):
        (src / "all_models" / "inflight_batcher_llm" / step / "1").mkdir(parents=True)
        (src / "all_models" / "inflight_batcher_llm" / step / "1" / "model.py").write_text("# theirs\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (bin_dir / "mpirun").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TRTLLM_BACKEND_SRC": str(src)}
    ran = subprocess.run(["sh", str(out / "triton" / "run.sh"), "--log-verbose=1"], env=env,
                         capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    args = ran.stdout.splitlines()
    ranks = " ".join(args).split(" : ")
    assert args[0] == "--allow-run-as-root" and len(ranks) == 2
    repo = f"--model-repository={out / 'triton' / 'model_repository'}"
    assert ranks[0].split().count("tritonserver") == 1 and "--model-repository" in ranks[0]
    assert str(out / "triton" / "model_repository") in ranks[0] and repo.split("=")[1] in ranks[1]
    assert ranks[0].endswith("--log-verbose=1")  # run.sh's own arguments go to rank 0
    assert "--load-model=tensorrt_llm" in ranks[1] and "--load-model" not in ranks[0]
    assert "shm-region-prefix-name=prefix0_" in ranks[0] and "prefix1_" in ranks[1]
    assert (out / "triton/model_repository/preprocessing/1/model.py").read_text() == "# theirs\n"


def test_every_config_round_trips_through_the_protobuf() -> None:
    for path in (TINY, *SPECS.glob("llama3-8b-triton-*.yaml")):
        for name, content in render(load_spec(path), "triton").items():
            if name.endswith("config.pbtxt"):
                message = parse_text(str(content))
                assert str(content).endswith(
                    config_text(json_format.MessageToDict(message, preserving_proto_field_name=True))
                )
