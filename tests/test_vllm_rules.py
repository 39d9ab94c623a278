"""vLLM scheduling rules pinned on small hand-checked cases (fixed 10 ms passes).

Each expected number is derived in the comment above it; the same schedules
were confirmed against vLLM 0.32's own scheduler with the oracle in
../shared/oracle (see tests/parity for the automated comparison).
"""

R0 = {"timestamp": 0.0, "input_length": 16, "output_length": 19}
R1 = {"timestamp": 0.5, "input_length": 16, "output_length": 20}
R2 = {"timestamp": 1.2, "input_length": 8, "output_length": 40}
R3 = {"timestamp": 25.0, "input_length": 40, "output_length": 1}
TINY_KV = dict(block_size=16, num_gpu_blocks=6, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=64)


def test_preemption_sync_small(run):
    r = run([R0, R1, R2, R3], async_scheduling=False, **TINY_KV)
    # 5 usable blocks of 16 (block 0 is vLLM's null block).
    # [0,10): R0 prefills 16 (1 block). [10,20): R0 decodes into a 2nd block, R1 (1 block)
    # and R2 (1 block) are admitted: 4 used. [20,30): R1 takes its 2nd block: 5 used.
    # R2 runs 1@(8+p-2) in pass p, so in pass 10 (at 100 ms) it needs a 2nd block with
    # none free: the last running request, R2 itself, is preempted.
    assert r.pass_at(100)["preempted"] == [2]
    assert 2 not in r.pass_at(100)["scheduled"]
    # Pass 17 (170 ms): R0 1@32 takes a 3rd block, the one R2 freed. Pass 18: R1 1@32
    # needs a 3rd block, none free: R1 preempts itself. R0 gets its 19th token there and
    # finishes at 190.
    assert r.pass_at(180)["preempted"] == [1]
    assert r.by_id[0].finish_ns == 190_000_000
    # At 190 the waiting queue is [R1, R2, R3] (each preemption pushed to the front).
    # R1 has 16 + 17 = 33 tokens; its two full blocks are still cached: hit 32, it
    # recomputes 1 token. R2 has 8 + 9 = 17 tokens; its one full block was evicted when
    # R0 took it at 170: hit 0, it recomputes 17. Then 2 blocks are free and R3 needs 3.
    resumed = r.pass_at(190)
    assert resumed["scheduled"] == {"1": 1, "2": 17}
    assert resumed["prefix_hits"] == {"1": 32, "2": 0}
    # The newer arrival R3 waits while the preempted ones resume. R1's tokens 18, 19, 20
    # come at 200, 210, 220; its 3 blocks free at 220 and R3 prefills in [220,230):
    # TTFT = 230 - 25 = 205 ms.
    assert r.ttft_ms(3) == 205
    assert [r.by_id[i].preemptions for i in range(4)] == [0, 1, 1, 0]


def test_preemption_async(run):
    r = run([R0, R1, R2, R3], **TINY_KV)
    # Async: R1 and R2 arrive during [0,10) and first run in [20,30), one pass later than
    # in sync, so their block growth shifts by one pass: R2 preempts itself in the pass
    # committed at 100, which runs [110,120) (sync: [100,110)).
    assert r.pass_at(110)["preempted"] == [2]
    # R0's last token is computed in [180,190). The call committed at 180 finds R1 short
    # of a block; R1 preempts itself, and the committed pass is empty. So at 190 the GPU
    # is free right after R0's blocks are released: R1 and R2 resume at 190, as in sync,
    # and the empty call's preemption is reported with this pass.
    resumed = r.pass_at(190)
    assert resumed["preempted"] == [1]
    # R1's second block (tokens 16..31) is cached in async mode only once token 31 is
    # delivered, and it was still in flight when R1 was preempted: the hit is 16 (sync:
    # 32), so R1 recomputes 33 - 16 = 17 tokens.
    assert resumed["scheduled"] == {"1": 17, "2": 17}
    assert resumed["prefix_hits"] == {"1": 16, "2": 0}
    # R1's blocks free one pass later than in sync (its outputs lag one pass), so R3
    # prefills in [230,240): TTFT = 240 - 25 = 215 ms (sync: 205).
    assert r.ttft_ms(3) == 215


EIGHT = [{"timestamp": 0.1 * i, "input_length": 40, "output_length": 40} for i in range(8)]
EIGHT_KV = dict(block_size=16, num_gpu_blocks=20, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=128)


def test_preempted_requests_resume_ahead_of_newer_arrivals_sync(run):
    r = run(EIGHT, async_scheduling=False, **EIGHT_KV)
    # 19 usable blocks; a 40-token prompt needs 3. [0,10): R0 alone (the others arrive
    # during it). [10,20): R0 decodes, R1..R5 are admitted (15 blocks, 1 left), R6 and
    # R7 wait: the whole prompt must fit (head-of-line, admission never preempts).
    assert r.schedule()[1] == {0: 1, 1: 40, 2: 40, 3: 40, 4: 40, 5: 40}
    # A request needs its 4th block when it has 48 tokens computed: R0 in pass 9 (takes
    # the last block), R1..R5 in pass 10: R1 preempts R5 (3 freed), R1, R2, R3 take one
    # each, R4 finds none and preempts itself.
    assert r.pass_at(100)["preempted"] == [5, 4]  # in preemption order
    assert r.pass_at(100)["scheduled"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    # 5th block at 64 computed: R0 in pass 25, R1 and R2 in pass 26, R3 preempts itself.
    assert r.pass_at(260)["preempted"] == [3]
    # R0 finishes at 400 (token 40 in pass 39). Waiting: [R3, R4, R5, R6, R7].
    # R3 has 40 + 25 = 65 tokens, its 4 full blocks still cached: hit 64, recompute 1.
    # R4 has 40 + 9 = 49; its 3 cached blocks were evicted by R0, R1, R2's growth in
    # passes 25-26: hit 0, recompute 49 and take the last 4 free blocks.
    resumed = r.pass_at(400)
    assert resumed["scheduled"] == {"1": 1, "2": 1, "3": 1, "4": 49}
    assert resumed["prefix_hits"] == {"3": 64, "4": 0}
    # The newer R6 and R7 (arrived at 0.6 and 0.7 ms) get in only at 410, behind R5.
    assert r.pass_at(410)["prefix_hits"] == {"5": 0, "6": 0, "7": 0}
    assert r.by_id[6].first_scheduled_ns == 410_000_000


def test_preempted_requests_resume_async(run):
    r = run(EIGHT, **EIGHT_KV)
    # Async shifts everything that follows a request's arrival by one pass ([10,20) is
    # committed before R1..R5 are read, so they start in [20,30)), and a finishing
    # request's blocks are free only for the pass committed after its outputs: the
    # preemptions come at 110 and 270, and the resumes at 410 (sync: 100, 260, 400).
    assert r.pass_at(110)["preempted"] == [5, 4]
    assert r.pass_at(270)["preempted"] == [3]
    resumed = r.pass_at(410)
    # R3's 4th block was not cached yet (async caches a block when its last token is
    # delivered): hit 48, recompute 65 - 48 = 17.
    assert resumed["prefix_hits"] == {"3": 48, "4": 0}
    assert resumed["scheduled"] == {"1": 1, "2": 1, "3": 17, "4": 49}
    assert r.by_id[6].first_scheduled_ns == 430_000_000


def test_prefix_cache_hit_and_shorter_ttft(run):
    # Two requests share hash_ids [1, 2] with trace blocks of 32 tokens: prompts of 80
    # tokens whose first 64 come from the shared ids. B arrives after A's prefill.
    a = {"timestamp": 0.0, "input_length": 80, "output_length": 2, "hash_ids": [1, 2, 10]}
    b = {"timestamp": 30.5, "input_length": 80, "output_length": 2, "hash_ids": [1, 2, 20]}
    r = run([a, b], config_extra={"workload.trace_block_size": 32}, async_scheduling=False,
            block_size=16, max_num_batched_tokens=64, max_num_seqs=4)
    # A: budget 64 → chunks 64 [0,10) and 16 [10,20) (token 1), decode [20,30): done at 30.
    assert r.schedule()[:3] == [{0: 64}, {0: 16}, {0: 1}]
    # B arrives at an idle engine and hits the 4 blocks (64 tokens) holding the shared
    # ids' tokens, so it computes only 16: one pass [30.5,40.5) → TTFT 10 ms, versus
    # A's 20 ms for two passes.
    assert r.by_id[1].cached_tokens == 64
    assert r.by_id[0].cached_tokens == 0
    assert r.schedule()[3] == {1: 16}
    assert r.ttft_ms(1) == 10
    assert r.ttft_ms(0) == 20
    # Prefix-cache hit rate = 64 / (80 + 80).
    assert r.result.summary["prefix_cache_hit_rate"] == 64 / 160


def test_shared_partial_last_trace_block(run):
    # trace_block_size 20 with block_size 16: hash_ids [7, 8] cover 40 tokens. A and B
    # both have 40-token prompts made only of those ids, including the partial block
    # 32..39 of id 8 (only full engine blocks are cached: blocks 0 and 1, tokens 0..31).
    a = {"timestamp": 0.0, "input_length": 40, "output_length": 1, "hash_ids": [7, 8]}
    b = {"timestamp": 20.5, "input_length": 40, "output_length": 1, "hash_ids": [7, 8]}
    # C shares only id 7 (tokens 0..19): just engine block 0 (0..15) is equal.
    c = {"timestamp": 40.5, "input_length": 40, "output_length": 1, "hash_ids": [7, 9]}
    # D's prompt is cut to 36 tokens: blocks 0 and 1 still equal A's.
    d = {"timestamp": 60.5, "input_length": 36, "output_length": 1, "hash_ids": [7, 8]}
    r = run([a, b, c, d], config_extra={"workload.trace_block_size": 20}, async_scheduling=False)
    assert [r.by_id[i].cached_tokens for i in range(4)] == [0, 32, 16, 32]


def test_chunked_prefill_small_budget(run):
    # Budget 64: a 150-token prompt runs in chunks 64 [0,10), 64 [10,20), 22 [20,30);
    # only the last chunk samples, so the first token comes at 30.
    # A second request arriving at 12.5 is admitted into the leftover budget of pass 2
    # (64 - 22 = 42 of its 50 tokens) and finishes its prompt (8) in [30,40).
    rows = [{"timestamp": 0.0, "input_length": 150, "output_length": 3},
            {"timestamp": 12.5, "input_length": 50, "output_length": 2}]
    r = run(rows, async_scheduling=False, max_num_batched_tokens=64, max_num_seqs=4)
    assert r.schedule()[:4] == [{0: 64}, {0: 64}, {0: 22, 1: 42}, {0: 1, 1: 8}]
    assert r.ttft_ms(0) == 30
    assert r.ttft_ms(1) == 40 - 12.5


def test_long_prefill_threshold_applies_only_with_company(run):
    # Threshold 32: alone, a 100-token prompt takes the whole budget (64, then 36).
    alone = run([{"timestamp": 0.0, "input_length": 100, "output_length": 1}], async_scheduling=False,
                max_num_batched_tokens=64, max_num_seqs=4, long_prefill_token_threshold=32)
    assert alone.schedule() == [{0: 64}, {0: 36}]
    # With a second request waiting, each prompt chunk is capped at 32.
    pair = run([{"timestamp": 0.0, "input_length": 100, "output_length": 1},
                {"timestamp": 0.0, "input_length": 100, "output_length": 1}], async_scheduling=False,
               max_num_batched_tokens=64, max_num_seqs=4, long_prefill_token_threshold=32)
    assert pair.schedule()[0] == {0: 32, 1: 32}


def test_chunked_prefill_disabled_stops_admission(run):
    # Budget 128, chunking off: A (100 tokens) is admitted; B (100) does not fit the
    # remaining 28 and stops admission instead of being chunked, so it runs in pass 1
    # next to A's decode.
    rows = [{"timestamp": 0.0, "input_length": 100, "output_length": 2},
            {"timestamp": 0.0, "input_length": 100, "output_length": 1}]
    r = run(rows, async_scheduling=False, enable_chunked_prefill=False, max_num_batched_tokens=128,
            max_model_len=128, max_num_seqs=4)
    assert r.schedule() == [{0: 100}, {0: 1, 1: 100}]


def test_prompt_over_max_model_len_is_rejected_alone(run):
    # max_model_len 64: a 64-token prompt leaves no room for an output token and is
    # refused at the frontend, like a longer one; its neighbours complete. A 60-token
    # prompt asking for 10 tokens is cut to 64 - 60 = 4 (vLLM clamps max_tokens).
    rows = [{"timestamp": 0.0, "input_length": 10, "output_length": 3},
            {"timestamp": 1.0, "input_length": 64, "output_length": 3},
            {"timestamp": 2.0, "input_length": 100, "output_length": 3},
            {"timestamp": 3.0, "input_length": 60, "output_length": 10}]
    r = run(rows, max_model_len=64, num_gpu_blocks=64)
    statuses = [rec.status for rec in r.result.requests]
    assert statuses == ["ok", "rejected", "rejected", "length_capped"]
    assert r.by_id[3].output_length == 4
    assert r.result.summary["failed_requests"] == 2
    assert r.result.summary["completed"] == 2
    assert r.by_id[1].first_token_ns is None


def test_max_num_seqs_caps_running(run):
    rows = [{"timestamp": 0.0, "input_length": 8, "output_length": 3} for _ in range(3)]
    r = run(rows, async_scheduling=False, max_num_seqs=2)
    # Two run [0,10) [10,20) [20,30); the third waits for a slot and prefills at 30.
    assert r.schedule()[0] == {0: 8, 1: 8}
    assert r.ttft_ms(2) == 40
