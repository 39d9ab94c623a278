"""Review RS (branch wS): a fast SGLang run that differs from the reference, found by a seeded
random differential harness (sessions family). Pre-existing: it fails the same way on main
4c5f503, with every FastSglangScheduler override replaced by the reference's and runs off; it
passes when the fast scheduler runs on ReferenceKvCache, so the divergence is in the fast
KvCache (engine/kv/cache.py): multi-turn sessions (carried context), one-token pages, the radix
cache on, overlap on, a small pool that retracts. Left failing on purpose (not xfail)."""

from __future__ import annotations

from tests.support.equivalence import assert_same

POLY = {"kind": "polynomial", "base_ms": 1.0, "per_prefill_token_ms": 0.25, "per_decode_token_ms": 0.5,
        "per_context_token_ms": 0.001, "per_request_ms": 0.0}


def test_review_sessions_on_one_token_pages_match_the_reference():
    sched = {"page_size": 1, "context_length": 1024, "max_total_tokens": 1024, "max_running_requests": 4,
             "chunked_prefill_size": -1, "max_prefill_tokens": 1, "disable_radix_cache": False,
             "disable_overlap_schedule": False, "schedule_policy": "fcfs", "init_new_token_ratio": 0.1,
             "num_reserved_decode_tokens": 0}
    sessions = {"num_sessions": 4, "turns": 5, "input_length": {"min": 14, "max": 22}, "output_length": 33,
                "think_time": {"distribution": "fixed", "seconds": 0.0}, "seed": 35,
                "first_input_length": {"min": 15, "max": 31}}
    config = {"engine": {"backend": "sglang", "timing": POLY, "workers": {"aggregated": {"scheduler": sched}}},
              "workload": {"sessions": sessions, "trace_block_size": 1}}
    assert_same(config)
