"""SGLang's fast decode pass (FastSglangScheduler._decode_pass: the batch's new blocks counted once,
taken and committed in one loop by _commit_decodes, retractions made on those counts) against the reference
scheduler, on random workloads that retract, reach the context limit, run with and without
overlap, and on one-token and larger pages."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.engine.sglang.fast import FastSglangScheduler, _victim_index
from servesim.engine.sglang.scheduler import SglangScheduler
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.support.scenarios import as_backend, scenarios

FIXED = {"kind": "fixed", "pass_ms": 10.0}


def _config(trace, sched, client, trace_block_size):
    return {
        "engine": {"backend": "sglang", "timing": FIXED, "workers": {"aggregated": {"scheduler": sched}}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": client,
                     "trace_block_size": trace_block_size},
    }


def _count_paths(monkeypatch) -> dict:
    """Counts of fast decode passes that took blocks in one count, of those that retracted on
    the fast pass's counts, of those that fell back to the reference's pass, and of the fast
    output processing's calls."""
    counts = {"fused": 0, "retracted": 0, "reference": 0, "outputs": 0}
    commit, reference_pass = FastSglangScheduler._commit_decodes, SglangScheduler._decode_pass
    retract_for, outputs = FastSglangScheduler._retract_for, FastSglangScheduler.update_from_output

    def counted_outputs(self, done):
        counts["outputs"] += 1
        return outputs(self, done)

    def counted_retract(self, *args):
        counts["retracted"] += 1
        return retract_for(self, *args)

    def counted_commit(self, *args):
        counts["fused"] += 1
        return commit(self, *args)

    def counted_reference(self):
        if isinstance(self, FastSglangScheduler):
            counts["reference"] += 1
        return reference_pass(self)

    monkeypatch.setattr(FastSglangScheduler, "_commit_decodes", counted_commit)
    monkeypatch.setattr(SglangScheduler, "_decode_pass", counted_reference)
    monkeypatch.setattr(FastSglangScheduler, "_retract_for", counted_retract)
    monkeypatch.setattr(FastSglangScheduler, "update_from_output", counted_outputs)
    return counts


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.data())
def test_fast_decode_pass_matches_the_reference(tmp_path, scenario, data):
    rows, sched, client, trace_block_size = scenario
    config = _config(write_trace(tmp_path / "t.jsonl", rows), as_backend(sched, "sglang", data), client,
                     trace_block_size)
    assert_same(config)


def _long_decodes(n: int, prompt: int, output: int) -> list[dict]:
    return [{"timestamp": 0, "input_length": prompt, "output_length": output, "hash_ids": [1000 + i]}
            for i in range(n)]


def test_retractions_and_the_context_limit_match_the_reference(tmp_path, monkeypatch):
    """A pool of 600 one-token pages for 8 requests of 40 + 60 tokens (800 at most): decode
    passes run out and retract; a context limit of 90 < 40 + 60 stops each request at 90 tokens.
    The fused pass ran, retracting on its own counts, and the records match."""
    counts = _count_paths(monkeypatch)
    for overlap_off in (False, True):
        sched = {"page_size": 1, "context_length": 90, "max_total_tokens": 600, "max_running_requests": 8,
                 "chunked_prefill_size": 64, "max_prefill_tokens": 64, "disable_overlap_schedule": overlap_off,
                 "num_reserved_decode_tokens": 0}
        config = _config(write_trace(tmp_path / f"t{overlap_off}.jsonl", _long_decodes(8, 40, 60)), sched,
                         {"mode": "open_loop"}, 4)
        fast = assert_same(config)
        assert fast.summary["preemptions"] > 0
    assert counts["fused"] > 0 and counts["retracted"] > 0 and counts["reference"] == 0 and counts["outputs"] > 0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 5)), min_size=1, max_size=12))
def test_the_victim_is_the_references_min(fields):
    """`_victim_index` (the fewest outputs in C, then the ties compared) picks the request the
    reference's `min(..., key=(num_output, -prompt_len, -seq))` picks, ties of every kind included
    (small ranges: many requests share outputs, prompts, even seq)."""
    decoders = [SimpleNamespace(num_output=output, prompt_len=prompt, seq=seq) for output, prompt, seq in fields]
    reference = min(decoders, key=lambda r: (r.num_output, -r.prompt_len, -r.seq))
    assert decoders[_victim_index(decoders)] is reference
