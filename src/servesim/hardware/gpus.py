"""Built-in GPUs: compute, memory and interconnect figures, each with its public source.

TFLOPS are dense tensor-core peaks (no sparsity). Bandwidths are in bytes: HBM in
TB/s, NVLink per GPU in GB/s (NVIDIA's bidirectional total; one direction is
half), scale-out network per GPU in GB/s (the NIC usually fitted per GPU: used
for KV-cache transfers between servers). `memory_gib` is the device memory PyTorch
reports (seen in public logs), which vLLM reads for its serving defaults and memory budget.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from servesim.errors import ServesimError


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    aliases: tuple[str, ...]
    device_name: str
    memory_gb: float          # HBM as marketed (10^9 bytes)
    memory_gib: float         # total memory as torch.cuda reports it
    hbm_tb_s: float           # HBM bandwidth, TB/s
    bf16_tflops: float        # dense
    fp8_tflops: float | None  # dense; None where the GPU has no FP8 tensor cores
    fp4_tflops: float | None  # dense; None where the GPU has no FP4 tensor cores
    nvlink_gb_s: float        # per GPU, both directions together
    nvlink_domain: int        # GPUs one NVLink domain connects
    network_gb_s: float       # scale-out NIC per GPU, GB/s
    gpus_per_host: int = 8    # GPUs one server (one Kubernetes node) holds: HGX 8, an NVL72 compute tray 4
    # Power (W) for energy estimates (metrics/cost.py): the datasheet's maximum (TDP), which a busy
    # GPU is taken to draw, and the draw of an idle one with its model loaded (see IDLE_SHARE).
    max_power_w: float = 700.0
    idle_power_w: float = 80.0

    def tflops(self, dtype: str) -> float:
        """Peak dense tensor TFLOPS for GEMMs in `dtype`.

        Without tensor cores for it, low-precision weights are dequantized and multiplied in
        BF16 (as vLLM's weight-only Marlin kernels do), so the BF16 peak applies.
        """
        if dtype == "fp4" and self.fp4_tflops:
            return self.fp4_tflops
        if dtype == "fp8" and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops


# Power. Maximum: NVIDIA's datasheets' maximum thermal design power (A100 SXM4 400 W; H100 and H200 SXM
# 700 W; HGX B200 1,000 W and HGX B300 1,100 W per GPU; GB200 NVL72 1,200 W and GB300 NVL72 1,400 W per
# GPU). LLM serving draws less than that (memory-bound decode at about 60-85%), so energy from it is an
# upper bound; give measured values under cost.gpu_power_w. Idle: one public vLLM measurement of an
# H200 SXM holding a model, 80.3 W (api.serialalice.pt GPU energy benchmark, 2026); the other GPUs are
# given the same share of their maximum, IDLE_SHARE (an assumption, not a measurement).
IDLE_SHARE = 80 / 700

_GPUS = (
    # A100 SXM4 80GB. NVIDIA A100 datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/
    # nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): BF16 312 TFLOPS dense, HBM2e 80 GB at 2,039 GB/s,
    # NVLink 3 600 GB/s. No FP8/FP4. DGX A100 fits one 200 Gb/s HDR InfiniBand NIC per GPU (25 GB/s).
    GpuSpec("a100-sxm", ("a100", "a100_sxm", "a100-80gb"), "NVIDIA A100-SXM4-80GB", 80, 79.25, 2.039,
            312, None, None, 600, 8, 25, max_power_w=400, idle_power_w=46),
    # H100 SXM5 80GB. NVIDIA H100 datasheet: BF16 1,979 / FP8 3,958 TFLOPS with sparsity, i.e. 989 / 1,979
    # dense; HBM3 80 GB at 3.35 TB/s; NVLink 4 900 GB/s. DGX H100: one ConnectX-7 400 Gb/s per GPU (50 GB/s).
    GpuSpec("h100-sxm", ("h100", "h100_sxm"), "NVIDIA H100 80GB HBM3", 80, 79.2, 3.35,
            989, 1979, None, 900, 8, 50, max_power_w=700, idle_power_w=80),
    # H200 SXM 141GB. NVIDIA H200 product page: same tensor cores as H100 (989 / 1,979 dense),
    # HBM3e 141 GB at 4.8 TB/s, NVLink 900 GB/s; HGX H200 with ConnectX-7 400 Gb/s per GPU.
    GpuSpec("h200-sxm", ("h200", "h200_sxm"), "NVIDIA H200", 141, 139.8, 4.8,
            989, 1979, None, 900, 8, 50, max_power_w=700, idle_power_w=80),
    # B200 (HGX B200, per GPU). NVIDIA HGX B200 spec: 8 GPUs with 1.44 TB HBM3e (180 GB each) and 62 TB/s
    # (7.7 TB/s each); FP4 18 PF / FP8 9 PF / BF16 4.5 PF per GPU with sparsity, i.e. 9,000 / 4,500 /
    # 2,250 dense; NVLink 5 1.8 TB/s; ConnectX-7 400 Gb/s per GPU.
    GpuSpec("b200", ("b200_sxm", "b200-sxm"), "NVIDIA B200", 180, 178.35, 7.7,
            2250, 4500, 9000, 1800, 8, 50, max_power_w=1000, idle_power_w=114),
    # B300 (HGX B300 / Blackwell Ultra, per GPU). NVIDIA HGX B300 spec: 288 GB HBM3e per GPU, 62 TB/s for
    # 8 GPUs (7.75 TB/s each); dense FP4 13.1-15 PF per GPU depending on the source (aiconfigurator-core's
    # systems/b300_sxm.yaml uses 14 PF, the value kept here), FP8 4.5 PF, BF16 2.25 PF dense; NVLink 5
    # 1.8 TB/s; ConnectX-8 800 Gb/s per GPU (B300 SuperPOD reference architecture, 100 GB/s).
    GpuSpec("b300", ("b300_sxm", "b300-sxm"), "NVIDIA B300 SXM6 AC", 288, 267.7, 7.75,
            2250, 4500, 14000, 1800, 8, 100, max_power_w=1100, idle_power_w=126),
    # GB200 (per Blackwell GPU of a GB200 NVL72). NVIDIA GB200 NVL72 spec: 72 GPUs, 13.4 TB HBM3e (186 GB
    # each) at 576 TB/s (8 TB/s each); FP4 1,440 PF / FP8 720 PF / BF16 360 PF with sparsity for the rack,
    # i.e. per GPU dense FP4 10,000, FP8 5,000, BF16 2,500 TFLOPS; NVLink 5 1.8 TB/s in a 72-GPU domain;
    # ConnectX-7 400 Gb/s per GPU (DGX GB200 user guide; aiconfigurator-core lists 800 Gb/s).
    GpuSpec("gb200", ("gb200-nvl72",), "NVIDIA GB200", 186, 184.3, 8.0,
            2500, 5000, 10000, 1800, 72, 50, gpus_per_host=4,   # 18 compute trays of 4 GPUs
            max_power_w=1200, idle_power_w=137),
    # GB300 (per Blackwell Ultra GPU of a GB300 NVL72). NVIDIA GB300 NVL72 spec: 72 GPUs, 20 TB HBM3e
    # (288 GB each) at 8 TB/s each; dense FP4 1,080 PF for the rack (15,000 per GPU), FP8 5,000, BF16 2,500;
    # NVLink 5 1.8 TB/s, 72-GPU domain; ConnectX-8 800 Gb/s per GPU (100 GB/s).
    GpuSpec("gb300", ("gb300-nvl72",), "NVIDIA GB300", 288, 276.5, 8.0,
            2500, 5000, 15000, 1800, 72, 100, gpus_per_host=4, max_power_w=1400, idle_power_w=160),
)


def _aliases() -> dict[str, GpuSpec]:
    table = {}
    for gpu in _GPUS:
        for alias in (gpu.name, *gpu.aliases):
            table[alias.lower()] = gpu
    return table


def list_gpus() -> list[GpuSpec]:
    return list(_GPUS)


def resolve_gpu(name: str) -> GpuSpec:
    table = _aliases()
    gpu = table.get(name.lower())
    if gpu is not None:
        return gpu
    close = difflib.get_close_matches(name.lower(), list(table), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known GPUs: {', '.join(g.name for g in _GPUS)}"
    raise ServesimError(f"unknown GPU {name!r}{hint}")
