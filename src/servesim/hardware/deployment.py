"""A model placed on GPUs: bytes per GPU, KV cache per token, and how many KV blocks fit.

One worker spans tp × attention_dp GPUs per pipeline stage, pp stages. Attention and dense
weights are sharded tp ways and replicated on each attention-DP rank; routed experts are
spread over the stage's GPUs (ep ranks, each expert sharded over the remaining
tp × attention_dp / ep). Each attention-DP rank keeps its own KV cache. Under pipeline
parallelism each stage holds its share of the layers (vLLM's `get_pp_indices` splits them
evenly; a GPU is sized for the largest share, ceil(layers / pp)), their weights and their KV
cache; the first stage holds the embedding, the last the LM head (both when they are tied).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.errors import ServesimError
from servesim.hardware.gpus import GpuSpec
from servesim.models.architecture import Architecture

GIB = 1024**3
# Bytes per weight element; block-scaled formats carry one 8-bit scale per 16 (NVFP4)
# or 32 (MXFP4, int4 groups) elements.
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32,
                "int4": 0.5 + 1 / 32}
GEMM_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4", "mxfp4": "fp4", "int4": "bf16"}
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}
# Memory vLLM's profiling run sets aside besides weights and KV cache: CUDA graphs,
# NCCL and cuBLAS workspaces, allocator fragmentation (not counting activations).
RUNTIME_RESERVE_GIB = 1.75


@dataclass(frozen=True)
class Deployment:
    arch: Architecture
    gpu: GpuSpec
    precision: str            # weights and GEMMs: bf16 | fp8 | fp4 | int4
    kv_dtype: str             # bf16 | fp8
    tp: int = 1
    attention_dp: int = 1
    ep: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        if (self.tp * self.attention_dp) % self.ep:
            raise ServesimError(
                f"ep {self.ep} must divide tp × attention_dp = {self.tp * self.attention_dp} "
                "(expert parallelism spreads experts over the worker's own GPUs)"
            )

    # ------------------------------------------------------------------ shapes

    @property
    def gpus(self) -> int:
        return self.tp * self.attention_dp

    @property
    def moe_tp(self) -> int:
        return self.gpus // self.ep

    @property
    def expert_precision(self) -> str:
        # A checkpoint shipped with quantized experts (gpt-oss: MXFP4) keeps them unless asked otherwise.
        if self.arch.quantized_experts and self.precision == self.arch.native_dtype:
            return self.arch.quantized_experts
        return self.precision

    @property
    def weight_bytes(self) -> float:
        return WEIGHT_BYTES[self.precision]

    @property
    def expert_weight_bytes(self) -> float:
        return WEIGHT_BYTES[self.expert_precision]

    @property
    def gemm_dtype(self) -> str:
        return GEMM_DTYPE[self.precision]

    @property
    def expert_gemm_dtype(self) -> str:
        return GEMM_DTYPE[self.expert_precision]

    @property
    def kv_bytes(self) -> float:
        return KV_BYTES[self.kv_dtype]

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads each TP rank stores (heads are replicated when tp exceeds them)."""
        return max(1, -(-self.arch.kv_heads // self.tp))

    def kv_elements_per_token_layer_per_gpu(self) -> int:
        if self.arch.mla:
            return self.arch.kv_elements_per_token_layer()   # the latent is not split across heads
        return 2 * self.kv_heads_per_gpu * self.arch.head_dim

    def kv_bytes_per_token_per_gpu(self) -> float:
        return self.stage_share(self.arch.attention_layers) * self.kv_elements_per_token_layer_per_gpu() * self.kv_bytes

    def stage_share(self, layers: int) -> int:
        """Of `layers` layers, those the most loaded pipeline stage holds (all of them at pp 1)."""
        return -(-layers // self.pp)

    # ------------------------------------------------------------------ weights

    def dense_weight_params_per_gpu(self) -> float:
        """Attention, dense MLP and shared-expert weights one GPU holds (tp-sharded)."""
        arch = self.arch
        share = self.stage_share
        attention = (share(arch.attention_layers) * arch.attention_params()
                     + share(arch.linear_layers) * arch.linear_attention_params())
        dense = share(arch.dense_layers) * arch.dense_mlp_params()
        shared = share(arch.moe_layers) * (arch.shared_expert_params() + arch.hidden * arch.experts)
        return (attention + dense + shared) / self.tp

    def expert_params_per_gpu(self) -> float:
        arch = self.arch
        return self.stage_share(arch.moe_layers) * arch.experts * arch.expert_params() / self.gpus

    def embedding_params_per_gpu(self) -> float:
        arch = self.arch
        head = 0 if arch.tied_embeddings else arch.lm_head_params()
        if self.pp > 1:   # the embedding on the first stage, the LM head on the last
            return max(arch.embedding_params(), head or arch.embedding_params()) / self.tp
        return (arch.embedding_params() + head) / self.tp

    def weight_bytes_per_gpu(self) -> float:
        return ((self.dense_weight_params_per_gpu() + self.embedding_params_per_gpu()) * self.weight_bytes
                + self.expert_params_per_gpu() * self.expert_weight_bytes)

    # ------------------------------------------------------------------ KV capacity

    def activation_bytes(self, max_num_batched_tokens: int, max_num_seqs: int) -> float:
        """Peak activations of vLLM's profiling run: one pass of the full token budget."""
        arch = self.arch
        width = max(arch.dense_intermediate, arch.moe_intermediate * max(arch.experts_per_token, 1))
        per_token = (2 * width / self.tp + 4 * arch.hidden) * 2
        logits = max_num_seqs * arch.vocab / self.tp * 4
        return max_num_batched_tokens * per_token + logits

    def num_gpu_blocks(self, block_size: int, utilization: float, max_num_batched_tokens: int,
                       max_num_seqs: int) -> int:
        """KV blocks one attention-DP rank gets, as vLLM's memory profiling would find (null block included)."""
        budget = self.gpu.memory_gib * GIB * utilization
        of = (f"the {gib(budget)} that gpu_memory_utilization {utilization:g} leaves of the "
              f"{gib(self.gpu.memory_gib * GIB)} {self.gpu.name}")
        left = self.vllm_kv_bytes_left(budget, of, max_num_batched_tokens, max_num_seqs)
        per_block = block_size * self.kv_bytes_per_token_per_gpu()
        if left < per_block:
            raise ServesimError(
                f"{self.placement} leaves {gib(left)} per GPU for the KV cache, less than one block of "
                f"{block_size} tokens ({gib(per_block)}); raise tp or gpu_memory_utilization"
            )
        return int(left // per_block)

    # ------------------------------------------------------------------ memory checks

    @property
    def placement(self) -> str:
        return f"{self.arch.name} in {self.precision} on {self.gpu.name} at {self._at}"

    @property
    def _at(self) -> str:
        return f"tp={self.tp}" if self.pp == 1 else f"tp={self.tp}, pp={self.pp}"

    def check_weights_fit(self) -> None:
        """The weights alone must fit in one GPU's memory, whatever the KV cache settings say."""
        weights, memory = self.weight_bytes_per_gpu(), self.gpu.memory_gib * GIB
        if weights >= memory:
            raise ServesimError(
                f"{self.arch.name} in {self.precision} does not fit on {self.gpu.name} at {self._at}: its "
                f"weights alone take {gib(weights)} per GPU, {gib(weights - memory)} more than the {gib(memory)} of "
                f"one {self.gpu.name}; raise tp or use a smaller precision"
            )

    def vllm_kv_bytes_left(self, budget: float, budget_text: str, max_num_batched_tokens: int,
                           max_num_seqs: int) -> float:
        """Bytes per GPU left for the KV cache out of `budget` (described by `budget_text`, for the
        message) after weights, runtime reserve and activations."""
        self.check_weights_fit()
        weights = self.weight_bytes_per_gpu()
        activations = self.activation_bytes(max_num_batched_tokens, max_num_seqs)
        runtime = RUNTIME_RESERVE_GIB * GIB
        left = budget - weights - runtime - activations
        if left > 0:
            return left
        # Name what to change: the batch limits when they alone make the difference, else the placement.
        hint = ("lower max_num_batched_tokens or max_num_seqs" if activations >= -left
                else "raise tp or use a smaller precision")
        raise ServesimError(
            f"{self.placement} does not fit: its weights ({gib(weights)}), the runtime reserve ({gib(runtime)}) "
            f"and activations for max_num_batched_tokens {max_num_batched_tokens:,} and max_num_seqs "
            f"{max_num_seqs:,} ({gib(activations)}) need {gib(budget - left)} per GPU, {gib(-left)} more than "
            f"{budget_text}; {hint}"
        )


def gib(size: float) -> str:
    """Bytes as GiB for messages: one decimal, two below 10 GiB (the 1.75 GiB reserve)."""
    value = size / GIB
    return f"{value:,.1f} GiB" if abs(value) >= 10 else f"{value:.2f} GiB"
