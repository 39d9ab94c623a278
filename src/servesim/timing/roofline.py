"""Roofline step times: each part of a pass takes max(compute, memory) at an achieved efficiency.

Per pass, on the critical GPU of a worker (tp × attention_dp GPUs, work balanced):

- dense GEMMs (attention projections, dense MLPs, shared experts, router): 2 FLOPs per
  weight per token against the weights read once;
- routed experts: FLOPs of the tokens' k experts against the weights of the experts
  actually touched (the expected number of distinct experts T tokens pick);
- attention: each prefill chunk's FLOPs over its prefix (causal, so the chunk attends to
  half of itself on average) against the prefix's KV bytes; decoding requests read their
  whole KV cache (sliding-window layers at most the window; MLA its latent);
- LM head for every scheduled request; TP all-reduces (two per layer; with TP attention
  the second is also the MoE combine of expert parallelism) and, with attention-DP, EP
  all-to-all (dispatch and combine per MoE layer), each with a fixed latency. A
  collective whose ranks fit in one NVLink domain runs over NVLink. A wider all-reduce is hierarchical:
  NVLink inside each domain, then each GPU's 1/g share across domains over its own NIC.
  A wider all-to-all sends the share of its peers outside the domain over the NIC and the
  rest over NVLink, at the same time;
- a fixed overhead per pass, per layer (the small kernels a roofline of GEMMs and
  attention leaves out) and per request (input preparation, sampling).

GEMM efficiency grows with the number of rows M (tokens): eff(M) = e_max · M / (M + m_half);
HBM streaming runs at a constant efficiency; the efficiencies and overheads are fitted per
GPU and backend on ../shared/calibration (benchmarks/fit_roofline.py) and stored as data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from functools import cache
from importlib import resources

import numpy as np

from servesim.hardware.deployment import Deployment
from servesim.timing.base import PassShape, TimingModel

TFLOP = 1e12


@dataclass(frozen=True)
class RooflineProfile:
    """Achieved efficiencies and overheads of one GPU and backend."""

    gemm_efficiency: float = 0.70      # large-M GEMM efficiency of the dense tensor peak
    gemm_half_tokens: float = 48.0     # M at which GEMM efficiency is half of the above
    memory_efficiency: float = 0.80    # fraction of HBM bandwidth reached streaming weights and KV
    attention_efficiency: float = 0.45 # prefill attention FLOPs vs the bf16 peak
    comm_efficiency: float = 0.70      # fraction of one-direction NVLink (or NIC) bandwidth
    comm_latency_us: float = 8.0       # per collective
    pass_overhead_ms: float = 1.5      # per pass: scheduling, launches, synchronisation
    per_layer_overhead_us: float = 10.0  # per layer: norms, rotary, activations, small kernels
    per_request_ms: float = 0.010      # per request in the pass: input prep, sampling
    # Routed experts' grouped GEMMs (fused-MoE kernels: per-expert tiles, token permutation,
    # scales) reach this fraction of the dense GEMMs' throughput at the same rows per expert.
    expert_efficiency: float = 1.0
    # Host time of one MoE layer in a pass run outside CUDA graphs (engines that run prefill
    # eagerly: docs/modeling/request_path.md, "Where the rest of TTFT goes"), added to the GPU's.
    eager_moe_layer_us: float = 0.0

    @classmethod
    def from_dict(cls, data: dict) -> RooflineProfile:
        known = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in data.items() if k in known})


@cache
def _fitted_profiles() -> dict:
    path = resources.files("servesim.timing").joinpath("data", "roofline_fit.json")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def fitted_profile(gpu: str, backend: str) -> tuple[RooflineProfile, str]:
    """The fitted profile for (gpu, backend), falling back to the backend's, then the global one."""
    data = _fitted_profiles().get("profiles", {})
    for key in (f"{gpu}/{backend}", f"*/{backend}", "*/*"):
        if key in data:
            return RooflineProfile.from_dict(data[key]), key
    return RooflineProfile(), "built-in defaults"


def named_profile(name: str) -> RooflineProfile:
    """A fitted profile by its key ("h100-sxm/vllm", "*/sglang", "*/*"); GPU aliases are accepted."""
    data = _fitted_profiles().get("profiles", {})
    gpu, _, backend = name.partition("/")
    if gpu != "*":
        from servesim.errors import ServesimError
        from servesim.hardware import resolve_gpu

        try:
            gpu = resolve_gpu(gpu).name
        except ServesimError:
            pass
    key = f"{gpu}/{backend}"
    if key not in data:
        from servesim.errors import ServesimError

        raise ServesimError(f"engine.timing.profile: no fitted profile {name!r}; the fitted ones are "
                            f"{', '.join(sorted(data))}")
    return RooflineProfile.from_dict(data[key])


_FIXED_MEMO_SIZE = 1 << 16   # entries of RooflineTimingModel._fixed_memo before it starts afresh
_SCALAR_STEPS = 32          # runs up to this many passes are priced in scalar arithmetic


class RooflineTimingModel(TimingModel):
    def __init__(self, deployment: Deployment, profile: RooflineProfile, speculative=None,
                 graph_tokens: int | None = None) -> None:
        self.deployment = dep = deployment
        # EAGLE and MTP drafters are small models run k times per pass; n-gram drafting is free.
        self._draft_steps = (speculative.num_speculative_tokens
                             if speculative is not None and speculative.method in ("eagle", "mtp") else 0)
        self.profile = p = profile
        arch = dep.arch
        gpu = dep.gpu
        self._hbm = gpu.hbm_tb_s * 1e12 * p.memory_efficiency
        self._peak_dense = gpu.tflops(dep.gemm_dtype) * TFLOP * p.gemm_efficiency
        self._peak_expert = gpu.tflops(dep.expert_gemm_dtype) * TFLOP * p.gemm_efficiency * p.expert_efficiency
        self._peak_attention = gpu.bf16_tflops * TFLOP * p.attention_efficiency
        self._half = p.gemm_half_tokens
        self._dp = dep.attention_dp
        # Dense weights per GPU (read once per pass) and the FLOPs they cost per token.
        dense_params = dep.dense_weight_params_per_gpu()
        self._dense_bytes = dense_params * dep.weight_bytes
        self._dense_flops_per_token = 2 * dense_params
        # LM head, tp-sharded, kept in bf16 as checkpoints do.
        self._head_bytes = arch.vocab * arch.hidden / dep.tp * 2
        self._head_flops_per_request = 2 * arch.vocab * arch.hidden / dep.tp
        # Routed experts.
        self._moe_layers = arch.moe_layers
        self._experts = arch.experts
        self._k = arch.experts_per_token
        self._expert_bytes = arch.expert_params() * dep.expert_weight_bytes / dep.moe_tp
        self._experts_per_rank = arch.experts / dep.ep if arch.experts else 0
        self._expert_flops_per_token = 2 * arch.experts_per_token * arch.expert_params() * arch.moe_layers / dep.gpus
        # Attention.
        heads = arch.heads / dep.tp
        if arch.mla:
            qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
            self._prefill_attn_flops_per_pair = 2 * heads * (qk + arch.v_head_dim)
            # Decode runs the absorbed form over the latent cache.
            self._decode_attn_flops_per_ctx = 2 * heads * (2 * arch.kv_lora_rank + arch.qk_rope_head_dim)
        else:
            self._prefill_attn_flops_per_pair = 4 * heads * arch.head_dim
            self._decode_attn_flops_per_ctx = 4 * heads * arch.head_dim
        self._full_layers = arch.full_attention_layers
        self._sliding_layers = arch.sliding_layers
        self._window = arch.sliding_window
        self._kv_bytes_layer = dep.kv_elements_per_token_layer_per_gpu() * dep.kv_bytes
        # Communication (_comm_seconds): two all-reduces per layer under TP; with attention-DP, an
        # all-to-all dispatch and combine per MoE layer.
        self._layers = arch.layers
        self._nvlink = gpu.nvlink_gb_s / 2 * 1e9 * p.comm_efficiency   # one direction
        self._nic = gpu.network_gb_s * 1e9 * p.comm_efficiency
        self._domain = gpu.nvlink_domain
        self._hidden_bytes = arch.hidden * 2
        self._latency = p.comm_latency_us * 1e-6
        self._overhead = p.pass_overhead_ms * 1e-3 + p.per_layer_overhead_us * 1e-6 * arch.layers
        self._per_request = p.per_request_ms * 1e-3
        # A pass with prefill work and more tokens than the engine replays from CUDA graphs runs
        # eagerly (None: all run in graphs, as the bare model assumes).
        self._graph_tokens = graph_tokens
        self._eager_prefill = (p.eager_moe_layer_us * 1e-6 * arch.moe_layers) if graph_tokens is not None else 0.0
        # _fixed_seconds by (tokens, requests, logits): a pure function of them, asked again and
        # again for the same batch sizes (every decode-only pass of a batch, the sweep's trials).
        self._fixed_memo: dict[tuple, float] = {}

    # ------------------------------------------------------------------ parts (seconds)

    def _gemm_efficiency(self, rows: float) -> float:
        return rows / (rows + self._half) if rows > 0 else 1.0

    def _fixed_seconds(self, tokens: int, requests: int, logits: int | None = None) -> float:
        """Everything but attention: GEMMs, experts, LM head, communication, overheads.

        `logits` is the rows the LM head scores: one per request, or 1 + k per request
        verifying k drafts. Memoised: the same float, computed once.
        """
        key = (tokens, requests, logits)
        memo = self._fixed_memo
        seconds = memo.get(key)
        if seconds is None:
            if len(memo) >= _FIXED_MEMO_SIZE:   # a long trace of varied prefills: start afresh
                memo.clear()
            seconds = memo[key] = self._fixed_seconds_uncached(tokens, requests, logits)
        return seconds

    def _fixed_seconds_uncached(self, tokens: int, requests: int, logits: int | None) -> float:
        dp = self._dp
        rows = tokens / dp
        req_rows = (requests if logits is None else logits) / dp
        eff = self._gemm_efficiency(rows)
        dense = max(self._dense_flops_per_token * rows / (self._peak_dense * eff), self._dense_bytes / self._hbm)
        head = self._head_seconds(req_rows)
        moe = 0.0
        if self._moe_layers:
            # Expected distinct experts T tokens touch when each picks k of E: E·(1 − (1 − k/E)^T).
            touched = self._experts_per_rank * (1.0 - (1.0 - self._k / self._experts) ** tokens)
            per_expert_rows = max(tokens * self._k / self._experts, 1.0)
            moe_eff = self._gemm_efficiency(per_expert_rows)
            moe = max(self._expert_flops_per_token * tokens / (self._peak_expert * moe_eff),
                      self._moe_layers * touched * self._expert_bytes / self._hbm)
        comm = self._comm_seconds(rows)
        return self._overhead + self._per_request * requests + dense + head + moe + comm

    def _comm_seconds(self, rows: float) -> float:
        """Collectives of a pass whose critical GPU holds `rows` tokens."""
        comm = 0.0
        dep = self.deployment
        if dep.tp > 1:
            comm += 2 * self._layers * (self._all_reduce_seconds(rows * self._hidden_bytes, dep.tp) + self._latency)
        if dep.ep > 1 and self._moe_layers and self._dp > 1:
            # Attention-DP ranks hold different tokens: each direction sends the tokens' k
            # expert copies to the other ranks. With TP attention every rank already holds
            # every token; it runs its own experts on them and the combine is the MLP's
            # all-reduce counted above (vLLM 0.32 `FusedMoEParallelConfig.use_all2all_kernels`
            # is false without DP).
            sent = (dep.ep - 1) / dep.ep * rows * self._k * self._hidden_bytes
            comm += self._moe_layers * (2 * self._all_to_all_seconds(sent, dep.ep) + 2 * self._latency)
        return comm

    def _all_reduce_seconds(self, size: float, ranks: int) -> float:
        """A ring all-reduce of `size` bytes per GPU; hierarchical beyond one NVLink domain."""
        domain = self._domain
        if ranks <= domain:
            return 2 * (ranks - 1) / ranks * size / self._nvlink
        domains = -(-ranks // domain)
        return (2 * (domain - 1) / domain * size / self._nvlink
                + 2 * (domains - 1) / domains * size / domain / self._nic)

    def _all_to_all_seconds(self, sent: float, ranks: int) -> float:
        """`sent` bytes per GPU spread evenly over the other ranks: beyond the NVLink domain,
        the share for peers in other domains crosses the NIC while the rest takes NVLink."""
        domain = self._domain
        if ranks <= domain:
            return sent / self._nvlink
        remote = sent * (ranks - domain) / (ranks - 1)
        return max(remote / self._nic, (sent - remote) / self._nvlink)

    def _head_seconds(self, req_rows: float) -> float:
        eff = self._gemm_efficiency(req_rows)
        return max(self._head_flops_per_request * req_rows / (self._peak_dense * eff), self._head_bytes / self._hbm)

    def _draft_seconds(self, rows: int, context: float) -> float:
        """An EAGLE/MTP drafter's k autoregressive steps over the requests that sampled.

        A draft step is one decoder layer of the target's shape plus the LM head: the
        target's per-layer share of GEMMs, experts, communication and attention, plus its
        per-layer launch overhead and a full LM head.
        """
        head = self._head_seconds(rows / self._dp)
        body = self._fixed_seconds(rows, rows) - self._overhead - self._per_request * rows - head
        attention = self._decode_attention_seconds(rows, context, rows) if context else 0.0
        per_step = (body + attention) / self._layers + self.profile.per_layer_overhead_us * 1e-6 + head
        return self._draft_steps * per_step

    def _prefill_attention_seconds(self, chunks: list[tuple[int, int]]) -> float:
        flops = 0.0
        kv = 0.0
        window = self._window
        for tokens, prefix in chunks:
            pairs = tokens * prefix + tokens * (tokens + 1) / 2
            flops += self._full_layers * pairs
            kv += self._full_layers * (prefix + tokens)
            if self._sliding_layers:
                span = min(prefix + (tokens + 1) / 2, window)
                flops += self._sliding_layers * tokens * span
                kv += self._sliding_layers * min(prefix + tokens, window)
        flops *= self._prefill_attn_flops_per_pair / self._dp
        kv *= self._kv_bytes_layer / self._dp
        return max(flops / self._peak_attention, kv / self._hbm)

    # ------------------------------------------------------------------ the model

    def duration_ns(self, shape: PassShape) -> int:
        tokens = shape.decode_tokens
        requests = shape.num_decodes + len(shape.prefill_chunks)
        for chunk_tokens, _ in shape.prefill_chunks:
            tokens += chunk_tokens
        drafts = shape.decode_tokens - shape.num_decodes
        seconds = self._fixed_seconds(tokens, requests, requests + drafts if drafts else None)
        if shape.prefill_chunks:
            seconds += self._prefill_attention_seconds(shape.prefill_chunks)
            if self._eager_prefill and tokens > self._graph_tokens:
                seconds += self._eager_prefill
        if shape.num_decodes:
            seconds += self._decode_attention_scalar(shape.num_decodes, float(shape.decode_context),
                                                     shape.decode_tokens)
            if self._draft_steps and shape.decode_tokens > shape.num_decodes:
                seconds += self._draft_seconds(shape.num_decodes + len(shape.prefill_chunks),
                                               float(shape.decode_context))
        return max(1, round(seconds * 1e9))

    def min_pass_ns(self) -> int:
        # Every part grows with tokens, requests and context, so a one-token pass is the floor.
        return min(self.duration_ns(PassShape(prefill_chunks=[(1, 0)])),
                   self.duration_ns(PassShape(num_decodes=1, decode_tokens=1, decode_context=1)))

    def _decode_attention_seconds(self, decodes, context, queries=None):
        """Works on floats and on numpy arrays alike (the same operations, in the same order).

        `queries` (default: one per request) is the query tokens: with speculative drafts each
        request scores 1 + k positions against (about) the same context, so compute grows with
        them while the KV read does not.
        """
        per_ctx = self._full_layers * 1.0
        if self._sliding_layers:
            mean = context / decodes
            windowed = decodes * np.minimum(mean, self._window) if isinstance(context, np.ndarray) \
                else decodes * min(mean, self._window)
        else:
            windowed = 0.0
        ctx_layers = context * per_ctx + windowed * self._sliding_layers
        flops = ctx_layers * self._decode_attn_flops_per_ctx / self._dp
        if queries is not None and queries != decodes:
            flops = flops * (queries / decodes)
        kv = ctx_layers * self._kv_bytes_layer / self._dp
        compute = flops / self._peak_attention
        memory = kv / self._hbm
        if isinstance(context, np.ndarray):
            return np.maximum(compute, memory)
        return max(compute, memory)

    def _decode_attention_scalar(self, decodes: int, context: float, queries: int | None = None) -> float:
        """_decode_attention_seconds on a float: the same operations in the same order, without
        its numpy checks (a pass's duration asks it once; tests hold the two equal)."""
        if self._sliding_layers:
            windowed = decodes * min(context / decodes, self._window)
        else:
            windowed = 0.0
        ctx_layers = context * (self._full_layers * 1.0) + windowed * self._sliding_layers
        flops = ctx_layers * self._decode_attn_flops_per_ctx / self._dp
        if queries is not None and queries != decodes:
            flops = flops * (queries / decodes)
        kv = ctx_layers * self._kv_bytes_layer / self._dp
        return max(flops / self._peak_attention, kv / self._hbm)

    def decode_steps_list(self, num_decodes: int, context: int, count: int) -> list[int]:
        """decode_steps_ns as plain ints; a short run (most are a handful of passes) in scalar
        arithmetic, where numpy's per-call cost exceeds the work. Same floats, same rounding:
        numpy's round and Python's both round half to even."""
        if count > _SCALAR_STEPS:
            return self.decode_steps_ns(num_decodes, context, count).tolist()
        fixed = self._fixed_seconds(num_decodes, num_decodes)
        attention = self._decode_attention_scalar
        out = []
        for i in range(count):
            seconds = fixed + attention(num_decodes, float(context + num_decodes * i))
            out.append(max(1, round(seconds * 1e9)))
        return out

    def decode_steps_ns(self, num_decodes: int, context: int, count: int) -> np.ndarray:
        fixed = self._fixed_seconds(num_decodes, num_decodes)
        contexts = (context + num_decodes * np.arange(count, dtype=np.int64)).astype(np.float64)
        seconds = fixed + self._decode_attention_seconds(num_decodes, contexts)
        return np.maximum(1, np.round(seconds * 1e9)).astype(np.int64)


def profile_with_overrides(base: RooflineProfile, cfg) -> RooflineProfile:
    """Apply the config's pinned values (null keeps the fitted one)."""
    changes = {f.name: getattr(cfg, f.name) for f in fields(RooflineProfile)
               if getattr(cfg, f.name, None) is not None}
    return replace(base, **changes)
