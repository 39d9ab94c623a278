"""A retracted SGLang session turn keeps only its prompt in the prefix cache, even where its
content keys go on over its output (found by review RS's seeded differential harness).

A session turn's hash_ids cover its output too (`TraceRequest.content_length`: the next turn
carries it as context), so its shareable blocks reach past its prompt. SGLang's retraction
keeps the prompt's pages cached and releases the decoded ones without inserting them
(`_retract`, `keep_blocks` = the prompt's whole pages). The reference drops the key of every
block past the cut that the request holds alone; the fast KvCache used to keep every shared
block's key up to the shared prefix's end, so a readmission hit its decoded blocks too."""

from __future__ import annotations

from tests.support.equivalence import assert_same

POLY = {"kind": "polynomial", "base_ms": 1.0, "per_prefill_token_ms": 0.25, "per_decode_token_ms": 0.5,
        "per_context_token_ms": 0.001, "per_request_ms": 0.0}


def test_a_retracted_session_turn_keeps_only_its_prompt_cached():
    """Four sessions of five turns on one-token pages, radix cache and overlap on, a pool of
    1024 tokens that retracts. Request 18 (prompt 238 tokens, shareable keys over 271, so
    past its prompt) is retracted with 265 blocks, 264 of them keyed: the reference drops the
    keys of blocks 238 .. 263, which it holds alone, and its readmission hits 238 blocks and
    recomputes the 27 decoded tokens' KV (28 tokens). The fast cache kept those 26 keys, so
    the readmission hit 253 blocks (those still cached by then) and the request finished
    3.75 ms early."""
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
