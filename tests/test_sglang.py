"""SGLang's scheduling rules (docs/modeling/sglang.md), each on a small hand-checked case.

Fixed 10 ms passes; `disable_overlap_schedule: true` unless a test is about the overlap loop.
"""

from __future__ import annotations

from servesim.engine.kv.cache import KvCache
from servesim.engine.request import Request
from servesim.engine.sglang.scheduler import SglangScheduler

from tests.support.runs import run_backend

SYNC = {"disable_overlap_schedule": True, "context_length": 4096, "max_total_tokens": 10_000,
        "chunked_prefill_size": 4096}


def sglang(tmp_path, rows, **scheduler):
    return run_backend(tmp_path, rows, "sglang", {**SYNC, **scheduler})


# ---------------------------------------------------------------------- policies


def test_lpm_serves_the_longest_cached_prefix_first(tmp_path):
    # A (two 16-token trace blocks, hashes 1 and 2) runs alone at t=0 and finishes after one
    # token, leaving its 32-token prompt in the radix tree. B (no shared prefix, 40 tokens) and
    # C (hashes 1, 2, 3: 32 cached + 8 new) arrive during A's pass. max_prefill_tokens 30 lets
    # one of them into the pass starting at 10 ms: the first admitted may exceed the cap, the
    # next stops it. fcfs admits B first (40 >= 30 - 40 after it), C runs at 20 ms; lpm sorts
    # C (32 matched tokens) ahead of B: C runs at 10 ms (extend 8), then B cannot fit in
    # 30 - 8 = 22 tokens and runs at 20 ms.
    rows = [
        {"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 5, "input_length": 40, "output_length": 1, "hash_ids": [7, 8, 9]},
        {"timestamp": 6, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]},
    ]
    fcfs = sglang(tmp_path, rows, max_prefill_tokens=30, schedule_policy="fcfs")
    lpm = sglang(tmp_path, rows, max_prefill_tokens=30, schedule_policy="lpm")
    assert fcfs.schedule() == [{0: 32}, {1: 40}, {2: 8}]
    assert lpm.schedule() == [{0: 32}, {2: 8}, {1: 40}]
    assert lpm.by_id[2].cached_tokens == 32 and lpm.ms(2, "first_token") == 20.0
    assert fcfs.ms(2, "first_token") == 30.0


def test_lpm_falls_back_to_fcfs_on_a_long_queue(tmp_path):
    # 129 waiting requests (> 128): SGLang stops sorting by prefix and serves arrival order.
    rows = [{"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]}]
    rows += [{"timestamp": 5, "input_length": 40, "output_length": 1, "hash_ids": [100 + i, 200 + i, 300 + i]}
             for i in range(128)]
    rows.append({"timestamp": 6, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]})
    lpm = sglang(tmp_path, rows, max_prefill_tokens=30, schedule_policy="lpm")
    assert lpm.schedule()[1] == {1: 40}


def test_prefill_and_decode_are_separate_passes(tmp_path):
    # B arrives while A decodes: the next pass prefills B alone (A's decode waits), then both decode.
    rows = [{"timestamp": 0, "input_length": 20, "output_length": 4},
            {"timestamp": 15, "input_length": 30, "output_length": 2}]
    run = sglang(tmp_path, rows)
    assert run.schedule() == [{0: 20}, {0: 1}, {1: 30}, {0: 1, 1: 1}, {0: 1}]
    mixed = sglang(tmp_path, rows, enable_mixed_chunk=True)
    # Mixed chunked prefill: A's decode token rides along with B's prompt.
    assert mixed.schedule() == [{0: 20}, {0: 1}, {1: 30, 0: 1}, {0: 1, 1: 1}]


# ---------------------------------------------------------------------- new_token_ratio


def test_every_request_slot_is_used_in_one_prefill_pass(tmp_path):
    # max_running_requests 4 and four 100-token prompts at t=0: one prefill pass [0,10)
    # admits all four (SGLang admits while len(can_run_list) < max_running_requests - running).
    # Counting admitted requests twice let only two in, and set the batch full until one
    # finished (the other two waited 3 passes).
    rows = [{"timestamp": 0, "input_length": 100, "output_length": 3} for _ in range(4)]
    r = sglang(tmp_path, rows, max_running_requests=4)
    assert r.schedule()[0] == {0: 100, 1: 100, 2: 100, 3: 100}
    assert [r.ttft_ms(i) for i in range(4)] == [10, 10, 10, 10]
    # With 3 slots the fourth waits for a finish: requests 0-2 end at 30 (tokens at 10, 20,
    # 30), then [30,40) prefills request 3.
    r = sglang(tmp_path, rows, max_running_requests=3)
    assert r.schedule()[0] == {0: 100, 1: 100, 2: 100}
    assert r.ttft_ms(3) == 40


def _request(request_id, prompt, output):
    return Request(request_id, 0, 0, prompt, output, output, None)


def _scheduler(pool_tokens, **kwargs):
    kv = KvCache(num_gpu_blocks=pool_tokens + 1, block_size=1, enable_caching=False, max_model_len=4096,
                 full_sequence_admission=False)
    settings = dict(max_running_requests=64, chunked_prefill_size=4096, max_prefill_tokens=16384,
                    schedule_policy="fcfs", enable_mixed_chunk=False, init_new_token_ratio=0.7,
                    min_new_token_ratio=0.3, new_token_ratio_decay=0.1, max_model_len=4096, overlap=False)
    settings.update(kwargs)
    return SglangScheduler(kv, **settings)


def _step(scheduler):
    from servesim.engine.passes import PassResult

    decided = scheduler.schedule()
    scheduler.update_from_output(PassResult(decided, 0, 0))
    return {e.request.request_id: e.tokens for e in decided.entries}


def test_new_token_ratio_decays_per_decode_pass_and_resets_when_idle():
    scheduler = _scheduler(1000)
    scheduler.add_request(_request(0, 4, 7))
    ratios = []
    for _ in range(7):
        _step(scheduler)
        ratios.append(round(scheduler.new_token_ratio, 9))
    # Pass 1 prefills (no decay); passes 2..7 decode: 0.7 - 0.1 per pass, floored at 0.3.
    assert ratios == [0.7, 0.6, 0.5, 0.4, 0.3, 0.3, 0.3]
    assert not scheduler.has_unfinished()
    scheduler.schedule()   # an idle iteration
    assert scheduler.new_token_ratio == 0.7


def test_admission_reserves_running_decodes_at_the_ratio():
    # Pool 200 tokens. R1 (10 in, 100 out) is prefilled first; then R2 (10 in, 100 out) asks for
    # its whole prompt + max new tokens at ratio 1: 110 tokens, against free 190 minus R1's
    # remaining 99 outputs × ratio. At 0.7: 190 - 69.3 = 120.7 > 110, admitted. At 0.9:
    # 190 - 89.1 = 100.9 <= 110: refused, and the batch stays marked full, so R1 decodes.
    for ratio, second_pass in ((0.7, {1: 10}), (0.9, {0: 1})):
        scheduler = _scheduler(200, init_new_token_ratio=ratio, min_new_token_ratio=0.1)
        scheduler.add_request(_request(0, 10, 100))
        assert _step(scheduler) == {0: 10}
        scheduler.add_request(_request(1, 10, 100))
        assert _step(scheduler) == second_pass
        assert scheduler.batch_is_full == (ratio == 0.9)


def test_retraction_frees_the_fewest_generated_and_raises_the_ratio(tmp_path):
    # Pool 80 tokens, ratio pinned at 0.2. R1 (10 in, 40 out) prefills at 0-10, decodes at
    # 10-20. R2 (10 in, 40 out) arrives at 15; at 20: 50 < (80 - 11) - 38 × 0.2 = 61.4, so
    # it prefills at 20-30 (R1 holds 11 tokens, R2 10). Both decode at 30-40 (23 used, 57
    # free), then 2 tokens a pass: before the pass at 40 + 10j, 57 - 2j are free, and at
    # j = 28 (320 ms) the pass needs 2 > 1. R2 (30 tokens generated; R1 has 31) is retracted
    # and R1 decodes alone. The ratio becomes min(1, (31 + 20) / (40 + 1)) = 1. R2 re-queues
    # (prompt + 30 generated = 40 tokens to recompute), cannot be admitted until R1 finishes
    # (32 tokens at 330 ms, its 40th at 410 ms), then re-prefills at 410-420 (token 31) and
    # decodes its last 9 tokens by 510 ms.
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 40},
            {"timestamp": 15, "input_length": 10, "output_length": 40}]
    run = sglang(tmp_path, rows, max_total_tokens=80, context_length=64, init_new_token_ratio=0.2, min_new_token_ratio=0.2,
                 disable_radix_cache=True)
    retracting = [p for p in run.passes if p["preempted"]]
    assert [(p["start_ms"], p["preempted"], p["scheduled"]) for p in retracting] == [(320.0, [1], {"0": 1})]
    assert run.by_id[0].preemptions == 0 and run.ms(0, "finish") == 410.0
    assert run.by_id[1].preemptions == 1
    assert {1: 40} in run.schedule()
    assert run.ms(1, "finish") == 510.0
    assert run.by_id[1].output_length == 40


def test_retraction_sets_the_ratio_from_what_remains():
    scheduler = _scheduler(80, init_new_token_ratio=0.2, min_new_token_ratio=0.2)
    scheduler.add_request(_request(0, 10, 40))
    _step(scheduler)
    _step(scheduler)
    scheduler.add_request(_request(1, 10, 40))
    while not scheduler.retractions:
        _step(scheduler)
    assert scheduler.new_token_ratio == 1.0
    assert [r.request_id for r in scheduler.waiting] == [1]


# ---------------------------------------------------------------------- overlap


def test_overlap_admits_a_busy_engines_arrival_one_pass_later(tmp_path):
    # B arrives at 15 ms, during A's second pass (10-20). Without overlap it is read at 20 and
    # prefilled at 20-30. With overlap the pass at 20-30 was already built at 10 (a decode of
    # A), so B is read at 20 and runs at 30-40.
    rows = [{"timestamp": 0, "input_length": 20, "output_length": 8},
            {"timestamp": 15, "input_length": 30, "output_length": 2}]
    sync = sglang(tmp_path, rows)
    overlap = sglang(tmp_path, rows, disable_overlap_schedule=False)
    assert sync.ms(1, "first_scheduled") == 20.0 and sync.ms(1, "first_token") == 30.0
    assert overlap.ms(1, "first_scheduled") == 30.0 and overlap.ms(1, "first_token") == 40.0
    # An idle engine admits at once either way.
    assert overlap.ms(0, "first_scheduled") == 0.0


def test_recv_interval_reads_arrivals_every_few_decode_passes(tmp_path):
    # --scheduler-recv-interval 3: each loop iteration adds the weight of the batch launched
    # last (decode 1, prefill 1000) and reads new requests once the sum reaches 3. A (20/10)
    # alone from 0 ms; B arrives at 15. Sync: the call at 10 follows A's prefill (+1000: reads,
    # nothing there yet, back to 0); at 20 and 30 it follows a decode (1, 2: B waits); at 40
    # (3) it reads B, prefilled at 40-50. Overlap: the call at 10 follows the decode built
    # behind A's prefill (1), at 20 (2), at 30 (3) reads B, whose prefill is built behind the
    # decode running 30-40: 40-50 too. With interval 1, B's prefill runs at 20-30 (sync) or
    # 30-40 (overlap).
    rows = [{"timestamp": 0, "input_length": 20, "output_length": 10},
            {"timestamp": 15, "input_length": 30, "output_length": 2}]
    sync = sglang(tmp_path, rows, scheduler_recv_interval=3)
    assert sync.schedule()[:6] == [{0: 20}, {0: 1}, {0: 1}, {0: 1}, {1: 30}, {0: 1, 1: 1}]
    overlap = sglang(tmp_path, rows, scheduler_recv_interval=3, disable_overlap_schedule=False)
    for run in (sync, overlap):
        assert run.ms(1, "first_scheduled") == 40.0 and run.ms(1, "first_token") == 50.0
        assert run.ms(0, "first_scheduled") == 0.0   # an idle engine's loop reads at once
    assert sglang(tmp_path, rows).ms(1, "first_token") == 30.0


def test_recv_interval_reads_at_once_when_nothing_runs(tmp_path):
    # A finishes at 10 (one token); B arrives at 15 to an engine with nothing to run: its loop
    # spins (1 per empty iteration, microseconds each) and reads B at once, prefilled at 15-25.
    rows = [{"timestamp": 0, "input_length": 20, "output_length": 1},
            {"timestamp": 15, "input_length": 30, "output_length": 2}]
    for overlap in (False, True):
        run = sglang(tmp_path, rows, scheduler_recv_interval=30, disable_overlap_schedule=not overlap)
        assert run.ms(1, "first_scheduled") == 15.0 and run.ms(1, "first_token") == 25.0
