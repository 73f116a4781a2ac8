"""The accelerator catalog: memory, bandwidth, FLOPs, interconnect, price and capabilities per device.

Off the request path: ``deploy.validate`` (does a variant fit and is its configuration supported?)
and ``deploy.plan`` (capacity and roofline math) read it before launch; renderers read the
vendor-specific fields (``k8s_resource``, TPU topologies). The figures live in
``deploy.accelerator_catalog``; this module holds the model, lookups and price overrides.

Units are in the field names: ``memory_gib`` (GiB = 2**30 bytes, the capacity the device runtime
reports, which is what a memory fraction applies to), ``memory_bandwidth_gbps`` and
``interconnect_gbps`` (GB/s = 1e9 bytes/s, per device), ``*_tflops`` / ``int8_tops`` (dense, no
sparsity, 1e12 ops/s per device), ``price_per_hour_usd`` (one device).

Prices are indicative on-demand cloud prices and editable. Order of precedence, highest first:
``turnout plan --prices FILE``, then the file named by ``$TURNOUT_PRICES_FILE``, then the catalog
default. A prices file is YAML mapping catalog names to USD per device-hour::

    h100-80gb: 2.49
    mi300x: 1.99
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from deploy import strict_yaml

Vendor = Literal["nvidia", "amd", "google", "cpu"]
VENDORS: tuple[Vendor, ...] = ("nvidia", "amd", "google", "cpu")
PRICES_ENV = "TURNOUT_PRICES_FILE"

_Positive = Annotated[float, Field(gt=0)]


class Accelerator(BaseModel):
    """One device (one GPU, one GCD, one TPU chip, one CPU socket) and what it can do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # the catalog key used in specs, e.g. "h100-80gb"
    product: str  # human name, e.g. "NVIDIA H100 80GB SXM"
    vendor: Vendor
    architecture: str  # hopper, ada, ampere, cdna3, cdna2, tpu-v5e, tpu-v5p, tpu-v6e, x86
    memory_gib: _Positive
    memory_bandwidth_gbps: _Positive
    bf16_tflops: _Positive  # also the fp16 figure: equal on every device listed here
    fp32_tflops: _Positive | None  # non-tensor fp32; None where the vendor publishes none (TPU)
    fp8_tflops: _Positive | None  # None: no fp8 compute
    int8_tops: _Positive | None
    interconnect: str
    interconnect_gbps: _Positive  # device-to-device, per device, GB/s
    price_per_hour_usd: Annotated[float, Field(ge=0)]
    # Capabilities that validation checks (hardware plus what the engines support on it).
    fp8_compute: bool  # fp8 weights with fp8 GEMMs (quantization: fp8)
    fp8_kv_cache: bool  # kv_cache.dtype: fp8
    cuda_graphs: bool  # CUDA graphs (HIP graphs on ROCm)
    awq_gptq: bool  # AWQ / GPTQ int4 weight-only kernels
    int8_wa: bool  # int8 weight-activation (W8A8 / SmoothQuant) GEMMs
    # Kubernetes device resource (None: a CPU node, no device plugin).
    k8s_resource: str | None
    # GPUs only: devices one node holds (an HGX / OAM board: 8), the most one replica's pod can
    # ask for: Turnout renders single-node engines (no multi-node vLLM or LeaderWorkerSet).
    devices_per_node: int | None = None
    # TPU only: the GKE node-pool accelerator label and chips → topology for single-host slices.
    gke_tpu_accelerator: str | None = None
    tpu_topologies: Mapping[int, str] = Field(default_factory=dict)

    def flops(self, precision: Literal["fp32", "bf16", "fp8", "int8"]) -> float | None:
        """Dense ops/s (not tera) at ``precision``; None where the device has no such figure."""
        tera = {
            "fp32": self.fp32_tflops,
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
            "int8": self.int8_tops,
        }[precision]
        return None if tera is None else tera * 1e12


class UnknownAccelerator(KeyError):
    """A name that is not in the catalog; the message lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0])


def catalog() -> dict[str, Accelerator]:
    """The built-in catalog, keyed by name (a fresh dict: callers may replace entries)."""
    from deploy.accelerator_catalog import ACCELERATORS

    return {accelerator.name: accelerator for accelerator in ACCELERATORS}


def names() -> tuple[str, ...]:
    return tuple(catalog())


def get(name: str, accelerators: Mapping[str, Accelerator] | None = None) -> Accelerator:
    """The accelerator called ``name`` in ``accelerators`` (default: the built-in catalog)."""
    table = catalog() if accelerators is None else accelerators
    try:
        return table[name]
    except KeyError:
        known = ", ".join(table)
        raise UnknownAccelerator(f"unknown accelerator {name!r}; known: {known}") from None


def with_prices(
    accelerators: Mapping[str, Accelerator], prices: Mapping[str, float]
) -> dict[str, Accelerator]:
    """A copy of ``accelerators`` with ``prices`` (name → USD per device-hour) applied."""
    for name in prices:
        get(name, accelerators)
    return {
        name: acc.model_copy(update={"price_per_hour_usd": float(prices[name])}) if name in prices else acc
        for name, acc in accelerators.items()
    }


class PricesError(ValueError):
    """A prices file that cannot be read or is not a mapping of known names to prices."""


def load_prices(path: Path) -> dict[str, float]:
    """Read a prices YAML file (catalog name → USD per device-hour); errors name the file."""
    try:
        data = strict_yaml.load(path.read_text(), str(path))
    except OSError as exc:
        raise PricesError(f"{path}: cannot read prices: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PricesError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise PricesError(f"{path}: expected a mapping of accelerator name to USD per hour")
    known = catalog()
    prices: dict[str, float] = {}
    for name, value in data.items():
        if name not in known:
            raise PricesError(f"{path}: {name}: unknown accelerator; known: {', '.join(known)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            # written out: NaN compares False with everything, so `value < 0` let .nan through
            raise PricesError(f"{path}: {name}: expected a finite price in USD per hour >= 0, got {value!r}")
        prices[str(name)] = float(value)
    return prices


def priced_catalog(prices_file: Path | None = None) -> dict[str, Accelerator]:
    """The catalog with prices from ``prices_file``, else from the file ``$TURNOUT_PRICES_FILE``
    names, else the defaults (``turnout plan`` and ``turnout compare`` alike)."""
    from_env = os.environ.get(PRICES_ENV)
    source = prices_file or (Path(from_env) if from_env else None)
    table = catalog()
    return table if source is None else with_prices(table, load_prices(source))
