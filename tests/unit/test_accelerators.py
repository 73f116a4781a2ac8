"""The accelerator catalog: required entries, sane units, capabilities, lookups and price overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from deploy import accelerators
from deploy.accelerators import PricesError, UnknownAccelerator

REQUIRED = (
    "h100-80gb", "h200-141gb", "a100-80gb", "l40s", "mi300x", "mi250x",
    "tpu-v5e", "tpu-v5p", "tpu-v6e", "cpu-x86",
)  # fmt: skip


def test_catalog_has_the_required_devices_with_vendors() -> None:
    catalog = accelerators.catalog()
    assert set(REQUIRED) <= set(catalog)
    vendors = {name: catalog[name].vendor for name in REQUIRED}
    assert vendors["h100-80gb"] == vendors["l40s"] == "nvidia"
    assert vendors["mi300x"] == vendors["mi250x"] == "amd"
    assert vendors["tpu-v5e"] == vendors["tpu-v6e"] == "google"
    assert vendors["cpu-x86"] == "cpu"
    assert all(name == acc.name for name, acc in catalog.items())


@pytest.mark.parametrize(
    ("name", "memory_gib", "bandwidth_gbps", "bf16_tflops"),
    [
        ("h100-80gb", 80, 3350, 989),  # datasheet: 80 GB HBM3, 3.35 TB/s, 1,979 sparse BF16
        ("h200-141gb", 141, 4800, 989),
        ("a100-80gb", 80, 2039, 312),
        ("l40s", 48, 864, 362),
        ("mi300x", 192, 5300, 1307),
        ("tpu-v5e", 16, 819, 197),
        ("tpu-v5p", 95, 2765, 459),
        ("tpu-v6e", 32, 1640, 918),
    ],
)
def test_published_figures(name: str, memory_gib: float, bandwidth_gbps: float, bf16_tflops: float) -> None:
    acc = accelerators.get(name)
    assert memory_gib * 0.93 <= acc.memory_gib <= memory_gib  # runtimes report slightly less
    assert acc.memory_bandwidth_gbps == pytest.approx(bandwidth_gbps, rel=0.01)
    assert acc.bf16_tflops == pytest.approx(bf16_tflops, rel=0.01)


def test_fp8_figures_only_where_the_hardware_has_fp8() -> None:
    catalog = accelerators.catalog()
    for acc in catalog.values():
        assert (acc.fp8_tflops is not None) == acc.fp8_compute, acc.name
        if acc.fp8_tflops is not None:
            assert acc.fp8_tflops == pytest.approx(2 * acc.bf16_tflops, rel=0.02), acc.name
    assert {n for n, a in catalog.items() if a.fp8_kv_cache} == {"h100-80gb", "h200-141gb", "l40s", "mi300x"}


def test_capabilities_by_family() -> None:
    catalog = accelerators.catalog()
    for acc in catalog.values():
        gpu = acc.vendor in ("nvidia", "amd")
        assert acc.cuda_graphs == gpu, acc.name
        assert acc.awq_gptq == (acc.vendor != "google"), acc.name
        assert acc.k8s_resource == {
            "nvidia": "nvidia.com/gpu",
            "amd": "amd.com/gpu",
            "google": "google.com/tpu",
        }.get(acc.vendor)
        assert bool(acc.tpu_topologies) == (acc.vendor == "google") == bool(acc.gke_tpu_accelerator)
    assert catalog["tpu-v5e"].tpu_topologies[4] == "2x2"


def test_flops_by_precision() -> None:
    h100 = accelerators.get("h100-80gb")
    assert h100.flops("bf16") == pytest.approx(989.4e12)
    assert h100.flops("fp8") == pytest.approx(1978.9e12)
    assert accelerators.get("a100-80gb").flops("fp8") is None
    assert accelerators.get("tpu-v5e").flops("fp32") is None


def test_entries_are_frozen_and_strict() -> None:
    h100 = accelerators.get("h100-80gb")
    with pytest.raises(ValidationError):
        h100.price_per_hour_usd = 1.0  # type: ignore[misc]
    with pytest.raises(ValidationError):
        accelerators.Accelerator.model_validate({**h100.model_dump(), "tensor_cores": 528})


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownAccelerator) as caught:
        accelerators.get("h100")
    assert "unknown accelerator 'h100'" in str(caught.value)
    assert "h100-80gb" in str(caught.value)


def test_prices_override_from_a_file(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100-80gb: 1.5\nmi300x: 2\n")
    table = accelerators.with_prices(accelerators.catalog(), accelerators.load_prices(prices))
    assert table["h100-80gb"].price_per_hour_usd == 1.5
    assert table["mi300x"].price_per_hour_usd == 2.0
    assert table["l40s"] == accelerators.get("l40s")
    assert accelerators.get("h100-80gb").price_per_hour_usd != 1.5  # the built-in catalog is untouched


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("h100: 1.0\n", "h100: unknown accelerator"),
        ("h100-80gb: cheap\n", "h100-80gb: expected a finite price"),
        ("h100-80gb: -1\n", "h100-80gb: expected a finite price"),
        ("h100-80gb: .nan\n", "h100-80gb: expected a finite price in USD per hour >= 0, got nan"),
        ("h100-80gb: .inf\n", "h100-80gb: expected a finite price in USD per hour >= 0, got inf"),
        ("- h100-80gb\n", "expected a mapping"),
        ("h100-80gb: [1\n", "not valid YAML"),
    ],
)
def test_bad_prices_file_names_file_and_entry(tmp_path: Path, text: str, reason: str) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(text)
    with pytest.raises(PricesError) as caught:
        accelerators.load_prices(prices)
    assert str(prices) in str(caught.value)
    assert reason in str(caught.value)


def test_cli_reads_the_same_prices_variable() -> None:
    from deploy import cli

    assert cli.PRICES_ENV == accelerators.PRICES_ENV
