"""A spec's ``kv_cache.max_model_len`` caps the sequence where the ONNX Runtime GenAI model runs.

vLLM takes it as ``--max-model-len``; the embedded engine and the rendered Triton python-backend
model ignored it and served the model's own 512-token context (QA: a 102-token prompt with 100
new tokens came back from a spec capped at 64). The embedded variant here is the example spec
with the cap lowered, served in-process by its real adapter on the shipped int4 model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from backends.base import GenerateRequest, SamplingParams
from backends.embedded import EmbeddedBackend
from backends.settings import EmbeddedSettings
from serving.errors import ClientError
from serving.spec_variants import SpecVariant

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "tiny-cpu.yaml"


async def test_the_embedded_engine_serves_the_specs_max_model_len(tmp_path: Path) -> None:
    spec_data = yaml.safe_load(EXAMPLE.read_text())
    spec_data["kv_cache"]["max_model_len"] = 64
    spec_data["model"]["path"] = str((EXAMPLE.parent / spec_data["model"]["path"]).resolve())
    (tmp_path / "capped.yaml").write_text(yaml.safe_dump(spec_data))
    entry = SpecVariant.model_validate({"spec": "capped.yaml"}, context={"base_dir": tmp_path})
    settings = entry.settings
    assert isinstance(settings, EmbeddedSettings) and settings.max_model_len == 64
    backend = EmbeddedBackend("capped", settings)
    await backend.start()
    try:
        assert backend.context_length == 64
        fits = GenerateRequest(
            kind="completion", params=SamplingParams(max_tokens=8, temperature=0), prompt="12+34="
        )
        assert (await backend.complete(fits)).usage.completion_tokens >= 1
        over = GenerateRequest(kind="completion", params=SamplingParams(max_tokens=60), prompt="the red " * 4)
        with pytest.raises(ClientError) as refused:
            await backend.complete(over)
        assert refused.value.code == "context_length_exceeded"
        assert "maximum context length is 64 tokens" in refused.value.message
    finally:
        await backend.close()
