"""vLLM at pp > 1: a batch queue of depth pp, passes split into stages, memory per stage.

Fixed 10 ms passes at pp 2: each stage takes 5 ms, and each batch's activations cross the one
stage boundary between them. Llama-3.1-8B (hidden 4096) at tp 1 on an H100 sends 2 tensors ×
4096 × 2 bytes = 16,384 bytes a token over NVLink one way (900 / 2 = 450 GB/s): 16,384 / 450 =
36.4089 ns a token, plus 10 µs a send. So S(n) = 10,000 + round(36.4089 n) ns:
S(1) = 10,036, S(8) = 10,291 (291.27), S(9) = 10,328 (327.68).

A alone (8 prompt tokens, 4 output tokens) runs one batch at a time, as its decode is not
schedulable while its batch is in flight (and the engine blocks on that batch once the second
call finds nothing to schedule):
  pass 0 (8 tokens): stage 1 [0, 5 ms], stage 2 [5.010291, 10.010291]
  pass 1 (1 token):  submitted at 10.010291, ends 10.010291 + 5 + 0.010036 + 5 = 20.020327
  pass 2 (1 token):  ends 30.030363; pass 3: ends 40.040399 (A's 4th token).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from servesim.engine.pipeline import SEND_LATENCY_NS, PipelineStages

A = {"timestamp": 0, "input_length": 8, "output_length": 4}
PP2 = {"engine.workers.aggregated.pp": 2}


def _b(at_ms):
    return {"timestamp": at_ms, "input_length": 8, "output_length": 1}


def _spans(r):
    return [(p["start_ms"], p["end_ms"]) for p in r.passes]


@pytest.fixture
def pp_run(tmp_path):
    from tests.support.runs import run_rows

    def _run(rows, pp=2, **scheduler):
        result = run_rows(tmp_path, rows, config_extra={"engine.workers.aggregated.pp": pp}, **scheduler)
        # The reference scheduler ran (pp > 1 is not the fast engine's), in the pipeline's worker.
        assert result.result.summary["simulated"]["engine"] == "reference"
        return result
    return _run


def test_a_alone_runs_one_batch_at_a_time(pp_run):
    r = pp_run([A])
    assert _spans(r) == [(0.0, 10.010291), (10.010291, 20.020327), (20.020327, 30.030363), (30.030363, 40.040399)]
    assert r.schedule() == [{0: 8}, {0: 1}, {0: 1}, {0: 1}]
    cfg = r.result.config.engine.workers.aggregated
    assert cfg.pp == 2 and cfg.scheduler.async_scheduling is False   # null resolves off at pp > 1
    assert r.result.summary["simulated"]["roles"]["aggregated"]["gpus"] == 2


# (B's arrival in ms, B's first token in ns): the async-admission cases at a queue of two.
TABLE = [
    # Mid-pass 1: the engine is blocked on pass 1 (its second slot found nothing), reads B at
    # pass 1's end and runs A's decode with B's prefill (9 tokens): 20.020327 + 5 ms + S(9)
    # + 5 ms = 30.030655.
    (15, 30_030_655),
    # Exactly at pass 1's end: a reaction to its outputs, read at the next call; both calls at
    # 20.020327 (pass 2, then the empty second slot) read only what came before. B is read at
    # pass 2's end, 30.030363, and joins pass 3: + 5 ms + S(9) + 5 ms = 40.040691.
    (20.020327, 40_040_691),
    # Mid-pass 2: read at its end, the same pass 3.
    (25, 40_040_691),
    # At A's last pass end, 40.040399: nothing is in flight or waiting, so the idle engine reads
    # B at once: 40.040399 + 5 ms + S(8) + 5 ms = 50.050690.
    (40.040399, 50_050_690),
    # Idle engine: 100 ms + 10.010291 ms.
    (100, 110_010_291),
]


@pytest.mark.parametrize("b_at,first_token_ns", TABLE)
def test_admission_table_at_pp_2(pp_run, b_at, first_token_ns):
    r = pp_run([A, _b(b_at)])
    assert r.by_id[1].first_token_ns == first_token_ns
    assert r.by_id[0].first_token_ns == 10_010_291


def test_two_streams_keep_two_batches_in_flight(pp_run):
    # Both arrive at 0 and a budget of 8 tokens fits one prompt per batch. Batch 0 (A) takes
    # stage 1 at [0, 5]; the queue has room, so the engine steps again at once and batch 1 (B)
    # takes stage 1 at [5, 10], stage 2 at [max(10 + S(8), 10.010291), +5] = [10.010291,
    # 15.010291]. The queue is full: the engine blocks on batch 0 (ends 10.010291), then
    # schedules A's decode (B is in flight): stage 1 [10.010291, 15.010291], stage 2 from
    # max(15.010291 + S(1), 15.010291) = 15.020327 to 20.020327; then B's decode, stage 1
    # [15.010291, 20.010291], stage 2 [max(20.020327, 20.020327), 25.020327]; and so on.
    r = pp_run([A | {"output_length": 3}, A | {"output_length": 3}], max_num_batched_tokens=8, max_num_seqs=8)
    assert _spans(r) == [(0.0, 10.010291), (5.0, 15.010291), (10.010291, 20.020327), (15.010291, 25.020327),
                         (20.020327, 30.030363), (25.020327, 35.030363)]
    assert r.schedule() == [{0: 8}, {1: 8}, {0: 1}, {1: 1}, {0: 1}, {1: 1}]
    worker = r.result.summary["workers"][0]
    assert worker["passes"] == 6 and worker["busy_fraction"] == 1.0   # a batch in flight from 0 to the end


def test_a_prompt_s_next_chunk_goes_into_the_next_batch(pp_run):
    # 24 prompt tokens in chunks of 8: chunk 2 is schedulable while chunk 1 is in flight (the
    # scheduler only skips a request whose every known token is scheduled), so it enters stage 1
    # at 5 ms. Chunk 3 waits for room in the queue: batch 0 ends at 10.010291, stage 1 has been
    # free since 10, so [10.010291, 15.010291], then stage 2 from max(15.010291 + S(8),
    # 15.010291) = 15.020582 to 20.020582. The first decode follows at its end: + 10.010036.
    r = pp_run([{"timestamp": 0, "input_length": 24, "output_length": 2}], max_num_batched_tokens=8, max_num_seqs=8)
    assert _spans(r) == [(0.0, 10.010291), (5.0, 15.010291), (10.010291, 20.020582), (20.020582, 30.030618)]
    assert r.schedule() == [{0: 8}, {0: 8}, {0: 8}, {0: 1}]
    assert r.by_id[0].first_token_ns == 20_020_582


def test_pp_4_fills_the_queue_with_four_batches(pp_run):
    # Four one-block prompts at 0, one per batch: 2.5 ms stages, three boundaries of S(8) each.
    # Batch i enters stage 1 at 2.5 i ms and ends 10 ms + 3 S(8) = 10.030873 ms after it.
    rows = [A | {"output_length": 1} for _ in range(4)]
    r = pp_run(rows, pp=4, max_num_batched_tokens=8, max_num_seqs=8)
    assert _spans(r) == [(2.5 * i, 2.5 * i + 10.030873) for i in range(4)]


def test_stage_boundaries_price_the_link_they_cross():
    # tp 8 × pp 2 on H100s (NVLink domains of 8): the boundary into stage 2 leaves the first
    # node, so each rank's 1/8 slice (2,048 bytes a token) crosses its 50 GB/s NIC: 40.96 ns.
    crossing = PipelineStages(2, 8, 8, 4096, 900, 8, 50)
    assert crossing.send_ns(1, 1000) == SEND_LATENCY_NS + 40_960
    # tp 2 × pp 4 fits one domain: NVLink one way, 8,192 bytes / 450 GB/s = 18.204 ns a token.
    inside = PipelineStages(4, 2, 2, 4096, 900, 8, 50)
    assert [inside.send_ns(b, 1000) for b in (1, 2, 3)] == [SEND_LATENCY_NS + 18_204] * 3
    assert inside.stage_ns(10) == 3 and inside.stage_ns(8) == 2   # ceil(duration / pp)


def test_memory_per_stage_halves_weights_and_kv_per_gpu():
    from servesim.hardware import resolve_gpu
    from servesim.hardware.deployment import Deployment
    from servesim.models import resolve_model

    arch = resolve_model("llama-3.1-8b", ".").arch
    gpu = resolve_gpu("h100")
    one, two = (Deployment(arch, gpu, "bf16", "bf16", pp=pp) for pp in (1, 2))
    # KV: 32 layers × 2 × 8 KV heads × 128 × 2 bytes = 131,072 a token; 16 layers a stage at pp 2.
    assert one.kv_bytes_per_token_per_gpu() == 131_072 and two.kv_bytes_per_token_per_gpu() == 65_536
    # Weights: 32 × (41,943,040 attention + 176,160,768 MLP) + 2 × 525,336,576 (embedding and
    # the untied LM head) params at pp 1; at pp 2 a GPU holds 16 layers and one of the two.
    layers = 41_943_040 + 176_160_768
    assert one.weight_bytes_per_gpu() == (32 * layers + 2 * 525_336_576) * 2
    assert two.weight_bytes_per_gpu() == (16 * layers + 525_336_576) * 2
    assert two.num_gpu_blocks(16, 0.9, 8192, 1024) > 2 * one.num_gpu_blocks(16, 0.9, 8192, 1024)
    assert "tp=1, pp=2" in two.placement


@settings(max_examples=12, deadline=None, derandomize=True)
@given(pp=st.sampled_from([2, 3, 4]),
       rows=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 40), st.integers(1, 6)), min_size=1, max_size=8),
       budget=st.sampled_from([8, 16, 64]), blocks=st.sampled_from([12, 1000]))
def test_every_request_is_served_and_at_most_pp_batches_overlap(tmp_path_factory, pp, rows, budget, blocks):
    # 12 blocks of 16 tokens hold under 5 of the longest requests: preemptions under a pipeline.
    from tests.support.runs import run_rows

    trace = [{"timestamp": t, "input_length": n, "output_length": m} for t, n, m in sorted(rows)]
    r = run_rows(tmp_path_factory.mktemp("pp"), trace, config_extra={"engine.workers.aggregated.pp": pp},
                 max_num_batched_tokens=budget, max_num_seqs=8, num_gpu_blocks=blocks, max_model_len=128)
    assert all(rec.finish_ns is not None for rec in r.result.requests)
    assert sorted(rec.output_length for rec in r.result.requests) == sorted(m for _, _, m in rows)
    spans = _spans(r)
    for start, _ in spans:
        assert sum(s <= start < e for s, e in spans) <= pp   # in flight when this one enters stage 1
    ends = [e for _, e in spans]
    assert ends == sorted(ends) and len(set(ends)) == len(ends)   # batches complete in order
    starts = [s for s, _ in spans]
    assert all(b - a >= 10 / pp - 1e-9 for a, b in zip(starts, starts[1:]))   # stage 1 holds one batch


def test_abort_waits_for_the_pipeline_to_drain():
    from servesim.cluster.build import open_simulation
    from servesim.workload.trace import TraceRequest

    # Two 100-token prompts at 0, one per batch (budget 100); S(100) = 10,000 + 3,641 ns.
    # Batch 0 (request 1): stage 1 [0, 5], stage 2 [5.013641, 10.013641]. Batch 1 (request 2):
    # stage 1 [5, 10], stage 2 [10.013641, 15.013641]. At 10.013641 request 1's decode enters
    # stage 1 (ends 10.013641 + 5 + S(1) + 5 = 20.023677). The abort of request 1 at 12 ms
    # schedules nothing more: batch 1's end at 15.013641 commits no batch, and the abort
    # applies at 20.023677, once nothing is in flight; request 2's decode starts then.
    config = {"model": "llama-3.1-8b", "gpu": "h100-sxm",
              "engine": {"tokenization_ms": 0.0, "timing": {"kind": "fixed", "pass_ms": 10.0},
                         "workers": {"aggregated": {"pp": 2, "scheduler": {"max_num_seqs": 2,
                                                                            "max_num_batched_tokens": 100}}}},
              "workload": {"synthetic": {"num_requests": 1, "input_length": {"min": 100, "max": 100},
                                         "output_length": {"min": 3, "max": 3}}}}
    log = []
    sim = open_simulation(config, on_token=lambda rid, t, n: log.append((rid, t, n)))
    for request_id in (1, 2):
        sim.submit(TraceRequest(request_id, None, 100, 1000), at=0)
    sim.run_until(12_000_000)
    sim.abort(1, at=12_000_000)
    sim.run_until(40_000_000)
    assert [(r.request_id, r.finish_ns) for r in sim.aborted] == [(1, 20_023_677)]
    assert [(rid, t) for rid, t, _ in log[:4]] == [(1, 10_013_641), (2, 15_013_641), (1, 20_023_677),
                                                    (2, 30_033_713)]
