"""Turning rows of ../shared/calibration/silicon_calibration.csv into servesim configs.

Client recipe (the calibration README's, from InferenceMAX-style sweeps of vLLM's
benchmark_serving.py): closed loop at the row's concurrency, 10 × concurrency
requests started at once, input and output lengths uniform in [0.8 × L, L],
max_num_seqs = the row's batch size (per attention-DP rank), max_num_batched_tokens
8192, async scheduling on, prefix caching off, --ignore-eos. Metrics cover every
request, the first wave included, as vllm bench serve reports them.

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

    @property
    def group(self) -> str:
        return f"{self.model} | {self.gpu} | {self.backend}"


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


def load_rows(path: Path = CALIBRATION, mode: str = "agg") -> tuple[list[Row], list[dict]]:
    """Rows whose model and GPU are catalogued, and the raw rows that were skipped."""
    rows, skipped = [], []
    with open(path, newline="") as fh:
        for raw in csv.DictReader(fh):
            if raw["mode"] != mode:
                continue
            try:
                model = resolve_model(raw["model_path"]).name
                gpu = resolve_gpu(raw["system"]).name
            except ServesimError:
                skipped.append(raw)
                continue
            match = re.search(r"silicon_concurrency=(\d+)", raw["silicon_data_source"])
            batch = _int(raw.get("batch_size"), 0)
            concurrency = int(match.group(1)) if match else batch
            tp = _int(raw.get("tp_size"))
            dp = _int(raw.get("attention_dp_size"))
            ep = _int(raw.get("moe_ep_size"))
            if (tp * dp) % ep:
                ep = 1
            rows.append(Row(raw, model, gpu, raw["backend"], _precision(raw), concurrency, int(raw["isl"]),
                            int(raw["osl"]), tp, dp, ep, batch or concurrency,
                            float(raw["silicon_ttft_ms"]), float(raw["silicon_tpot_ms"]),
                            False))
    return rows, skipped


def row_config(row: Row, requests_per_user: int = 10, profile: str | None = None) -> dict:
    """The servesim config that replays one calibration row."""
    timing = {"kind": "roofline", "profile": profile or f"{row.gpu}/{row.backend}"}
    # gpt-oss ships MXFP4 experts and BF16 attention: its "fp4" rows run the checkpoint as is.
    precision = None if row.model == "gpt-oss-120b" and row.precision == "fp4" else row.precision
    return {
        "model": row.model,
        "gpu": row.gpu,
        "precision": precision,
        "engine": {
            "backend": "vllm",  # sglang and trtllm rows: vLLM's scheduler, their backend's step-time profile
            "timing": timing,
            "workers": {"aggregated": {
                "tp": row.tp, "attention_dp": row.attention_dp, "ep": row.ep,
                "scheduler": {
                    "max_num_seqs": row.batch_size * row.attention_dp,
                    "max_num_batched_tokens": max(8192, row.batch_size * row.attention_dp),
                    "max_model_len": row.isl + row.osl + 16,
                    "enable_prefix_caching": False,
                },
            }},
        },
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
