"""Turning rows of ../shared/calibration/silicon_calibration.csv into servesim configs.

Client recipe (the calibration README's, from InferenceMAX-style sweeps of vLLM's
benchmark_serving.py): closed loop at the row's concurrency, 10 × concurrency
requests started at once, input and output lengths uniform in [0.8 × L, L],
max_num_seqs = the row's batch size (per attention-DP rank; at least the concurrency
over the ranks, as the recipe launches servers with max-num-seqs = concurrency), max_num_batched_tokens
8192, async scheduling on, prefix caching off, --ignore-eos. Each row runs on its own
backend's scheduler model (SGLang and TensorRT-LLM limits set to the same values), and
disaggregated rows as prefill and decode pools of the row's sizes. Metrics cover every
request, the first wave included, as vllm bench serve reports them.

SGLang servers in InferenceMAX's launch scripts read new requests every 10 decode passes
below 16 users and every 30 from 16 up (--scheduler-recv-interval; docs/modeling/sglang.md):
rows from those sweeps (a dated source_file or a db-dump) get that interval. Other SGLang
rows state no server flags and keep SGLang's default, 1.

Rows from the aic-auto-gap-analysis sweeps do not state their client; as the
calibration README advises, they are replayed with the same recipe. (A few of
them, Llama-3.1-8B on H200 at concurrency 128 with 4,000-token prompts reporting
111 ms, cannot include a cold first wave; `warm_start` would leave that wave out,
but no row is given it without evidence in the row itself.)
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from servesim.errors import ServesimError
from servesim.hardware import resolve_gpu
from servesim.models import resolve_model

CALIBRATION = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "silicon_calibration.csv"


@dataclass
class RoleShape:
    """One worker pool of a row: how many workers, their parallelism and batch limit."""

    count: int
    tp: int
    attention_dp: int
    ep: int
    batch_size: int


@dataclass
class Row:
    raw: dict
    model: str
    gpu: str
    backend: str
    precision: str
    concurrency: int
    isl: int
    osl: int
    tp: int
    attention_dp: int
    ep: int
    batch_size: int
    ttft_ms: float
    tpot_ms: float
    warm_start: bool   # measured after a warm-up (aic-auto-gap-analysis sweeps): first wave left out
    mode: str = "agg"
    roles: dict[str, RoleShape] | None = None   # disaggregated rows: "prefill" and "decode"

    @property
    def group(self) -> str:
        suffix = " / disagg" if self.mode == "disagg" else ""
        return f"{self.model} / {self.gpu} / {self.backend}{suffix}"


def _int(value: str, default: int = 1) -> int:
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        return default
    return number if number > 0 else default


def _precision(raw: dict) -> str:
    gemm = (raw.get("gemm_quant_mode") or "").lower()
    precision = (raw.get("precision") or "").lower()
    if "fp4" in gemm or precision == "fp4":
        return "fp4"
    if "fp8" in gemm or precision == "fp8":
        return "fp8"
    if "int4" in gemm or precision == "int4":
        return "int4"
    return "bf16"


def _shape(raw: dict, prefix: str, concurrency: int) -> RoleShape:
    tp = _int(raw.get(f"{prefix}tp_size"))
    dp = _int(raw.get(f"{prefix}attention_dp_size"))
    ep = _int(raw.get(f"{prefix}moe_ep_size"))
    if (tp * dp) % ep:
        ep = 1
    batch = _int(raw.get(f"{prefix}batch_size"), 0) or concurrency
    count = _int(raw.get(f"{prefix}num_workers")) if prefix else 1
    return RoleShape(count, tp, dp, ep, batch)


def load_rows(path: Path = CALIBRATION, mode: str = "agg") -> tuple[list[Row], list[dict]]:
    """Rows (of `mode`: agg, disagg or all) whose model and GPU are catalogued, and the skipped raw rows."""
    rows, skipped = [], []
    with open(path, newline="") as fh:
        for raw in csv.DictReader(fh):
            if mode != "all" and raw["mode"] != mode:
                continue
            try:
                model = resolve_model(raw["model_path"]).name
                gpu = resolve_gpu(raw["system"]).name
            except ServesimError:
                skipped.append(raw)
                continue
            match = re.search(r"silicon_concurrency=(\d+)", raw["silicon_data_source"])
            disagg = raw["mode"] == "disagg"
            batch = _int(raw.get("decode_batch_size" if disagg else "batch_size"), 0)
            concurrency = int(match.group(1)) if match else batch
            roles = ({"prefill": _shape(raw, "prefill_", concurrency), "decode": _shape(raw, "decode_", concurrency)}
                     if disagg else None)
            main = roles["decode"] if disagg else _shape(raw, "", concurrency)
            rows.append(Row(raw, model, gpu, raw["backend"], _precision(raw), concurrency, int(raw["isl"]),
                            int(raw["osl"]), main.tp, main.attention_dp, main.ep, main.batch_size,
                            float(raw["silicon_ttft_ms"]), float(raw["silicon_tpot_ms"]),
                            False, raw["mode"], roles))
    return rows, skipped


def from_inferencemax(raw: dict) -> bool:
    """A row of an InferenceMAX-style sweep: its source names a dated file or a database dump."""
    return re.search(r"source_file=\d{4}-\d{2}-\d{2}|db-dump/", raw["silicon_data_source"]) is not None


def sglang_recv_interval(row: Row) -> int:
    """--scheduler-recv-interval of the row's SGLang server: InferenceMAX's launch scripts pass
    10 below 16 users and 30 from 16 up; other sources state no flags (SGLang's default, 1)."""
    if not from_inferencemax(row.raw):
        return 1
    return 10 if row.concurrency < 16 else 30


def trtllm_batch_wait(row: Row) -> dict:
    """The batch-waiting settings of the row's TensorRT-LLM server. InferenceX's Llama-3.1-70B
    launch script (read for fp4 on B200) writes `batch_wait_timeout_iters: 20` and
    `batch_wait_max_tokens_ratio: 0.9` for 1k/1k at TP < 8, with `--max_num_tokens 16384`.
    The rows of that sweep at that shape (fp8 and H200 ones too, from the same dated file)
    are taken to share it; every other row keeps the defaults (no waiting)."""
    if (row.backend == "trtllm" and row.model == "llama-3.1-70b" and from_inferencemax(row.raw)
            and row.isl == 1024 and row.osl == 1024 and row.tp < 8 and row.attention_dp == 1):
        return {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9, "max_num_tokens": 16384}
    return {}


def scheduler_settings(backend: str, batch: int, max_len: int, recv_interval: int = 1) -> dict:
    """The recipe's limits in each backend's own settings: batch cap, 8192-token iterations
    (or the batch, if larger), no prefix cache (the benchmark's prompts are random)."""
    tokens = max(8192, batch)
    if backend == "sglang":
        return {"max_running_requests": batch, "chunked_prefill_size": tokens, "max_prefill_tokens": tokens,
                "context_length": max_len, "disable_radix_cache": True,
                "scheduler_recv_interval": recv_interval}
    if backend == "trtllm":
        return {"max_batch_size": batch, "max_num_tokens": tokens, "max_seq_len": max_len,
                "enable_chunked_context": True, "enable_block_reuse": False}
    return {"max_num_seqs": batch, "max_num_batched_tokens": tokens, "max_model_len": max_len,
            "enable_prefix_caching": False}


def _role(shape: RoleShape, backend: str, max_len: int, recv_interval: int, gpu: str) -> dict:
    role = {"count": shape.count, "tp": shape.tp, "attention_dp": shape.attention_dp, "ep": shape.ep,
            "scheduler": scheduler_settings(backend, shape.batch_size * shape.attention_dp, max_len, recv_interval)}
    # A row whose worker spans more GPUs than one node holds ran across nodes (the roofline sends
    # collectives beyond the NVLink domain over the NIC).
    gpus = shape.tp * shape.attention_dp
    if gpus > resolve_gpu(gpu).nvlink_domain:
        role["gpus_per_node"] = gpus
    return role


def row_config(row: Row, requests_per_user: int = 10, profile: str | None = None) -> dict:
    """The servesim config that replays one calibration row, on the row's own backend."""
    # The deployment's own fitted profile (or its backend's fallback) unless one is named.
    timing = {"kind": "roofline", **({"profile": profile} if profile else {})}
    # gpt-oss ships MXFP4 experts and BF16 attention: its "fp4" rows run the checkpoint as is.
    precision = None if row.model == "gpt-oss-120b" and row.precision == "fp4" else row.precision
    max_len = row.isl + row.osl + 16
    # The launch scripts found set it for single-node servers; disaggregated recipes do not say.
    recv = 1 if row.roles else sglang_recv_interval(row)
    if row.roles:
        workers = {name: _role(shape, row.backend, max_len, recv, row.gpu) for name, shape in row.roles.items()}
    else:
        # The recipe launches servers with max-num-seqs = concurrency. A few rows give a batch
        # size below concurrency / attention-DP ranks and still report TTFTs with no queueing,
        # which a batch that small could not give. For them the batch size is not the server's
        # limit, so the concurrency is used.
        per_rank = max(row.batch_size, -(-row.concurrency // row.attention_dp))
        workers = {"aggregated": _role(RoleShape(1, row.tp, row.attention_dp, row.ep, per_rank),
                                       row.backend, max_len, recv, row.gpu)}
        workers["aggregated"]["scheduler"].update(trtllm_batch_wait(row))
    return {
        "model": row.model,
        "gpu": row.gpu,
        "precision": precision,
        "engine": {"backend": row.backend, "timing": timing, "workers": workers},
        "workload": {
            "synthetic": {
                "num_requests": requests_per_user * row.concurrency,
                "input_length": {"min": int(0.8 * row.isl), "max": row.isl},
                "output_length": {"min": int(0.8 * row.osl), "max": row.osl},
            },
            "client": {"mode": "closed_loop", "concurrency": row.concurrency},
            "warmup_requests": row.concurrency if row.warm_start else 0,
        },
        "slo": {"ttft_ms": None, "tpot_ms": None},
    }
