"""Prefill/decode disaggregation, timelines computed by hand (fixed 10 ms passes).

Llama-3.1-8B keeps 131,072 bytes of KV per token in bf16 (32 layers × 2 × 8 heads ×
128 × 2 bytes). With a 1 GB/s link (one GPU per worker) and 2 ms of latency, a
100-token prompt moves 13,107,200 bytes in 13.1072 ms + 2 ms = 15.1072 ms.
"""

from __future__ import annotations

import pytest

from tests.support.runs import REQUEST_PATH


def _pd(prefill=None, decode=None, transfer=None, sched=None):
    base = {"num_gpu_blocks": 1000, "max_model_len": 1024, "max_num_seqs": 64, "max_num_batched_tokens": 2048,
            "async_scheduling": False}
    base.update(sched or {})
    return {
        "engine.workers": {
            "prefill": {"count": 1, "scheduler": {**base, **(prefill or {})}},
            "decode": {"count": 1, "scheduler": {**base, **(decode or {})}},
        },
        "engine.kv_transfer": {"bandwidth_gb_s": 1.0, "latency_ms": 2.0, **(transfer or {})},
    }


def _one(run, **kwargs):
    return run([{"timestamp": 0.0, "input_length": 100, "output_length": 5}], config_extra=_pd(**kwargs))


def test_one_request_vllm_convention(run):
    r = _one(run)
    rec = r.by_id[0]
    # Prefill [0,10) on prefill-0 (its token is dropped). Transfer [10, 25.1072). The decode
    # worker admits the request at 25.1072, recomputes the last prompt token and samples the
    # first token: [25.1072, 35.1072). Tokens 2..5 follow every 10 ms: finish at 75.1072.
    assert rec.worker == "decode-0" and rec.prefill_worker == "prefill-0"
    assert rec.transfer_start_ns == 10_000_000
    assert rec.transfer_end_ns == 25_107_200
    assert rec.transfer_bytes == 100 * 131072
    assert r.ttft_ms(0) == pytest.approx(35.1072)
    assert rec.e2e_ns == 75_107_200
    assert rec.output_length == 5


def test_one_request_first_token_from_prefill(run):
    r = _one(run, transfer={"first_token_from": "prefill"})
    rec = r.by_id[0]
    # The client sees the prefill worker's token at 10. The decode worker holds the whole
    # prompt's KV and decodes tokens 2..5 from 25.1072: [25.1072,35.1072) ... finish 65.1072.
    assert r.ttft_ms(0) == 10
    assert rec.e2e_ns == 65_107_200
    assert rec.output_length == 5


def test_decode_back_pressure(run):
    # The decode worker has 13 usable blocks of 16 tokens. Request 0 (100 prompt, 40 output)
    # reserves ceil(100/16) = 7 blocks there at 10; request 1 (100 prompt) is prefilled in
    # [10,20) but needs 7 more blocks while only 6 are free, so its transfer waits and the
    # prefill worker keeps holding its blocks.
    rows = [{"timestamp": 0.0, "input_length": 100, "output_length": 40},
            {"timestamp": 1.0, "input_length": 100, "output_length": 2}]
    r = run(rows, config_extra=_pd(decode={"num_gpu_blocks": 14, "max_model_len": 200}))
    first, second = r.by_id[0], r.by_id[1]
    # Request 0: transfer [10, 25.1072), then 40 passes of 10 ms (the first recomputes its last
    # prompt token and samples token 1): finished at 25.1072 + 400 = 425.1072, freeing its blocks.
    assert first.finish_ns == 425_107_200
    assert second.transfer_start_ns == first.finish_ns
    assert second.transfer_end_ns == first.finish_ns + 15_107_200
    # Then two decode passes for its 2 tokens.
    assert second.finish_ns == second.transfer_end_ns + 20_000_000
    assert second.ttft_ns == second.transfer_end_ns + 10_000_000 - 1_000_000


def test_async_admission_on_a_prefill_worker(run):
    # Budget 200. Request 0 (250 tokens) arrives at 0: chunks of 200 [0,10) and 50 [10,20).
    # Request 1 (50 tokens) arrives at 5, during the first chunk.
    rows = [{"timestamp": 0.0, "input_length": 250, "output_length": 2},
            {"timestamp": 5.0, "input_length": 50, "output_length": 2}]
    sync = run(rows, config_extra=_pd(sched={"max_num_batched_tokens": 200, "max_num_seqs": 8}))
    # Synchronous: read at 10, it shares [10,20) with the last chunk: transfer from 20.
    assert sync.by_id[1].transfer_start_ns == 20_000_000
    asyn = run(rows, config_extra=_pd(prefill={"async_scheduling": True},
                                      sched={"max_num_batched_tokens": 200, "max_num_seqs": 8}))
    # Async: [10,20) was committed at 0 with the last chunk alone; request 1 is read at 10 and
    # committed behind it: [20,30), transfer from 30, one pass later.
    assert asyn.by_id[1].transfer_start_ns == 30_000_000
    assert asyn.by_id[0].transfer_start_ns == sync.by_id[0].transfer_start_ns == 20_000_000


def test_gpus_and_per_role_workers(run):
    r = _one(run)
    summary = r.result.summary
    assert summary["gpus"] == 2
    assert [w["worker"] for w in summary["workers"]] == ["prefill-0", "decode-0"]


def test_sglang_decode_keeps_room_for_running_requests(tmp_path):
    """Found by an explore draw of the differential test (it stalled before the decode reserve).

    A 136-page decode pool, one running slot.

    Handed-over requests wait behind `max_running_requests` 1 while holding their transferred pages.
    Request 0 (30 + 31 tokens) runs out of pages at its 28th output token, and SGLang never retracts
    its last running request. SGLang's decode-side preallocation keeps a decode reserve per running
    request out of the transfers' reach, so the real engine finishes every request.
    """
    import servesim

    from tests.support.runs import write_trace

    lengths = [(30, 31), (32, 26), (1, 1), (1, 1), (47, 4), (52, 8), (63, 1), (1, 1), (1, 1), (1, 28)]
    times = [0.0, 47.1, 47.1, 47.1, 94.2, 94.2, 94.2, 94.2, 94.2, 94.2]
    rows = [{"timestamp": t, "input_length": a, "output_length": b} for t, (a, b) in zip(times, lengths)]
    trace = write_trace(tmp_path / "t.jsonl", rows)
    sched = {"page_size": 1, "context_length": 64, "max_total_tokens": 136, "max_running_requests": 1,
             "chunked_prefill_size": 8, "max_prefill_tokens": 8, "disable_overlap_schedule": True,
             "new_token_ratio_decay": 0.0010033, "num_reserved_decode_tokens": 4}
    result = servesim.simulate({
        "engine": {"backend": "sglang", "timing": {"kind": "fixed", "pass_ms": 10.0},
                   "workers": {"prefill": {"count": 2, "scheduler": dict(sched)},
                               "decode": {"count": 2, "scheduler": dict(sched)}},
                   "kv_transfer": {"bandwidth_gb_s": 50.0, "latency_ms": 0.5, "first_token_from": "prefill"}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": {"mode": "open_loop"},
                     "trace_block_size": 8},
    })
    # Request 6 (63 prompt tokens in a 64-token context) has no room for output and fails.
    assert result.summary["completed"] == len(lengths) - 1
    assert result.summary["failed_requests"] == 1


def _sglang_pd(reserve: int, decode_tokens: int = 100, **decode):
    """One SGLang prefill and one decode worker; `decode` overrides the decode worker's settings."""
    sched = {"page_size": 1, "context_length": 100, "max_running_requests": 8, "chunked_prefill_size": 512,
             "max_prefill_tokens": 1024, "disable_overlap_schedule": True, "num_reserved_decode_tokens": reserve}
    return {
        "engine.backend": "sglang",
        "engine.workers": {
            "prefill": {"count": 1, "scheduler": {**sched, "max_total_tokens": 1000}},
            "decode": {"count": 1, "scheduler": {**sched, "max_total_tokens": decode_tokens, **decode}},
        },
        "engine.kv_transfer": {"bandwidth_gb_s": 1.0, "latency_ms": 2.0, "first_token_from": "prefill"},
    }


def test_sglang_decode_reserve_holds_back_transfers(run):
    rows = [{"timestamp": 0.0, "input_length": 40, "output_length": 10},
            {"timestamp": 1.0, "input_length": 40, "output_length": 10}]
    r = run(rows, config_extra=_sglang_pd(reserve=20))
    a, b = r.by_id[0], r.by_id[1]
    # A 100-token decode pool, 20 decode tokens reserved per admitted request. A is prefilled
    # in [0,10); nothing is admitted on the decode side, so its 40 prompt pages + 20 reserved
    # fit (60 <= 100): transfer from 10, 40 × 131,072 bytes at 1 GB/s + 2 ms = 7.24288 ms.
    assert a.transfer_start_ns == 10_000_000
    assert a.transfer_end_ns == 17_242_880
    # B is prefilled in [10,20). A holds 40+ pages, so at most 60 are free, and A's reserve
    # takes 20 of them: 40 < 40 + 20. B waits, holding its prefill pages, until A finishes and
    # frees its pages: A decodes tokens 2..10 in 9 passes from 17.24288, done at 107.24288.
    assert a.finish_ns == 107_242_880
    assert b.transfer_start_ns == a.finish_ns
    # Without the reserve, the 40 pages B needs are free at 20.
    r = run(rows, config_extra=_sglang_pd(reserve=0))
    assert r.by_id[1].transfer_start_ns == 20_000_000


def test_sglang_decode_keeps_a_running_requests_whole_output(run):
    # Reserve 0: what remains is the rule that one running request can always grow to its
    # whole output. A (40 prompt + 50 output) runs alone on the 100-page decode pool; its
    # first decode pass there is [17.24288, 27.24288) (transfer as in the test above).
    rows = [{"timestamp": 0.0, "input_length": 40, "output_length": 50},
            {"timestamp": 1.0, "input_length": 40, "output_length": 10}]
    r = run(rows, config_extra=_sglang_pd(reserve=0))
    a, b = r.by_id[0], r.by_id[1]
    # From B's handoff at 20, after k more A passes: A holds 41 + k pages (59 - k free) and
    # has 41 + k retractable tokens, so it may still need 90 - (41 + k) = 49 - k: B may take
    # 59 - k - (49 - k) = 10 pages, fewer than its 40, until A finishes. A's tokens 2..50 take
    # 49 passes: done at 17.24288 + 490 = 507.24288, and B's transfer starts then.
    assert a.finish_ns == 507_242_880
    assert b.transfer_start_ns == a.finish_ns


def test_sglang_decode_request_slots(run):
    # max_running_requests 1 on the decode worker: 1 running slot plus 2 for requests whose KV
    # is on its way or waiting (SGLang pre-allocates twice the slots when the limit is <= 32).
    rows = [{"timestamp": 0.0, "input_length": 10, "output_length": 20} for _ in range(4)]
    r = run(rows, config_extra=_sglang_pd(reserve=0, max_running_requests=1))
    # All four prompts share the prefill pass [0,10). Three transfers start at 10 (10 tokens:
    # 1.31072 ms + 2 ms, done at 13.31072); the fourth waits for a slot. Request 0 decodes
    # tokens 2..20 in 19 passes from 13.31072, finishing at 203.31072: its slot frees then.
    assert [r.by_id[i].transfer_start_ns for i in range(3)] == [10_000_000] * 3
    assert r.by_id[0].finish_ns == 203_310_720
    assert r.by_id[3].transfer_start_ns == r.by_id[0].finish_ns


def test_sglang_decode_worker_has_no_radix_cache_by_default(run):
    # SGLang's decode server runs a chunk cache unless its radix cache is asked for, so a
    # shared prefix is transferred again. A and B share 32 of their 40 prompt tokens (two trace
    # blocks of 16); B's transfer is reserved at 20, after A's KV arrived at 17.24288.
    rows = [{"timestamp": 0.0, "input_length": 40, "output_length": 10, "hash_ids": [1, 2]},
            {"timestamp": 1.0, "input_length": 40, "output_length": 10, "hash_ids": [1, 2]}]
    r = run(rows, config_extra={**_sglang_pd(reserve=0, decode_tokens=200), "workload.trace_block_size": 16})
    assert r.by_id[1].transfer_bytes == 40 * 131_072
    assert r.result.config.engine.workers.decode.scheduler.disable_radix_cache is True
    assert r.result.config.engine.workers.prefill.scheduler.disable_radix_cache is False
    # With the decode radix cache on, only the 8 tokens past the cached prefix move.
    r = run(rows, config_extra={**_sglang_pd(reserve=0, decode_tokens=200, disable_radix_cache=False),
                                "workload.trace_block_size": 16})
    assert r.by_id[1].transfer_bytes == 8 * 131_072


def _busy_decode_handoff(run, admission=None, decode_async=True):
    # Request 0 (100 prompt, 10 output) at 0: prefill [0,10), transfer [10, 25.1072); the decode
    # worker, idle, admits it at 25.1072: its first token [25.1072, 35.1072), then a token every
    # 10 ms. Request 1 (100 prompt) at 12: prefill [12,22), transfer [22, 37.1072), landing while
    # the decode pass [35.1072, 45.1072) runs.
    rows = [{"timestamp": 0.0, "input_length": 100, "output_length": 10},
            {"timestamp": 12.0, "input_length": 100, "output_length": 2}]
    transfer = {} if admission is None else {"handoff_admission": admission}
    return run(rows, config_extra=_pd(decode={"async_scheduling": decode_async}, transfer=transfer))


def test_handoff_joins_a_busy_decode_workers_next_pass(run):
    # Synchronous: the call at 45.1072 admits request 1: first token [45.1072, 55.1072), TTFT
    # 55.1072 - 12 = 43.1072. Async scheduling gives the same by default (the contract).
    sync = _busy_decode_handoff(run, decode_async=False)
    asyn = _busy_decode_handoff(run)
    assert sync.by_id[1].transfer_end_ns == asyn.by_id[1].transfer_end_ns == 37_107_200
    assert sync.ttft_ms(1) == pytest.approx(43.1072)
    assert asyn.ttft_ms(1) == pytest.approx(43.1072)
    assert asyn.by_id[0].finish_ns == sync.by_id[0].finish_ns == 125_107_200   # 25.1072 + 10 passes of 10


def test_handoff_after_the_committed_pass_as_vllm_033(run):
    # vLLM 0.33 under async scheduling: [45.1072, 55.1072) was committed at 35.1072, before the
    # handoff landed, so request 1 joins the pass after it: [55.1072, 65.1072), TTFT 53.1072.
    late = _busy_decode_handoff(run, admission="after_committed")
    assert late.ttft_ms(1) == pytest.approx(53.1072)
    # Without async scheduling the setting changes nothing.
    assert _busy_decode_handoff(run, "after_committed", decode_async=False).ttft_ms(1) == pytest.approx(43.1072)




def test_proxy_hop_before_the_decode_side_pulls(run):
    # Request path (1 + 0.5 ms + 100 × 10 µs in, 0.25 out): the prefill worker sees the request
    # at 2.5 and prefills [2.5, 12.5). vLLM's proxy then relays the response (0.25) and asks the
    # decode server (1 + 0.5 + 1): 2.75 ms before the 15.1072 ms transfer ends at 30.3572; the
    # decode pass [30.3572, 40.3572); the client reads the token 0.25 later: TTFT 40.6072 =
    # path 2.75 + queue 0 + prefill 10 + transfer (and the decode's first pass) 27.8572.
    r = run([{"timestamp": 0.0, "input_length": 100, "output_length": 5}],
            config_extra={**_pd(), "engine.request_path": REQUEST_PATH})
    rec = r.by_id[0]
    assert (rec.transfer_start_ns, rec.transfer_end_ns) == (12_500_000, 30_357_200)
    assert r.ttft_ms(0) == pytest.approx(40.6072)
    # SGLang's mini_lb sends the request to both servers at once: no hop.
    from servesim.engine.registry import get_backend
    from servesim.engine.request_path import RequestPath

    costs = get_backend("vllm").request_path
    # vLLM: 0.3 out + 0.5 HTTP + 0.3 hop (no broadcast on vLLM) = 1.1 ms, and 100 tokens × 1.5 µs.
    path = RequestPath.build(costs, tp=1, per_token_ns=1500, tokenization_ms=None, handoff_tp=8)
    assert path.handoff_ns(100) == 1_100_000 + 150_000
    assert (get_backend("vllm").pd_proxy_sequential, get_backend("trtllm").pd_proxy_sequential,
            get_backend("sglang").pd_proxy_sequential) == (True, True, False)


def test_no_hop_without_a_request_path(run):
    rec = _one(run).by_id[0]
    assert rec.transfer_end_ns - rec.transfer_start_ns == 15_107_200
