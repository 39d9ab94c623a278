"""Which tp / attention_dp / ep / pp layouts an engine accepts for a model, checked before set-up.

The rules, as the engines apply them:
- Attention heads are split whole across TP ranks. vLLM 0.32 raises in
  `ModelConfig.verify_with_parallel_config` (config/model.py) when num_attention_heads % tp != 0;
  SGLang's and TensorRT-LLM's QKV linear layers divide the head count by tp the same way
  (SGLang 0.5.9 `QKVParallelLinear` asserts it through `divide`).
- KV heads are split too, or replicated in whole copies once tp exceeds them: the QKV layer of
  vLLM and SGLang keeps one KV head per rank and `divide(tp, num_kv_heads)` replicas, otherwise
  `divide(num_kv_heads, tp)` heads per rank. So tp must divide the KV heads or be a multiple of
  them. Memory per GPU then counts the replicated head (`Deployment.kv_heads_per_gpu`).
  MLA models cache one latent shared by all heads, which is not split.
- One worker's GPUs (tp × attention_dp × pp) sit in one node unless the role declares a larger
  `gpus_per_node`; null means the GPU's NVLink domain from the catalogue.
- Expert parallelism spreads experts over the worker's own GPUs, so ep divides tp × attention_dp.
"""

from __future__ import annotations

from servesim.errors import ServesimError
from servesim.hardware.gpus import GpuSpec
from servesim.models.architecture import Architecture


def gpus_per_node(gpus_per_node: int | None, gpu: GpuSpec) -> int:
    """The role's node size: as given, or the GPU's NVLink domain."""
    return gpu.nvlink_domain if gpus_per_node is None else gpus_per_node


def check_parallelism(where: str, arch: Architecture, gpu: GpuSpec, *, tp: int, attention_dp: int, ep: int,
                      pp: int, node_gpus: int) -> None:
    """Raise one sentence naming `where` (e.g. engine.workers.aggregated) when the layout is impossible."""
    if arch.heads % tp:
        fits = [str(d) for d in range(1, min(arch.heads, node_gpus) + 1) if arch.heads % d == 0]
        raise ServesimError(
            f"{where}.tp: {arch.name} has {arch.heads} attention heads, which tp {tp} does not divide "
            f"(the engines split attention heads whole across TP ranks, and vLLM refuses this); "
            f"use tp {', '.join(fits)}"
        )
    kv = arch.kv_heads
    if not arch.mla and kv and (kv % tp if tp <= kv else tp % kv):
        raise ServesimError(
            f"{where}.tp: {arch.name} has {kv} KV heads, and tp {tp} neither divides them nor is a "
            f"multiple of them (past {kv} ranks the engines replicate KV heads in whole copies)"
        )
    worker_gpus = tp * attention_dp * pp
    if worker_gpus > node_gpus:
        raise ServesimError(
            f"{where}: one worker spans tp {tp} × attention_dp {attention_dp} × pp {pp} = {worker_gpus} GPUs, "
            f"more than the {node_gpus} of one node ({where}.gpus_per_node; null is the {gpu.name} NVLink "
            f"domain, {gpu.nvlink_domain}); lower tp or attention_dp, or set gpus_per_node: {worker_gpus} to "
            "let a worker span nodes"
        )
    if (tp * attention_dp) % ep:
        raise ServesimError(
            f"{where}.ep: ep {ep} must divide tp × attention_dp = {tp * attention_dp} "
            "(expert parallelism spreads experts over the worker's own GPUs)"
        )
