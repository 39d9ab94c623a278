"""Step times from aiconfigurator-core's measured kernel database (optional extra `servesim[aic]`).

Each pass is priced as the sum of the kernels the roofline model prices, each looked up in
aiconfigurator-core's per-kernel performance tables for the deployment's GPU, backend and
backend version (through its compiled engine's op-list evaluation, `evaluate_ops_json`):

- per-token work at M = the pass's tokens on one attention-DP rank: the QKV, output and MLP
  GEMMs of every layer (in the deployment's precision), routed experts (fused MoE, with
  dispatch and combine) and shared experts and router of MoE layers, norms and activations,
  the embedding lookup and, under TP, the two all-reduces per layer;
- the LM head (bf16) at M = the rows it scores (one per request, 1 + k verifying k drafts);
- context attention per prefill chunk, given the prefix computed before it;
- generation attention of the decoding requests at their batch and mean context;
- the fitted roofline profile's per-pass and per-request overheads for this GPU and backend
  (scheduling, input preparation, sampling: host work no kernel table holds). Its per-layer
  overhead is left out: the small per-layer kernels are priced from the database here.

Per-token work and the LM head are tabulated once per model on a grid of M (every M up to
512, then steps of about 2%), generation attention on a grid of (batch per rank: every batch
to 64, then steps of 10%; mean context: every value to 16, then steps of 10%); the tables are
made non-decreasing (a running maximum, so measurement noise between neighbouring database
rows never makes more work faster) and interpolated (linearly; bilinearly for attention).
Context attention is looked up per chunk and cached per (tokens, prefix). A pass costs
O(prefill chunks) lookups, never one per decoding request.
"""

from __future__ import annotations

import contextlib
import logging
import math
from functools import lru_cache

import numpy as np

from servesim.errors import ServesimError
from servesim.timing.base import PassShape, TimingModel

# servesim GPU name -> aiconfigurator-core system name.
AIC_SYSTEMS = {
    "a100-sxm": "a100_sxm",
    "h100-sxm": "h100_sxm",
    "h200-sxm": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
}
# servesim precision -> aiconfigurator-core GEMMQuantMode name (dense GEMMs).
GEMM_QUANT = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4", "mxfp4": "nvfp4",
              "int4": "int4_wo"}
KV_QUANT = {"bf16": "bfloat16", "fp8": "fp8"}
# aiconfigurator-core's own MoE model prices routed experts under a power-law token load (alpha 1.2).
MOE_WORKLOAD = "power_law_1.2"

# The M grid per-token work is tabulated on: every M to 512, then geometric steps of ~2%.
_DENSE_TO = 512
_GRID_RATIO = 1.02
# Generation attention is tabulated over (batch per rank, mean context); past the last batch it
# grows in proportion to the batch.
_BATCH_TO = 2048


def _moe_quant(precision: str, blackwell: bool) -> str:
    if precision == "mxfp4":
        return "w4a8_mxfp4_mxfp8" if blackwell else "w4a16_mxfp4"
    return {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4", "int4": "int4_wo"}[precision]


@contextlib.contextmanager
def _quiet():
    """aiconfigurator-core logs a warning per fallback table it loads; a run has no use for them."""
    logger = logging.getLogger("aiconfigurator_core")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _grid(limit: int, dense_to: int = _DENSE_TO, ratio: float = _GRID_RATIO) -> np.ndarray:
    """Every integer to `dense_to`, then geometric steps of `ratio` until `limit` is reached."""
    points = list(range(1, dense_to + 1))
    m = float(dense_to)
    while points[-1] < limit:
        m *= ratio
        points.append(max(points[-1] + 1, math.ceil(m)))
    return np.asarray(points, dtype=np.int64)


_DATABASES: dict = {}
_HANDLES: dict = {}
_TABLES: dict = {}


def _database(system: str, backend: str, version: str | None):
    """aiconfigurator-core's database for (system, backend, version); null = its current version."""
    from aiconfigurator_core.sdk import perf_database as pdb

    key = (system, backend, version)
    if key not in _DATABASES:
        with _quiet():
            slots = pdb.get_version_slots(system, backend) or {}
            db = None
            if slots:
                try:
                    db = pdb.get_database(system, backend, version or slots.get("current") or "current")
                except ValueError:   # a version outside the slots aiconfigurator-core serves
                    db = None
        if db is None:
            if not slots:
                raise ServesimError(f"engine.timing.kind aic: aiconfigurator-core has no {backend} database for "
                                    f"{system}")
            names = ", ".join(f"{v} ({k})" for k, v in slots.items())
            raise ServesimError(f"engine.timing.kind aic: aiconfigurator-core has no {system}/{backend} database "
                                f"version {version!r}; it serves {names}, and null picks the current one")
        _DATABASES[key] = db
    return _DATABASES[key]


def _handle(db):
    """One model-less engine per database: it loads the kernel tables once, on first use."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    key = (db.system, db.backend, db.version)
    if key not in _HANDLES:
        with _quiet():
            _HANDLES[key] = EngineHandle.for_database(db, systems_path=db.systems_root)
    return _HANDLES[key]


def _ctx_attention(ops, name, count, heads, kv_heads, kv_q, fmha_q, **kwargs):
    return ops.ContextAttention(name, count, heads, kv_heads, kv_q, fmha_q, **kwargs)


def _gen_attention(ops, name, count, heads, kv_heads, kv_q, **kwargs):
    return ops.GenerationAttention(name, count, heads, kv_heads, kv_q, **kwargs)


class AicTimingModel(TimingModel):
    def __init__(self, cfg, deployment, engine) -> None:
        """`engine`: the run's Backend (engine/backend.py), which names its aiconfigurator-core database."""
        try:
            import aiconfigurator_core  # noqa: F401
        except ImportError:
            raise ServesimError(
                "engine.timing.kind aic needs aiconfigurator-core: install it with pip install 'servesim[aic]'"
            ) from None
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.engine import _resolve_attention_lane_orders, build_ops_json
        import aiconfigurator_core.sdk.operations as ops

        self.deployment = dep = deployment
        arch = dep.arch
        gpu = dep.gpu
        system = AIC_SYSTEMS.get(gpu.name)
        if system is None:
            raise ServesimError(f"engine.timing.kind aic: aiconfigurator-core has no data for {gpu.name}; "
                                f"it covers {', '.join(AIC_SYSTEMS)}")
        backend = engine.aic_backend
        if backend is None:
            from servesim.engine.registry import BACKENDS

            covered = [b.name for b in BACKENDS.values() if b.aic_backend is not None]
            raise ServesimError(f"engine.timing.kind aic: aiconfigurator-core has no data for backend {engine.name}; "
                                f"it covers {', '.join(covered)}")
        if arch.mla or arch.linear_layers:
            kind = "multi-head latent attention" if arch.mla else "linear-attention layers"
            raise ServesimError(f"engine.timing.kind aic prices GQA/MHA attention only and {arch.name} has {kind}; "
                                "use kind roofline for it")
        db = _database(system, backend, cfg.version)
        self.system, self.backend, self.version = system, backend, db.version
        self._handle = _handle(db)

        def quant(enum, name: str):
            if not hasattr(enum, name):
                raise ServesimError(f"engine.timing.kind aic: aiconfigurator-core has no {name} kernels")
            return getattr(enum, name)

        gemm_q = quant(common.GEMMQuantMode, GEMM_QUANT[dep.precision])
        bf16 = common.GEMMQuantMode.bfloat16
        kv_q = getattr(common.KVCacheQuantMode, KV_QUANT[dep.kv_dtype])
        fmha_q = common.FMHAQuantMode.bfloat16

        tp, dp = dep.tp, dep.attention_dp
        h = arch.hidden
        self._dp = dp
        heads = max(1, arch.heads // tp)
        kv_heads = dep.kv_heads_per_gpu
        hd = arch.head_dim
        layers = arch.layers

        # Per-token work: evaluated together at M tokens per rank.
        token_ops = [
            ops.Embedding("embedding", 1, arch.vocab // tp, h, 0.3),
            ops.ElementWise("add_norm", 2 * layers, 2 * h, 2 * h, 0.8),
            ops.GEMM("qkv_gemm", arch.attention_layers, (heads + 2 * kv_heads) * hd, h, gemm_q),
            ops.GEMM("proj_gemm", arch.attention_layers, h, heads * hd, gemm_q, low_precision_input=True),
        ]
        if arch.dense_layers and arch.dense_intermediate:
            inter = arch.dense_intermediate // tp
            token_ops += [
                ops.GEMM("gate_ffn1_gemm", arch.dense_layers, 2 * inter, h, gemm_q),
                ops.ElementWise("act_gate", arch.dense_layers, 2 * inter, inter, 0.8),
                ops.GEMM("ffn2_gemm", arch.dense_layers, h, inter, gemm_q, low_precision_input=True),
            ]
        self._moe_ops = {}
        if arch.moe_layers:
            n = arch.moe_layers
            moe_q = quant(common.MoEQuantMode, _moe_quant(dep.expert_precision, system.startswith(("b", "gb"))))
            token_ops.append(ops.GEMM("router_gemm", n, arch.experts, h, bf16))
            if arch.shared_intermediate:
                shared = arch.shared_intermediate // tp
                token_ops += [
                    ops.GEMM("shared_gate_up_gemm", n, 2 * shared, h, gemm_q),
                    ops.ElementWise("shared_act_gate", n, 2 * shared, shared, 0.8),
                    ops.GEMM("shared_ffn2_gemm", n, h, shared, gemm_q),
                ]
            token_ops += [
                ops.MoEDispatch("moe_pre_dispatch", n, h, arch.experts_per_token, arch.experts, dep.moe_tp, dep.ep,
                                dp, True, quant_mode=moe_q, backend=backend),
                ops.MoE("moe", n, h, arch.moe_intermediate, arch.experts_per_token, arch.experts, dep.moe_tp, dep.ep,
                        moe_q, MOE_WORKLOAD, dp),
                ops.MoEDispatch("moe_post_dispatch", n, h, arch.experts_per_token, arch.experts, dep.moe_tp, dep.ep,
                                dp, False, quant_mode=moe_q, backend=backend),
            ]
        if tp > 1:
            token_ops.append(ops.CustomAllReduce("all_reduce", 2 * layers, h, tp))
        self._token_json = build_ops_json(token_ops)
        self._head_json = build_ops_json([ops.GEMM("logits_gemm", 1, arch.vocab // tp, h, bf16)])

        # Attention: full layers, and sliding-window layers with their window.
        attention = []
        if arch.full_attention_layers:
            attention.append((arch.full_attention_layers, 0))
        if arch.sliding_layers:
            attention.append((arch.sliding_layers, arch.sliding_window))
        def attention_json(make, *args):
            built = [make(*args[:2], count, heads, kv_heads, *args[2:], window_size=window, head_size=hd)
                     for count, window in attention]
            with _quiet():
                _resolve_attention_lane_orders(built, db, None)
            return build_ops_json(built)

        self._ctx_json = attention_json(_ctx_attention, ops, "context_attention", kv_q, fmha_q)
        self._gen_json = attention_json(_gen_attention, ops, "generation_attention", kv_q)
        self.context_kv_dtype = KV_QUANT[dep.kv_dtype]
        if self.context_kv_dtype != "bfloat16" and not self._prices(self._ctx_json, True, 1, 16):
            # Some backends' tables hold prefill attention over an FP8 cache only for some head
            # layouts; the prefill kernel computes in BF16 either way, so price it over a BF16 cache.
            self._ctx_json = attention_json(_ctx_attention, ops, "context_attention",
                                            common.KVCacheQuantMode.bfloat16, fmha_q)
            self.context_kv_dtype = "bfloat16"

        # Host overheads from the fitted roofline profile of this GPU and backend.
        from servesim.timing.roofline import fitted_profile

        profile, self.profile_key = fitted_profile(gpu.name, engine.timing_profile)
        self._pass_ms = profile.pass_overhead_ms
        self._request_ms = profile.per_request_ms

        self._context_attention_ms = lru_cache(maxsize=1 << 16)(self._context_attention_lookup)
        limit = max(1 << 15, arch.context_length)
        self._grid = _grid(limit)
        self._grid_f = self._grid.astype(np.float64)
        self._token_table = self._tabulate(self._token_json, "per-token work")
        self._head_table = self._tabulate(self._head_json, "the LM head")
        self._gen_batches = _grid(_BATCH_TO, dense_to=64, ratio=1.1)
        self._gen_contexts = _grid(limit, dense_to=16, ratio=1.1)
        self._gen_table = self._tabulate_generation()
        # A probe pass: an unsupported attention shape fails here, not mid-run.
        self._context_attention_ms(16, 0)

    # ------------------------------------------------------------------ lookups (milliseconds)

    def _prices(self, ops_json: str, is_context: bool, batch: int, s: int) -> bool:
        try:
            with _quiet():
                self._handle.evaluate_ops_json(ops_json, is_context=is_context, batch_size=batch, s=s)
        except Exception:
            return False
        return True

    def _evaluate(self, ops_json: str, what: str, **kwargs) -> float:
        try:
            with _quiet():
                rows = self._handle.evaluate_ops_json(ops_json, **kwargs)
        except Exception as exc:   # aiconfigurator-core raises its own error types
            raise ServesimError(f"engine.timing.kind aic: aiconfigurator-core cannot price {what} on "
                                f"{self.system}/{self.backend} {self.version}: {str(exc).splitlines()[0]}") from None
        total = 0.0
        for _, ms, _, _ in rows:
            total += ms
        return total

    def _tabulate(self, ops_json: str, what: str) -> np.ndarray:
        key = (self.system, self.backend, self.version, ops_json, len(self._grid))
        if key in _TABLES:
            return _TABLES[key]
        values = np.array([self._evaluate(ops_json, what, is_context=True, batch_size=1, s=int(m), x=int(m))
                           for m in self._grid])
        _TABLES[key] = table = np.maximum.accumulate(values)
        table.flags.writeable = False
        return table

    def _per_rows_ms(self, table: np.ndarray, rows: int) -> float:
        if rows <= 0:
            return 0.0
        if rows <= _DENSE_TO:
            return float(table[rows - 1])
        if rows >= self._grid[-1]:   # beyond the grid: linear in M from the last two points
            slope = (table[-1] - table[-2]) / (self._grid_f[-1] - self._grid_f[-2])
            return float(table[-1] + slope * (rows - self._grid_f[-1]))
        return float(np.interp(float(rows), self._grid_f, table))

    def _context_attention_lookup(self, tokens: int, prefix: int) -> float:
        return self._evaluate(self._ctx_json, f"context attention of {tokens} tokens after {prefix}",
                              is_context=True, batch_size=1, s=tokens, prefix=prefix)

    def _tabulate_generation(self) -> np.ndarray:
        key = (self.system, self.backend, self.version, self._gen_json, len(self._gen_batches),
               len(self._gen_contexts))
        if key in _TABLES:
            return _TABLES[key]
        table = np.empty((len(self._gen_batches), len(self._gen_contexts)))
        for i, batch in enumerate(self._gen_batches.tolist()):
            for j, context in enumerate(self._gen_contexts.tolist()):
                table[i, j] = self._evaluate(self._gen_json, f"generation attention of {batch} requests at "
                                             f"context {context}", is_context=False, batch_size=batch, s=context)
        # Non-decreasing in both batch and context (measurement noise between table rows aside).
        table = np.maximum.accumulate(np.maximum.accumulate(table, axis=0), axis=1)
        table.flags.writeable = False
        _TABLES[key] = table
        return table

    def _generation_attention_ms(self, batch: int, context: float) -> float:
        """Bilinear in (batch, mean context) on the table; linear beyond its last context."""
        batches, contexts, table = self._gen_batches, self._gen_contexts, self._gen_table
        scale = 1.0
        if batch > batches[-1]:
            scale = batch / float(batches[-1])
            batch = int(batches[-1])
        i = min(int(np.searchsorted(batches, batch, side="right")) - 1, len(batches) - 2)
        wb = (batch - batches[i]) / float(batches[i + 1] - batches[i])
        j = max(0, min(int(np.searchsorted(contexts, context, side="right")) - 1, len(contexts) - 2))
        ws = (context - contexts[j]) / float(contexts[j + 1] - contexts[j])
        low = table[i, j] + ws * (table[i, j + 1] - table[i, j])
        high = table[i + 1, j] + ws * (table[i + 1, j + 1] - table[i + 1, j])
        return float((low + wb * (high - low)) * scale)

    # ------------------------------------------------------------------ the model

    def _decode_ms(self, num_decodes: int, decode_context: int) -> float:
        dp = self._dp
        return self._generation_attention_ms(-(-num_decodes // dp), max(1.0, decode_context / num_decodes))

    def _fixed_ms(self, tokens: int, requests: int, logits: int) -> float:
        """Everything but attention: host overheads, per-token work and the LM head."""
        dp = self._dp
        return (self._pass_ms + self._request_ms * requests
                + self._per_rows_ms(self._token_table, -(-tokens // dp))
                + self._per_rows_ms(self._head_table, -(-logits // dp)))

    def duration_ns(self, shape: PassShape) -> int:
        tokens = shape.decode_tokens
        attention = 0.0
        for chunk_tokens, prefix in shape.prefill_chunks:
            tokens += chunk_tokens
            attention += self._context_attention_ms(chunk_tokens, prefix)
        requests = shape.num_decodes + len(shape.prefill_chunks)
        ms = self._fixed_ms(tokens, requests, requests + shape.decode_tokens - shape.num_decodes)
        if shape.prefill_chunks:
            ms += attention / self._dp
        if shape.num_decodes:
            ms += self._decode_ms(shape.num_decodes, shape.decode_context)
        return max(1, round(ms * 1e6))

    def decode_steps_ns(self, num_decodes: int, context: int, count: int) -> np.ndarray:
        # The same operations, in the same order, as duration_ns of each decode-only pass.
        fixed = self._fixed_ms(num_decodes, num_decodes, num_decodes)
        out = np.empty(count, dtype=np.int64)
        for i in range(count):
            out[i] = max(1, round((fixed + self._decode_ms(num_decodes, context + i * num_decodes)) * 1e6))
        return out
