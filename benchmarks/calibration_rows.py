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
# Worker counts (and shapes) InferenceX's published sweep configs give disaggregated rows that
# carry none, matched on the rows' own fields only (docs/research/pd_topologies.md).
PD_TOPOLOGIES = Path(__file__).resolve().parent / "pd_topologies.csv"


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
    # Where a disaggregated row's worker counts come from: "row" (its own fields), "published"
    # (pd_topologies.csv) or "assumed" (one prefill and one decode worker).
    topology: str = ""

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
    if not prefix and raw["mode"] == "agg" and tp * dp > 8 and from_inferencemax(raw):
        # A single-node sweep's row on an 8-GPU system with tp_size 16 or 64 ran TP = tp / ep
        # (4 or 8) with that EP, as the launch scripts' search spaces (TP <= 8) have it; an
        # attention-DP size above 8 likewise counts the ranks times EP (agg_recipes.md §5).
        gpus = resolve_gpu(raw["system"]).nvlink_domain
        if gpus == 8 and tp > 8 and tp % ep == 0 and tp // ep <= 8:
            tp //= ep
        if gpus == 8 and dp > 8 and dp % ep == 0 and dp // ep <= 8:
            dp //= ep
    batch = _int(raw.get(f"{prefix}batch_size"), 0) or concurrency
    count = _int(raw.get(f"{prefix}num_workers")) if prefix else 1
    return RoleShape(count, tp, dp, ep, batch)


def _config_shape(note: str, role: str, count: int, batch: int) -> RoleShape | None:
    """A role's shape from a published config entry (pd_topologies.csv's note), unless the entry's
    tp/ep are placeholders. DP attention (DEP n) is n attention-DP ranks of one GPU each."""
    if "placeholder" in note or "total GPU" in note:
        return None
    match = re.search(rf"{role} tp(\d+)/ep(\d+)/dp-attn=(True|False)", note)
    if match is None:
        return None
    size, ep, dp_attention = int(match.group(1)), int(match.group(2)), match.group(3) == "True"
    tp, dp = (1, size) if dp_attention else (size, 1)
    if (tp * dp) % ep:
        return None
    return RoleShape(count, tp, dp, ep, batch)


def published_topologies(path: Path = PD_TOPOLOGIES) -> dict[str, dict]:
    if not path.exists():
        return {}
    with open(path, newline="") as fh:
        return {entry["id"]: entry for entry in csv.DictReader(fh)}


def _with_published(roles: dict[str, RoleShape], entry: dict) -> dict[str, RoleShape]:
    out = {}
    for name, key, tag in (("prefill", "prefill_workers", "P"), ("decode", "decode_workers", "D")):
        count, shape = int(entry[key]), roles[name]
        published = _config_shape(entry["note"], tag, count, shape.batch_size)
        out[name] = published or RoleShape(count, shape.tp, shape.attention_dp, shape.ep, shape.batch_size)
    return out


def load_rows(path: Path = CALIBRATION, mode: str = "agg") -> tuple[list[Row], list[dict]]:
    """Rows (of `mode`: agg, disagg or all) whose model and GPU are catalogued, and the skipped raw rows."""
    rows, skipped = [], []
    published = published_topologies()
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
            topology = ""
            if disagg:
                topology = "row" if raw.get("prefill_num_workers") else "assumed"
                if topology == "assumed" and raw["id"] in published:
                    roles, topology = _with_published(roles, published[raw["id"]]), "published"
            main = roles["decode"] if disagg else _shape(raw, "", concurrency)
            rows.append(Row(raw, model, gpu, raw["backend"], _precision(raw), concurrency, int(raw["isl"]),
                            int(raw["osl"]), main.tp, main.attention_dp, main.ep, main.batch_size,
                            float(raw["silicon_ttft_ms"]), float(raw["silicon_tpot_ms"]),
                            False, raw["mode"], roles, topology))
    return rows, skipped


def from_inferencemax(raw: dict) -> bool:
    """A row of an InferenceMAX-style sweep: its source names a dated file or a database dump."""
    return re.search(r"source_file=\d{4}-\d{2}-\d{2}|db-dump/", raw["silicon_data_source"]) is not None


# InferenceX's SGLang launch scripts by (model, GPU, precision): --scheduler-recv-interval
# ("10/30": 10 below 16 users, 30 from 16; None: not passed, SGLang's 1) and
# --chunked-prefill-size / --max-prefill-tokens (None: not passed). From
# benchmarks/agg_recipes.csv (docs/research/agg_recipes.md); a TP-4 branch differs where noted.
SGLANG_RECIPES = {
    ("deepseek", "b200", "fp4"): ("10/30", 16384, None), ("deepseek", "b300", "fp4"): ("10/30", 16384, None),
    ("deepseek", "b200", "fp8"): ("10/30", 32768, 32768), ("deepseek", "b300", "fp8"): ("10/30", 32768, 32768),
    ("deepseek", "h200-sxm", "fp8"): (None, 32768, 32768),
    ("qwen3.5", "b200", "bf16"): ("10/30", 32768, 32768), ("qwen3.5", "b200", "fp8"): ("10/30", 32768, 32768),
    ("qwen3.5", "b200", "fp4"): ("10/30", 32768, 32768), ("qwen3.5", "b300", "bf16"): ("10/30", 32768, 32768),
    ("qwen3.5", "b300", "fp4"): ("10/30", 32768, 32768), ("qwen3.5", "b300", "fp8"): ("10", 16384, 16384),
    ("qwen3.5", "h200-sxm", "fp8"): (None, 16384, None),
    ("glm-5", "h200-sxm", "fp8"): (None, None, None), ("glm-5", "b200", "fp8"): (None, 32768, 32768),
    ("glm-5", "b200", "fp4"): (None, 131072, None),
}


def sglang_recipe(row: Row) -> tuple[int, int | None, int | None] | None:
    """(recv interval, chunked_prefill_size, max_prefill_tokens) of the row's SGLang launch
    script, or None for rows of other sources (their servers' flags are unknown)."""
    if not from_inferencemax(row.raw):
        return None
    family = "deepseek" if row.model.startswith("deepseek") else row.model.split("-")[0]
    recipe = SGLANG_RECIPES.get((family, row.gpu, row.precision))
    if recipe is None:
        return None
    recv, chunk, prefill = recipe
    if family == "deepseek" and row.precision == "fp8" and row.gpu in ("b200", "b300") and row.tp == 4:
        recv, chunk, prefill = "10", 8192, 8192   # the scripts' TP-4 branch
    interval = {None: 1, "10": 10, "10/30": 10 if row.concurrency < 16 else 30}[recv]
    return interval, chunk, prefill


def sglang_recv_interval(row: Row) -> int:
    """--scheduler-recv-interval of the row's SGLang server (1, SGLang's default, without a script)."""
    recipe = sglang_recipe(row)
    return 1 if recipe is None else recipe[0]


def vllm_capture_size(row: Row) -> dict:
    """InferenceX's vLLM scripts for gpt-oss (every GPU) and MiniMax-M2.5 on B200/B300 pass
    --max-cudagraph-capture-size 2048 (read at InferenceX 843c6254f, benchmarks/single_node/
    fixed_seq_len/deprecated/); the others leave vLLM's default, min(2 × max_num_seqs, 512)."""
    if row.backend != "vllm" or not from_inferencemax(row.raw):
        return {}
    if row.model == "gpt-oss-120b" or (row.model == "minimax-m2.5" and row.gpu in ("b200", "b300")):
        return {"max_cudagraph_capture_size": 2048}
    return {}


def trtllm_script_tokens(row: Row) -> dict:
    """The token budgets other InferenceX TensorRT-LLM scripts pass: gpt-oss 20,000 (and
    `max_batch_size` 512 on B200), Llama-3.1-70B 16,384 on every branch."""
    if row.backend != "trtllm" or not from_inferencemax(row.raw):
        return {}
    if row.model == "gpt-oss-120b":
        return {"max_num_tokens": 20000, **({"max_batch_size": 512} if row.gpu == "b200" else {})}
    if row.model == "llama-3.1-70b":
        return {"max_num_tokens": 16384}
    return {}


def trtllm_max_num_tokens(row: Row) -> dict:
    """InferenceX's DeepSeek-R1 TensorRT-LLM scripts size max_num_tokens as CONC + ISL + 127
    rounded up to 64 (no chunked context), with a floor of 8192 from 2026-01-21 (64af5a771). The
    MTP runs among those rows (image ...post3, and probably the 2026-01-14 sweep) are not told
    apart and get the same rule."""
    if row.backend != "trtllm" or not row.model.startswith("deepseek") or not from_inferencemax(row.raw):
        return {}
    stamp = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.raw["silicon_data_source"])
    tokens = -(-(row.concurrency + row.isl + 127) // 64) * 64
    if stamp is None or stamp.group(1) >= "2026-01-21":
        tokens = max(tokens, 8192)
    return {"max_num_tokens": tokens, "enable_chunked_context": False}


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
        scheduler = workers["aggregated"]["scheduler"]
        scheduler.update(trtllm_script_tokens(row))
        scheduler.update(trtllm_batch_wait(row))
        scheduler.update(trtllm_max_num_tokens(row))
        scheduler.update(vllm_capture_size(row))
        recipe = sglang_recipe(row) if row.backend == "sglang" else None
        if recipe is not None:
            _, chunk, prefill = recipe
            # Not passed: SGLang's own defaults (the chunk by GPU memory, 16384 prefill tokens).
            if chunk is None:
                scheduler.pop("chunked_prefill_size")
            else:
                scheduler["chunked_prefill_size"] = chunk
            scheduler["max_prefill_tokens"] = 16384 if prefill is None else prefill
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
