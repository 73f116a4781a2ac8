"""Planner arithmetic against published figures, plus self-consistency of the rooflines and cost."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from deploy import accelerators, plan
from deploy.model_facts import named_facts
from deploy.plan import GIB
from deploy.plan_table import as_json, format_table, plan_all
from deploy.spec import VariantSpec, load_spec, parse_spec

LLAMA_8B = named_facts("llama-3-8b")
LLAMA_70B = named_facts("llama-3-70b")
H100 = accelerators.get("h100-80gb")


def spec(**changes: Any) -> VariantSpec:
    base: dict[str, Any] = {
        "name": "llama",
        "model": {"architecture": "llama-3-8b"},
        "engine": "vllm",
        "vendor": "nvidia",
        "accelerator": "h100-80gb",
        "kv_cache": {"max_model_len": 8192},
    }
    return parse_spec({**base, **changes})


# --- published figures -------------------------------------------------------------------------


def test_llama3_70b_fp16_weights_are_about_140_gb() -> None:
    assert plan.weight_bytes(LLAMA_70B, "fp16", "none") / 1e9 == pytest.approx(141.1, abs=0.1)


def test_llama3_8b_fp16_weights_are_about_16_gb() -> None:
    assert plan.weight_bytes(LLAMA_8B, "fp16", "none") / 1e9 == pytest.approx(16.06, abs=0.01)


def test_llama3_8b_kv_cache_is_128_kib_per_token_in_fp16() -> None:
    # 32 layers × 8 KV heads × 128 head_dim × 2 (K, V) × 2 bytes
    assert plan.kv_bytes_per_token(LLAMA_8B, 2) == 128 * 1024 == 32 * 8 * 128 * 2 * 2


def test_llama3_70b_kv_cache_is_320_kib_per_token_in_fp16() -> None:
    assert plan.kv_bytes_per_token(LLAMA_70B, 2) == 320 * 1024


def test_quantized_weights() -> None:
    fp16 = plan.weight_bytes(LLAMA_8B, "fp16", "none")
    embeddings = LLAMA_8B.embedding_params * 2
    fp8 = plan.weight_bytes(LLAMA_8B, "bf16", "fp8")
    assert fp8 == pytest.approx(embeddings + (fp16 - embeddings) / 2)  # embeddings stay 16-bit
    awq = plan.weight_bytes(LLAMA_8B, "fp16", "awq-int4")
    assert awq / 1e9 == pytest.approx(5.73, abs=0.05)  # published AWQ Llama-3-8B checkpoints: ~5.7 GB
    assert plan.weight_bytes(LLAMA_8B, "fp32", "none") == 2 * fp16


# --- self-consistency ---------------------------------------------------------------------------


def test_tensor_parallel_halves_weights_and_kv_per_device() -> None:
    one = plan.memory_budget(spec(), LLAMA_8B, H100)
    two = plan.memory_budget(spec(tensor_parallel=2, device_count=2), LLAMA_8B, H100)
    assert two.weights == pytest.approx(one.weights / 2)
    assert two.kv_per_token == one.kv_per_token // 2


def test_pipeline_parallel_splits_layers() -> None:
    staged = plan.memory_budget(spec(pipeline_parallel=4, device_count=4), LLAMA_8B, H100)
    assert staged.kv_per_token == plan.kv_bytes_per_token(LLAMA_8B, 2) // 4


def test_replicated_kv_heads_are_counted_per_device() -> None:
    # TP 16 over 8 KV heads: each device still holds one whole KV head.
    assert plan.kv_bytes_per_token_per_device(LLAMA_8B, 2, tp=16, pp=1) == 2 * 32 * 1 * 128 * 2


def test_fp8_kv_halves_kv_bytes_and_doubles_tokens() -> None:
    auto = plan.memory_budget(spec(), LLAMA_8B, H100)
    fp8 = plan.memory_budget(spec(kv_cache={"dtype": "fp8", "max_model_len": 8192}), LLAMA_8B, H100)
    assert fp8.kv_per_token == auto.kv_per_token // 2 == 64 * 1024
    assert fp8.kv_tokens == pytest.approx(2 * auto.kv_tokens, abs=2)


def test_kv_tokens_fill_what_weights_and_overhead_leave() -> None:
    budget = plan.memory_budget(spec(), LLAMA_8B, H100)
    assert budget.available == pytest.approx(0.9 * 79.6 * GIB)
    left = budget.available - budget.weights - budget.overhead
    assert budget.kv_tokens == int(left // (128 * 1024))
    assert budget.fits and budget.needed == budget.weights + 8192 * 128 * 1024 + budget.overhead


def test_overhead_is_stated() -> None:
    # 1 GiB runtime + 8192 tokens × (2 × 14336 + 4 × 4096) × 2 bytes + 256 × 128256 × 4 bytes of logits
    expected = GIB + 8192 * (2 * 14336 + 4 * 4096) * 2 + 256 * 128256 * 4
    assert plan.overhead_bytes(spec(), LLAMA_8B, H100) == pytest.approx(expected)
    graphs = spec(cuda_graphs={"enabled": True})
    assert plan.overhead_bytes(graphs, LLAMA_8B, H100) == pytest.approx(expected + 0.5 * GIB)


def test_max_sequences_round_up_to_blocks() -> None:
    assert plan.max_sequences(kv_tokens=1000, context=100, block_size=16) == 8  # 112 tokens each
    assert plan.max_sequences(kv_tokens=1000, context=96, block_size=16) == 10


def test_decode_roofline() -> None:
    weights, kv, bandwidth = 16e9, 131072, 3.35e12
    single = plan.decode_tokens_per_s(weights, kv, 1000, 1, bandwidth)
    assert single == pytest.approx(bandwidth / (weights + 1000 * kv))
    assert plan.decode_tokens_per_s(weights, kv, 1000, 1, 2 * bandwidth) == pytest.approx(2 * single)
    assert plan.decode_tokens_per_s(weights, kv, 1000, 64, bandwidth) > 30 * single
    assert plan.decode_tokens_per_s(weights, kv, 1000, 0, bandwidth) == 0
    assert plan.decode_tokens_per_s(weights, kv, 1000, 1, bandwidth, stages=2) == pytest.approx(single / 2)


def test_prefill_roofline() -> None:
    flops = plan.prefill_flops(LLAMA_8B, 1000)
    assert flops == 2 * LLAMA_8B.num_params * 1000 + 2 * 32 * 4096 * 1000**2
    assert plan.prefill_tokens_per_s(LLAMA_8B, 1000, flops) == pytest.approx(1000)
    assert plan.compute_precision(spec(quantization="fp8"), H100) == "fp8"
    assert plan.compute_precision(spec(quantization="awq-int4", dtype="fp16"), H100) == "bf16"
    assert plan.compute_precision(spec(dtype="fp32"), H100) == "fp32"


def test_cost_per_million_tokens() -> None:
    # 4 devices × $3/h at 1,000 tokens/s: $12 per 3.6 M tokens.
    assert plan.cost_per_million_tokens(4, 3.0, 1000) == pytest.approx(12 / 3.6)
    assert plan.cost_per_million_tokens(4, 3.0, 0) is None


def test_plan_row_is_consistent() -> None:
    row = plan.plan_row(spec(), LLAMA_8B, H100, 8192)
    assert row.kv_bytes_per_token == 128 * 1024 and row.fits
    assert row.max_seqs == min(256, row.kv_tokens // 8192)
    assert row.decode_tok_s_max_batch > row.decode_tok_s_single > 0
    assert row.usd_per_m_output_tokens == pytest.approx(2.99 / (row.decode_tok_s_max_batch * 3600) * 1e6)
    assert row.prefill_tok_s is not None and row.prefill_tok_s > row.decode_tok_s_max_batch
    assert row.usd_per_m_input_tokens == pytest.approx(2.99 / (row.prefill_tok_s * 3600) * 1e6)
    assert row == plan.plan_row(spec(), LLAMA_8B, H100, 8192)  # pure: same inputs, same row
    h200 = plan.plan_row(spec(), LLAMA_8B, accelerators.get("h200-141gb"), 8192)
    assert h200.decode_tok_s_single / row.decode_tok_s_single == pytest.approx(4800 / 3350)


def test_a_variant_that_does_not_fit_plans_to_zero() -> None:
    row = plan.plan_row(spec(model={"architecture": "llama-3-70b"}), LLAMA_70B, H100, 8192)
    assert not row.fits and row.kv_tokens == 0 and row.max_seqs == 0
    assert row.decode_tok_s_max_batch == 0 and row.usd_per_m_output_tokens is None


# --- the report ---------------------------------------------------------------------------------


def test_plan_all_and_table() -> None:
    chosen = [accelerators.get(n) for n in ("h100-80gb", "a100-80gb", "tpu-v5e")]
    rows = plan_all(spec(kv_cache={"dtype": "fp8", "max_model_len": 8192}), chosen, context=4096)
    assert [r.accelerator for r in rows] == ["h100-80gb", "a100-80gb", "tpu-v5e"]
    assert rows[0].problems == () and rows[0].context == 4096
    assert any(p.startswith("kv_cache.dtype") for p in rows[1].problems)
    text = format_table(spec(), rows)
    assert "h100-80gb *" in text and "KV tokens" in text and "not deployable as written" in text
    assert as_json(spec(), rows)["rows"][0]["accelerator"] == "h100-80gb"  # type: ignore[index]


def test_chart_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from deploy.plan_chart import write_chart

    rows = plan_all(spec(), [H100, accelerators.get("l40s")])
    out = write_chart(rows, tmp_path / "plan.png", "llama")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_embedding_variants_chart_and_table_price_input_tokens(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from deploy.plan_chart import write_chart

    embedding = spec(task="embed")
    rows = plan_all(embedding, [H100, accelerators.get("l40s")])
    text = format_table(embedding, rows)
    assert "$/M in" in text and "read prefill\n(input tokens/s), $/h and $/M in" in text
    price = rows[0].usd_per_m_input_tokens
    assert price is not None and f"{price:,.3f}" in text.splitlines()[3].split()
    out = write_chart(rows, tmp_path / "plan.png", "embed", "embed")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chart_without_matplotlib_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from deploy.plan_chart import ChartUnavailable, write_chart

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ChartUnavailable, match=r"pip install 'turnout\[report\]'"):
        write_chart([], tmp_path / "x.png", "t")


def _cpu_llama(fraction: float) -> VariantSpec:
    return spec(
        model={"architecture": "llama-3.1-8b"},
        vendor="cpu",
        accelerator="cpu-x86",
        kv_cache={"max_model_len": 15000, "memory_fraction": fraction},
        batching={"max_num_seqs": 1},
    )


def test_vllm_on_cpu_is_checked_against_the_whole_gib_of_kv_cache_it_is_given() -> None:
    from deploy.render.vllm import environment
    from deploy.validate import problems

    cpu = accelerators.get("cpu-x86")
    short = _cpu_llama(0.06971)  # 1.95 GiB left for KV; one 15000-token sequence needs 1.83 GiB
    budget = plan.memory_budget(short, short.facts(), cpu)
    left = budget.available - budget.weights - budget.overhead
    assert budget.needed <= budget.available and 1.83 * GIB < left < 2 * GIB
    assert environment(short)["VLLM_CPU_KVCACHE_SPACE"] == "1"  # what the render writes
    (memory,) = problems(short)
    assert budget.kv_capacity == 1 * GIB and not budget.fits
    assert memory.startswith("memory: vLLM on CPU is given VLLM_CPU_KVCACHE_SPACE=1 GiB"), memory
    assert "15000-token sequence" in memory
    row = plan.plan_row(short, short.facts(), cpu, 15000)
    assert not row.fits and row.kv_tokens == GIB // budget.kv_per_token and row.max_seqs == 0
    roomy = _cpu_llama(0.075)  # 2 whole GiB: one sequence fits
    assert environment(roomy)["VLLM_CPU_KVCACHE_SPACE"] == "2" and problems(roomy) == []
    assert plan.plan_row(roomy, roomy.facts(), cpu, 15000).max_seqs == 1


def test_a_price_below_a_cent_keeps_two_significant_digits() -> None:
    """A tiny model on an H100 costs fractions of a cent per million tokens: not 0.000."""
    tiny = load_spec(Path(__file__).parents[2] / "deploy" / "examples" / "tiny-cpu.yaml")
    rows = plan_all(tiny, [accelerators.get("h100-80gb"), accelerators.get("cpu-x86")])
    price = rows[0].usd_per_m_output_tokens
    assert price is not None and 0 < price < 0.001
    last_cells = [line.split()[-1] for line in format_table(tiny, rows).splitlines()[3:5]]
    assert last_cells == [f"{price:.2g}", f"{rows[1].usd_per_m_output_tokens:.2g}"]
    assert "0.000" not in last_cells
