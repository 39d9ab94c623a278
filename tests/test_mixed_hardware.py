"""Roles on their own GPUs and precisions, and the KV transfer over the link they share.

Llama-3.1-8B keeps 131,072 bytes of KV per token in bf16 (tests/test_disaggregation.py), so a
100-token prompt moves 13,107,200 bytes. With `bandwidth_gb_s: null` a transfer runs over the
scale-out NICs: each TP rank sends its shard over its own, at the slower side's rate, with as
many links in parallel as the smaller side has GPUs. H200 and B200 have 50 GB/s NICs, B300 100.
"""

from __future__ import annotations

import pytest

from servesim.config import load_config
from servesim.config.resolution import resolve
from servesim.errors import ServesimError


def _pd(prefill: dict, decode: dict, **top) -> dict:
    sched = {"num_gpu_blocks": 1000, "max_model_len": 1024, "max_num_seqs": 64, "max_num_batched_tokens": 2048,
             "async_scheduling": False}
    return {"engine.workers": {"prefill": {"count": 1, "scheduler": dict(sched), **prefill},
                               "decode": {"count": 1, "scheduler": dict(sched), **decode}},
            "engine.kv_transfer": {"bandwidth_gb_s": None, "latency_ms": 2.0}, **top}


@pytest.mark.parametrize("prefill, decode, link_ns", [
    # h200 → b300, one GPU each: min(50, 100) GB/s × 1 link: 13,107,200 / 50e9 s = 262,144 ns.
    ({"gpu": "h200-sxm"}, {"gpu": "b300"}, 262_144),
    # h200 tp 2 → b300 tp 2: 50 GB/s × 2 links = 131,072 ns (each rank's shard over its own NIC).
    ({"gpu": "h200-sxm", "tp": 2}, {"gpu": "b300", "tp": 2}, 131_072),
    # b300 tp 2 → b300 tp 4: 100 GB/s × min(2, 4) links = 65,536 ns.
    ({"gpu": "b300", "tp": 2}, {"gpu": "b300", "tp": 4}, 65_536),
])
def test_mixed_gpu_transfer_runs_over_the_slower_nic(run, prefill, decode, link_ns):
    r = run([{"timestamp": 0.0, "input_length": 100, "output_length": 5}], config_extra=_pd(prefill, decode))
    rec = r.by_id[0]
    # Prefill [0,10) ms, then the transfer: its link time plus the 2 ms latency.
    assert rec.transfer_start_ns == 10_000_000
    assert rec.transfer_end_ns == 10_000_000 + link_ns + 2_000_000
    assert rec.transfer_bytes == 100 * 131_072
    roles = r.result.summary["simulated"]["roles"]
    assert roles["prefill"]["gpu"] == prefill["gpu"] and roles["decode"]["gpu"] == decode["gpu"]


def _spec(overrides: dict):
    config = {"model": "llama-3.1-8b", "gpu": "h100-sxm",
              "workload": {"synthetic": {"num_requests": 4, "input_length": 64, "output_length": 8}}}
    return resolve(load_config(config, list(overrides.items())))


def test_each_role_sizes_its_kv_cache_on_its_own_gpu():
    # The same model on H200 (141 GB) for prefill and B200 (180 GB) for decode: the decode
    # worker has more memory left for KV, so more blocks; the top-level gpu stays the run's.
    spec = _spec({"engine.workers": {"prefill": {"gpu": "h200"}, "decode": {"gpu": "b200"}}})
    prefill, decode = spec.roles["prefill"], spec.roles["decode"]
    assert prefill.deployment.gpu.name == "h200-sxm" and decode.deployment.gpu.name == "b200"
    assert decode.scheduler.kv_blocks > prefill.scheduler.kv_blocks
    assert spec.config.engine.workers.prefill.gpu == "h200-sxm"   # the alias resolved
    assert spec.gpu.name == "h100-sxm"


def test_a_role_precision_picks_its_kv_dtype():
    spec = _spec({"engine.workers.aggregated.precision": "fp8"})
    deployment = spec.roles["aggregated"].deployment
    assert deployment.precision == "fp8" and deployment.kv_dtype == "fp8"   # kv_cache_dtype auto


def test_prefill_and_decode_must_share_the_kv_dtype():
    with pytest.raises(ServesimError, match="prefill keeps its KV cache in fp8 and decode in bf16"):
        _spec({"engine.workers": {"prefill": {"precision": "fp8"}, "decode": {}}})
    # An explicit kv_cache_dtype makes both sides the same again.
    spec = _spec({"engine.workers": {"prefill": {"precision": "fp8"}, "decode": {}}, "kv_cache_dtype": "fp8"})
    assert {r.deployment.kv_dtype for r in spec.roles.values()} == {"fp8"}


def test_unknown_role_gpu_is_one_sentence():
    with pytest.raises(ServesimError, match=r"engine.workers.aggregated.gpu: unknown GPU 'h900'"):
        _spec({"engine.workers.aggregated.gpu": "h900"})


def test_the_fleet_line_names_a_role_s_own_hardware():
    from servesim.metrics.table import role_hardware

    spec = _spec({"engine.workers": {"prefill": {"gpu": "h200", "precision": "fp8"}, "decode": {"precision": "fp8"}}})
    roles = spec.config.engine.workers
    assert role_hardware(roles.prefill) == ", h200-sxm, fp8" and role_hardware(roles.decode) == ", fp8"
