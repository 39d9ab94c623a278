"""TensorRT-LLM's capacity and micro-batch scheduling (docs/modeling/trtllm.md), hand-checked.

Fixed 10 ms passes, 4-token KV blocks, overlap off unless a test is about it.
"""

from __future__ import annotations

from tests.support.runs import run_backend

SYNC = {"disable_overlap_scheduler": True, "tokens_per_block": 4, "max_seq_len": 64, "max_tokens": 400}


def trtllm(tmp_path, rows, **scheduler):
    return run_backend(tmp_path, rows, "trtllm", {**SYNC, **scheduler})


def test_guaranteed_no_evict_refuses_what_max_utilization_admits(tmp_path):
    # A pool of 80 tokens = 20 blocks. R1 and R2 each need 8 + 40 = 48 tokens = 12 blocks to
    # complete. GUARANTEED_NO_EVICT admits R1 (12 <= 20 free) and keeps 12 - 2 = 10 blocks
    # promised to it; R2's 12 > 20 - 2 - 10 = 8 free-and-unpromised, so R2 waits until R1
    # finishes (its 40th token at 400 ms) and runs at 400. MAX_UTILIZATION admits both at
    # once: each step only needs its next token's slots.
    rows = [{"timestamp": 0, "input_length": 8, "output_length": 40},
            {"timestamp": 0, "input_length": 8, "output_length": 40}]
    guaranteed = trtllm(tmp_path, rows, max_tokens=80)
    greedy = trtllm(tmp_path, rows, max_tokens=80, capacity_scheduler_policy="MAX_UTILIZATION")
    assert guaranteed.schedule()[0] == {0: 8}
    assert guaranteed.ms(1, "first_scheduled") == 400.0
    assert greedy.schedule()[0] == {0: 8, 1: 8}
    assert guaranteed.result.summary["preemptions"] == 0


def test_max_utilization_pauses_the_newest_on_a_shortage(tmp_path):
    # Same two requests under MAX_UTILIZATION: both hold 2 blocks after their prompts and grow
    # one token a pass. Token positions 8 + n need ceil((8 + n + 1) / 4) blocks each; the 20
    # blocks run out when both need their 11th block, at position 40 (n = 32, the pass at
    # 330 ms): R2, started last, is paused (KV freed) and, once R1 finishes, recomputes its
    # prompt and the 33 tokens it had generated (block reuse off: nothing of it stays cached).
    rows = [{"timestamp": 0, "input_length": 8, "output_length": 40},
            {"timestamp": 0, "input_length": 8, "output_length": 40}]
    greedy = trtllm(tmp_path, rows, max_tokens=80, capacity_scheduler_policy="MAX_UTILIZATION",
                    enable_block_reuse=False)
    paused = [p for p in greedy.passes if p["preempted"]]
    assert [(p["start_ms"], p["preempted"]) for p in paused] == [(330.0, [1])]
    assert greedy.by_id[1].preemptions == 1 and greedy.by_id[0].preemptions == 0
    assert greedy.schedule()[40] == {1: 41}     # at 400 ms, after R1's 40th token
    assert greedy.result.summary["preemptions"] == 1
    assert greedy.by_id[1].output_length == 40


def test_generation_first_then_context_within_max_num_tokens(tmp_path):
    # max_num_tokens 16: R1 decodes (1 token) and R2's 20-token prompt does not fit the 15 left;
    # without chunked context it waits for an iteration with room, which never comes while R1
    # decodes... so its prompt is refused at the frontend instead (longer than max_num_tokens).
    # With chunked context it is cut to whole blocks: 12 tokens, then 8.
    rows = [{"timestamp": 0, "input_length": 8, "output_length": 4},
            {"timestamp": 5, "input_length": 20, "output_length": 2}]
    chunked = trtllm(tmp_path, rows, max_num_tokens=16, enable_chunked_context=True)
    assert chunked.schedule()[:3] == [{0: 8}, {0: 1, 1: 12}, {0: 1, 1: 8}]
    whole = trtllm(tmp_path, rows, max_num_tokens=16)
    assert whole.by_id[1].status == "rejected"


def test_max_batch_size_caps_the_iteration(tmp_path):
    rows = [{"timestamp": 0, "input_length": 4, "output_length": 3} for _ in range(3)]
    run = trtllm(tmp_path, rows, max_batch_size=2)
    assert run.schedule()[:3] == [{0: 4, 1: 4}, {0: 1, 1: 1}, {0: 1, 1: 1}]
    assert run.ms(2, "first_scheduled") == 30.0


def test_overlap_admits_a_busy_engines_arrival_one_pass_later(tmp_path):
    rows = [{"timestamp": 0, "input_length": 8, "output_length": 8},
            {"timestamp": 15, "input_length": 8, "output_length": 2}]
    sync = trtllm(tmp_path, rows)
    overlap = trtllm(tmp_path, rows, disable_overlap_scheduler=False)
    assert sync.ms(1, "first_scheduled") == 20.0
    assert overlap.ms(1, "first_scheduled") == 30.0


def test_block_reuse_serves_a_repeated_prefix(tmp_path):
    rows = [{"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]},
            {"timestamp": 50, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}]
    run = trtllm(tmp_path, rows)
    assert run.by_id[1].cached_tokens == 32
    off = trtllm(tmp_path, rows, enable_block_reuse=False)
    assert off.by_id[1].cached_tokens == 0


def _batch_wait_rows():
    # Request 0 (40 prompt, 8 output) at 0; request 1 (30 prompt, 2 output) at 15, while request
    # 0 generates. Fixed 10 ms iterations, no overlap.
    return [{"timestamp": 0.0, "input_length": 40, "output_length": 8},
            {"timestamp": 15.0, "input_length": 30, "output_length": 2}]


def test_batch_waiting_holds_a_context_while_others_generate(tmp_path):
    # Iterations: [0,10) request 0's context; [10,20) its token 2; at 20 request 1 is waiting
    # with request 0 generating: held for 3 iterations ([20,30), [30,40), [40,50): the count
    # goes 1, 2, 3), released at the 4th (count 3 >= 3): [50,60) has its context with request
    # 0's token 6. TTFT 60 - 15 = 45 ms, against 15 ms (its context in [20,30)) without waiting.
    # Ratio 0.9: 31 tokens never reach 230.4. With the ratio at its default 0, every iteration's
    # tokens reach it, so the timeout alone holds nothing (as upstream).
    sched = {"max_batch_size": 8, "max_num_tokens": 256, "max_tokens": 4096, "max_seq_len": 512,
             "disable_overlap_scheduler": True}
    waits = run_backend(tmp_path, _batch_wait_rows(), "trtllm",
                        {**sched, "batch_wait_timeout_iters": 3, "batch_wait_max_tokens_ratio": 0.9})
    plain = run_backend(tmp_path, _batch_wait_rows(), "trtllm", sched)
    timeout_only = run_backend(tmp_path, _batch_wait_rows(), "trtllm", {**sched, "batch_wait_timeout_iters": 3})
    assert plain.ttft_ms(1) == timeout_only.ttft_ms(1) == 15
    assert waits.ttft_ms(1) == 45
    assert waits.schedule()[2:6] == [{0: 1}, {0: 1}, {0: 1}, {0: 1, 1: 30}]
    assert waits.by_id[0].finish_ns == plain.by_id[0].finish_ns == 80_000_000
    fast = run_backend(tmp_path, _batch_wait_rows(), "trtllm",
                       {**sched, "batch_wait_timeout_iters": 3, "batch_wait_max_tokens_ratio": 0.9}, fast=True)
    assert list(fast.result.requests) == list(waits.result.requests)


def test_batch_waiting_ends_at_the_token_ratio(tmp_path):
    # Ratio 0.1 of 256 = 25.6 tokens: request 1's 30 prompt tokens + 1 generation token reach
    # it at once, so nothing is held (TTFT 15); at ratio 0.2 (51.2) it waits out the timeout.
    sched = {"max_batch_size": 8, "max_num_tokens": 256, "max_tokens": 4096, "max_seq_len": 512,
             "disable_overlap_scheduler": True, "batch_wait_timeout_iters": 3}
    assert run_backend(tmp_path, _batch_wait_rows(), "trtllm",
                       {**sched, "batch_wait_max_tokens_ratio": 0.1}).ttft_ms(1) == 15
    assert run_backend(tmp_path, _batch_wait_rows(), "trtllm",
                       {**sched, "batch_wait_max_tokens_ratio": 0.2}).ttft_ms(1) == 45


def test_batch_waiting_never_holds_without_generation(tmp_path):
    # An idle engine takes a context at once (upstream: no generation requests, no wait).
    rows = [{"timestamp": 0.0, "input_length": 40, "output_length": 2}]
    sched = {"max_batch_size": 8, "max_num_tokens": 256, "max_tokens": 4096, "max_seq_len": 512,
             "disable_overlap_scheduler": True, "batch_wait_timeout_iters": 50, "batch_wait_max_tokens_ratio": 0.9}
    assert run_backend(tmp_path, rows, "trtllm", sched).ttft_ms(0) == 10
