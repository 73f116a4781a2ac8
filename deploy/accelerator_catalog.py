"""The built-in accelerator figures (data only; the model and lookups are in ``deploy.accelerators``).

Sources: each entry names the vendor document its figures come from (the product datasheet or
the cloud provider's product page). Dense figures are used throughout: datasheets print the
2:4-sparsity figure first for NVIDIA, half of which is the dense one. ``memory_gib`` is what the
device runtime reports (nvidia-smi / rocm-smi / JAX), slightly under the marketed size.
Capabilities combine the hardware with the engines' published support matrices (vLLM's
"supported hardware for quantization kernels" table, TensorRT-LLM's support matrix).

Prices: indicative on-demand cloud prices per device-hour in USD as of 2026 (list prices of
Google Cloud for TPUs; typical GPU-cloud prices for GPUs; AWS m7i for the CPU server). They
move often: override them with a prices file (see ``deploy.accelerators``).
"""

from __future__ import annotations

from typing import Any

from deploy.accelerators import Accelerator, Vendor


def _gpu(vendor: Vendor, resource: str, **fields: Any) -> Accelerator:
    # Every GPU listed comes 8 to a node: HGX H100/H200/A100 boards, 8-way L40S servers, MI300X
    # OAM platforms, and 4 MI250(X) modules of 2 GCDs each.
    return Accelerator(
        vendor=vendor, k8s_resource=resource, cuda_graphs=True, awq_gptq=True, devices_per_node=8, **fields
    )


def _nvidia(**fields: Any) -> Accelerator:
    return _gpu("nvidia", "nvidia.com/gpu", **fields)


def _amd(**fields: Any) -> Accelerator:
    return _gpu("amd", "amd.com/gpu", **fields)


def _tpu(**fields: Any) -> Accelerator:
    # No TPU publishes fp32 or fp8 figures; vLLM on TPU has no fp8 KV cache and no AWQ/GPTQ
    # kernels, and XLA compiles whole graphs (no CUDA graphs). int8 W8A8 runs on the MXUs.
    return Accelerator(
        vendor="google",
        k8s_resource="google.com/tpu",
        fp32_tflops=None,
        fp8_tflops=None,
        fp8_compute=False,
        fp8_kv_cache=False,
        cuda_graphs=False,
        awq_gptq=False,
        int8_wa=True,
        **fields,
    )


_SINGLE_HOST = {1: "1x1", 4: "2x2", 8: "2x4"}

ACCELERATORS: tuple[Accelerator, ...] = (
    # NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), SXM5 column:
    # 80 GB HBM3 (nvidia-smi: 81559 MiB), 3.35 TB/s, BF16 1,979 / FP8 3,958 / INT8 3,958 sparse,
    # FP32 67 TFLOPs; NVLink 4 900 GB/s.
    _nvidia(
        name="h100-80gb",
        product="NVIDIA H100 80GB SXM",
        architecture="hopper",
        memory_gib=79.6,
        memory_bandwidth_gbps=3350,
        bf16_tflops=989.4,
        fp32_tflops=66.9,
        fp8_tflops=1978.9,
        int8_tops=1978.9,
        interconnect="NVLink 4",
        interconnect_gbps=900,
        price_per_hour_usd=2.99,
        fp8_compute=True,
        fp8_kv_cache=True,
        int8_wa=True,
    ),
    # NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), SXM column:
    # 141 GB HBM3e (nvidia-smi: 143771 MiB), 4.8 TB/s, same compute as H100 SXM; NVLink 900 GB/s.
    _nvidia(
        name="h200-141gb",
        product="NVIDIA H200 141GB SXM",
        architecture="hopper",
        memory_gib=140.4,
        memory_bandwidth_gbps=4800,
        bf16_tflops=989.4,
        fp32_tflops=66.9,
        fp8_tflops=1978.9,
        int8_tops=1978.9,
        interconnect="NVLink 4",
        interconnect_gbps=900,
        price_per_hour_usd=3.79,
        fp8_compute=True,
        fp8_kv_cache=True,
        int8_wa=True,
    ),
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), 80GB SXM column:
    # 80 GB HBM2e (81920 MiB), 2,039 GB/s, BF16 312, INT8 624 TOPs, FP32 19.5; no FP8;
    # NVLink 3 600 GB/s.
    _nvidia(
        name="a100-80gb",
        product="NVIDIA A100 80GB SXM",
        architecture="ampere",
        memory_gib=80.0,
        memory_bandwidth_gbps=2039,
        bf16_tflops=312,
        fp32_tflops=19.5,
        fp8_tflops=None,
        int8_tops=624,
        interconnect="NVLink 3",
        interconnect_gbps=600,
        price_per_hour_usd=1.79,
        fp8_compute=False,
        fp8_kv_cache=False,
        int8_wa=True,
    ),
    # NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): 48 GB GDDR6 with ECC
    # (nvidia-smi: 46068 MiB), 864 GB/s, BF16 362.05 / FP8 733 / INT8 733 dense, FP32 91.6;
    # no NVLink: PCIe Gen4 x16, 64 GB/s bidirectional.
    _nvidia(
        name="l40s",
        product="NVIDIA L40S 48GB",
        architecture="ada",
        memory_gib=45.0,
        memory_bandwidth_gbps=864,
        bf16_tflops=362.05,
        fp32_tflops=91.6,
        fp8_tflops=733,
        int8_tops=733,
        interconnect="PCIe Gen4 x16",
        interconnect_gbps=64,
        price_per_hour_usd=1.25,
        fp8_compute=True,
        fp8_kv_cache=True,
        int8_wa=True,
    ),
    # AMD Instinct MI300X accelerator data sheet (amd.com/en/products/accelerators/instinct/mi300):
    # 192 GB HBM3 (rocm-smi: 205822885888 B), 5.3 TB/s, FP16/BF16 1,307.4, FP8 2,614.9,
    # INT8 2,614.9 TOPs, FP32 163.4; Infinity Fabric 7 links x 128 GB/s = 896 GB/s.
    _amd(
        name="mi300x",
        product="AMD Instinct MI300X 192GB",
        architecture="cdna3",
        memory_gib=191.7,
        memory_bandwidth_gbps=5300,
        bf16_tflops=1307.4,
        fp32_tflops=163.4,
        fp8_tflops=2614.9,
        int8_tops=2614.9,
        interconnect="Infinity Fabric",
        interconnect_gbps=896,
        price_per_hour_usd=2.49,
        fp8_compute=True,
        fp8_kv_cache=True,
        int8_wa=True,
    ),
    # AMD Instinct MI250X data sheet (amd.com/en/products/accelerators/instinct/mi200): 128 GB HBM2e,
    # 3.2768 TB/s, FP16/BF16 383, INT8 383 TOPs, FP32 vector 47.9, for the whole OAM module.
    # ROCm exposes each of its two GCDs as its own device: this entry is ONE GCD (half of each
    # figure), so device_count and amd.com/gpu count GCDs. Infinity Fabric ~400 GB/s per GCD.
    _amd(
        name="mi250x",
        product="AMD Instinct MI250X (one GCD, 64GB)",
        architecture="cdna2",
        memory_gib=64.0,
        memory_bandwidth_gbps=1638.4,
        bf16_tflops=191.5,
        fp32_tflops=23.95,
        fp8_tflops=None,
        int8_tops=191.5,
        interconnect="Infinity Fabric",
        interconnect_gbps=400,
        price_per_hour_usd=0.80,
        fp8_compute=False,
        fp8_kv_cache=False,
        int8_wa=True,
    ),
    # AMD Instinct MI250 data sheet: as MI250X with 208 CUs: FP16/BF16 362.1, INT8 362.1 TOPs,
    # FP32 vector 45.3 per module; one GCD per entry, as above.
    _amd(
        name="mi250",
        product="AMD Instinct MI250 (one GCD, 64GB)",
        architecture="cdna2",
        memory_gib=64.0,
        memory_bandwidth_gbps=1638.4,
        bf16_tflops=181.05,
        fp32_tflops=22.65,
        fp8_tflops=None,
        int8_tops=181.05,
        interconnect="Infinity Fabric",
        interconnect_gbps=400,
        price_per_hour_usd=0.70,
        fp8_compute=False,
        fp8_kv_cache=False,
        int8_wa=True,
    ),
    # Google Cloud TPU v5e system architecture page (cloud.google.com/tpu/docs/v5e): per chip
    # 16 GiB HBM2, 819 GB/s, BF16 197 TFLOPs, INT8 394 TOPs, ICI 1,600 Gbps
    # (= 200 GB/s); $1.20/chip-hour.
    _tpu(
        name="tpu-v5e",
        product="Google Cloud TPU v5e",
        architecture="tpu-v5e",
        memory_gib=16.0,
        memory_bandwidth_gbps=819,
        bf16_tflops=197,
        int8_tops=394,
        interconnect="ICI",
        interconnect_gbps=200,
        price_per_hour_usd=1.20,
        gke_tpu_accelerator="tpu-v5-lite-podslice",
        tpu_topologies=_SINGLE_HOST,
    ),
    # Google Cloud TPU v5p system architecture page (cloud.google.com/tpu/docs/v5p): per chip
    # 95 GiB HBM2e, 2,765 GB/s, BF16 459 TFLOPs, INT8 918 TOPs, ICI 4,800 Gbps
    # (= 600 GB/s); $4.20/chip-hour.
    # One host holds 4 chips (topology 2x2x1).
    _tpu(
        name="tpu-v5p",
        product="Google Cloud TPU v5p",
        architecture="tpu-v5p",
        memory_gib=95.0,
        memory_bandwidth_gbps=2765,
        bf16_tflops=459,
        int8_tops=918,
        interconnect="ICI",
        interconnect_gbps=600,
        price_per_hour_usd=4.20,
        gke_tpu_accelerator="tpu-v5p-slice",
        tpu_topologies={4: "2x2x1"},
    ),
    # Google Cloud TPU v6e (Trillium) page (cloud.google.com/tpu/docs/v6e): per chip 32 GiB HBM,
    # 1,640 GB/s, BF16 918 TFLOPs, INT8 1,836 TOPs, ICI 3,584 Gbps
    # (= 448 GB/s); $2.70/chip-hour.
    _tpu(
        name="tpu-v6e",
        product="Google Cloud TPU v6e (Trillium)",
        architecture="tpu-v6e",
        memory_gib=32.0,
        memory_bandwidth_gbps=1640,
        bf16_tflops=918,
        int8_tops=1836,
        interconnect="ICI",
        interconnect_gbps=448,
        price_per_hour_usd=2.70,
        gke_tpu_accelerator="tpu-v6e-slice",
        tpu_topologies=_SINGLE_HOST,
    ),
    # A generic x86-64 server socket: 32 cores with AVX-512 (Intel Xeon 4th gen / AMD EPYC 9004
    # class), 256 GiB DDR5-4800 on 8 channels = 307.2 GB/s (the DDR5 spec rate). Compute from
    # cores x all-core clock x SIMD width: 32 x 2.0 GHz x 64 fp32 FLOP/cycle = 4.1 TFLOPs, x2 with
    # AVX512-BF16, x4 int8 with VNNI (AMX, when present, is much faster; not assumed).
    # Price: AWS m7i.16xlarge (64 vCPU, 256 GiB) on-demand list price.
    Accelerator(
        name="cpu-x86",
        product="x86-64 server socket (32 cores, AVX-512, 8ch DDR5)",
        vendor="cpu",
        architecture="x86",
        memory_gib=256.0,
        memory_bandwidth_gbps=307.2,
        bf16_tflops=8.2,
        fp32_tflops=4.1,
        fp8_tflops=None,
        int8_tops=16.4,
        interconnect="Ethernet 25 Gb/s",
        interconnect_gbps=3.125,
        price_per_hour_usd=3.23,
        fp8_compute=False,
        fp8_kv_cache=False,
        cuda_graphs=False,
        awq_gptq=True,
        int8_wa=True,
        k8s_resource=None,
    ),
)
