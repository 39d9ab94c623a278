"""Write the outputs of a fixed set of runs into a folder, to diff before and after a refactor.

    python benchmarks/ab_outputs.py OUT [--traces /work/shared/traces] [--only NAME ...]
    diff -r BEFORE AFTER

Each configuration gets OUT/<name>/ with requests.csv, summary.json (wall-clock fields
removed: they differ on every run), config.resolved.yaml and, for the runs that log
passes, passes.jsonl. The set covers every backend, aggregated and P/D, fleets under
each router policy, speculative decoding, KV offload, prefix caching on a Mooncake
slice, the embedded default, the reference engine and pass logs. Every run is small
(at most a few thousand requests) so the whole set takes a few minutes on one core.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import sys
import time
from pathlib import Path

import servesim
from servesim.config import config_to_yaml

# Fields that measure the simulator's own wall clock, not the simulated system.
WALL_CLOCK = ("wall_time_ms",)

FIXED = {"kind": "fixed", "pass_ms": 10.0}
POLY = {"kind": "polynomial", "base_ms": 1.5, "per_prefill_token_ms": 0.01, "per_decode_token_ms": 0.02,
        "per_context_token_ms": 0.001}


def _mooncake(trace: Path, backend: str, workers: dict, *, timing=None, router=None, requests=600,
              time_scale=1.0, extra_engine=None, model="llama-3.1-8b", gpu="h100-sxm") -> dict:
    engine = {"backend": backend, "workers": workers, **(extra_engine or {})}
    if timing is not None:
        engine["timing"] = timing
    config = {
        "model": model, "gpu": gpu, "engine": engine,
        "workload": {"trace": str(trace), "format": "mooncake", "max_requests": requests,
                     "client": {"mode": "open_loop", "time_scale": time_scale}},
    }
    if router is not None:
        config["router"] = router
    return config


def _synthetic(backend: str, workers: dict, *, timing=None, client=None, n=300, prefix=0, model="llama-3.1-8b",
               gpu="h100-sxm") -> dict:
    engine = {"backend": backend, "workers": workers}
    if timing is not None:
        engine["timing"] = timing
    return {
        "model": model, "gpu": gpu, "engine": engine,
        "workload": {"synthetic": {"num_requests": n, "input_length": {"min": 64, "max": 2048},
                                   "output_length": {"min": 16, "max": 512}, "prefix_length": prefix},
                     "client": client or {"mode": "closed_loop", "concurrency": 64}},
    }


def configurations(traces: Path) -> dict[str, tuple[object, list, bool]]:
    """name -> (config, overrides, log passes)."""
    conv = traces / "mooncake" / "conversation_trace.jsonl"
    agg = lambda sched=None, **role: {"aggregated": {**role, **({"scheduler": sched} if sched else {})}}  # noqa: E731
    pd = lambda p=None, d=None, **role: {  # noqa: E731
        "prefill": {**role, **({"scheduler": p} if p else {})},
        "decode": {**role, **({"scheduler": d} if d else {})}}
    spec_eagle = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": [0.8, 0.6, 0.4]}
    spec_ngram = {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.5}
    spec_mtp = {"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": 0.7}
    offload = {"host_gb": 50.0, "bandwidth_gb_s": 55.0}
    small_vllm = {"num_gpu_blocks": 3000, "max_model_len": 32768}
    small_sglang = {"max_total_tokens": 48000, "context_length": 32768}
    small_trtllm = {"max_tokens": 48000, "max_seq_len": 32768}
    runs: dict[str, tuple[object, list, bool]] = {
        # The embedded default (2,000 Azure requests on roofline), fast, reference and logged.
        "default": (None, [], False),
        "default_reference": (None, [("engine.reference", True)], False),
        "default_passes": (None, [("workload.max_requests", 300)], True),
        "default_sglang": (None, [("engine.backend", "sglang"), ("workload.max_requests", 800)], False),
        "default_trtllm": (None, [("engine.backend", "trtllm"), ("workload.max_requests", 800)], False),
        "default_sglang_passes": (None, [("engine.backend", "sglang"), ("workload.max_requests", 200)], True),
        "default_trtllm_passes": (None, [("engine.backend", "trtllm"), ("workload.max_requests", 200)], True),
        "default_closed_fixed": (None, [("workload.client", {"mode": "closed_loop", "concurrency": 32}),
                                        ("engine.timing", FIXED), ("workload.max_requests", 500)], False),
    }
    # Prefix caching on a Mooncake slice, every backend, fast and reference, pressed for KV.
    for backend, small in (("vllm", small_vllm), ("sglang", small_sglang), ("trtllm", small_trtllm)):
        runs[f"mooncake_{backend}"] = (_mooncake(conv, backend, agg()), [], False)
        runs[f"mooncake_{backend}_small_kv"] = (_mooncake(conv, backend, agg(small), requests=400), [], False)
        runs[f"mooncake_{backend}_reference"] = (_mooncake(conv, backend, agg(small), requests=300),
                                                 [("engine.reference", True)], False)
        runs[f"mooncake_{backend}_passes"] = (_mooncake(conv, backend, agg(small), requests=150), [], True)
        runs[f"synthetic_{backend}_poly"] = (_synthetic(backend, agg(), timing=POLY, prefix=256), [], False)
        # P/D, both first-token sources.
        runs[f"pd_{backend}"] = (_mooncake(conv, backend, pd(), requests=400), [], False)
        runs[f"pd_{backend}_prefill_first"] = (
            _mooncake(conv, backend, pd(), requests=300, extra_engine={"kv_transfer": {"first_token_from": "prefill",
                                                                                     "latency_ms": 0.5}}), [], False)
        runs[f"pd_{backend}_passes"] = (_mooncake(conv, backend, pd(), requests=100), [], True)
    runs["vllm_no_prefix_sync"] = (_mooncake(conv, "vllm", agg({"enable_prefix_caching": False,
                                                                "async_scheduling": False})), [], False)
    runs["vllm_unchunked_watermark"] = (_synthetic("vllm", agg({"enable_chunked_prefill": False,
                                                                "max_num_batched_tokens": 4096, "watermark": 0.05,
                                                                "num_gpu_blocks": 1500, "max_model_len": 4096}), timing=FIXED), [], False)
    runs["sglang_lpm_mixed"] = (_mooncake(conv, "sglang", agg({"schedule_policy": "lpm", "enable_mixed_chunk": True,
                                                               "max_total_tokens": 60000, "context_length": 32768})), [], False)
    runs["trtllm_chunked_maxutil"] = (_mooncake(conv, "trtllm", agg({"enable_chunked_context": True,
                                                                     "capacity_scheduler_policy": "MAX_UTILIZATION",
                                                                     "max_tokens": 60000, "max_seq_len": 32768})), [], False)
    # Fleets under each router policy, aggregated and P/D.
    for policy in ("round_robin", "random", "least_outstanding", "kv_aware"):
        runs[f"fleet_vllm_{policy}"] = (_mooncake(conv, "vllm", agg(small_vllm, count=3), router={"policy": policy},
                                                  requests=900, time_scale=0.5), [], False)
        runs[f"fleet_pd_{policy}"] = (_mooncake(conv, "vllm", {"prefill": {"count": 2}, "decode": {"count": 2}},
                                                router={"policy": policy}, requests=500), [], False)
    runs["fleet_sglang_kv_aware"] = (_mooncake(conv, "sglang", agg(small_sglang, count=2),
                                               router={"policy": "kv_aware"}, requests=500), [], False)
    runs["fleet_trtllm_least"] = (_mooncake(conv, "trtllm", agg(small_trtllm, count=2),
                                            router={"policy": "least_outstanding"}, requests=500), [], False)
    # Speculative decoding.
    runs["spec_vllm_eagle"] = (_synthetic("vllm", agg(speculative=spec_eagle)), [], False)
    runs["spec_vllm_ngram"] = (_synthetic("vllm", agg(speculative=spec_ngram)), [], False)
    runs["spec_vllm_eagle_passes"] = (_synthetic("vllm", agg(speculative=spec_eagle), n=60), [], True)
    runs["spec_sglang_mtp"] = (_synthetic("sglang", agg(speculative=spec_mtp)), [], False)
    runs["spec_trtllm_eagle"] = (_synthetic("trtllm", agg(speculative=spec_eagle)), [], False)
    runs["spec_trtllm_ngram"] = (_synthetic("trtllm", agg(speculative=spec_ngram)), [], False)
    runs["spec_pd_vllm"] = (_mooncake(conv, "vllm", pd(speculative=spec_eagle), requests=200), [], False)
    # KV offload under the prefix cache.
    runs["offload_vllm"] = (_mooncake(conv, "vllm", agg(small_vllm, kv_offload=offload), requests=800), [], False)
    runs["offload_sglang"] = (_mooncake(conv, "sglang", agg(small_sglang, kv_offload=offload), requests=800),
                              [], False)
    runs["offload_vllm_passes"] = (_mooncake(conv, "vllm", agg(small_vllm, kv_offload=offload), requests=150),
                                   [], True)
    runs["offload_pd_sglang"] = (_mooncake(conv, "sglang", pd(kv_offload=offload), requests=300), [], False)
    # A bigger model over several GPUs, and another GPU's fitted profile.
    runs["llama70b_tp4_h200"] = (_synthetic("vllm", agg(tp=4), model="llama-3.1-70b", gpu="h200"), [], False)
    runs["qwen3_235b_sglang_dp"] = (_synthetic("sglang", agg(tp=4, attention_dp=2, ep=8), model="qwen3-235b-a22b",
                                               gpu="h200", n=200), [], False)
    runs["bench_client"] = (None, [("workload.client", {"mode": "bench", "request_rate": 8.0, "burstiness": 0.5,
                                                        "max_concurrency": 48}),
                                   ("workload.max_requests", 600)], False)
    return runs


def run_one(name: str, config, overrides: list, log_passes: bool, out: Path) -> None:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    log = io.StringIO() if log_passes else None
    try:
        result = servesim.simulate(copy.deepcopy(config), overrides=list(overrides), pass_log=log)
    except servesim.ServesimError as err:   # a refusal is an output too
        (folder / "error.txt").write_text(str(err) + "\n")
        return
    summary = {k: v for k, v in result.summary.items() if k not in WALL_CLOCK}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    with open(folder / "requests.csv", "w", encoding="utf-8", newline="") as fh:
        result.requests.write_csv(fh)
    (folder / "config.resolved.yaml").write_text(config_to_yaml(result.config))
    (folder / "warnings.txt").write_text("".join(w + "\n" for w in result.warnings))
    if log is not None:
        (folder / "passes.jsonl").write_text(log.getvalue())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--traces", type=Path, default=Path("/work/shared/traces"))
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    runs = configurations(args.traces)
    if args.list:
        print("\n".join(runs))
        return 0
    names = args.only or list(runs)
    start = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        run_one(name, *runs[name], args.out)
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print(f"{len(names)} configurations in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
