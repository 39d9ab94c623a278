"""The run spec (config/run_spec.py): the resolved config lowered into frozen, typed values,
and config.resolved.yaml as an input that reproduces the run."""

from __future__ import annotations

import dataclasses
import io

import pytest

import servesim
from servesim.cluster.engine_choice import choose_engines
from servesim.config import VllmSchedulerConfig, config_to_yaml, load_config
from servesim.config.resolution import resolve
from servesim.config.run_spec import _check_scheduler

PD = {"prefill": {}, "decode": {}}


def _spec(*overrides):
    return resolve(load_config(None, list(overrides)))


def test_lowered_values_by_hand():
    spec = _spec(("seed", 7), ("engine.tokenization_ms", 1.5))
    # The request path: 1.5 ms of tokenization in place of the per-token cost, plus vLLM's 0.5 ms
    # HTTP and 0.3 ms hop to the engine; router.seed null: the root seed.
    assert (spec.seed, spec.request_path.fixed_in_ns, spec.request_path.per_token_ns, spec.router.seed) == \
        (7, 2_300_000, 0, 7)
    assert _spec(("seed", 7), ("router.seed", 3)).router.seed == 3
    role = spec.roles["aggregated"]
    assert (role.count, role.gpus_per_node, role.gpus, role.scheduler.kv_blocks) == (1, 8, 1, 27338)
    assert spec.transfer is None and not spec.disaggregated and spec.engine_version == "0.32.0"
    assert spec.backend.name == "vllm"


def test_transfer_spec_by_hand():
    # H100's NIC: 50 GB/s per GPU, one TP rank each side: 5e10 B/s. Llama 3.1 8B's KV per
    # token in bf16: 32 layers × 8 KV heads × 128 × 2 (K and V) × 2 bytes = 131,072.
    spec = _spec(("engine.workers", PD))
    assert dataclasses.astuple(spec.transfer) == (50e9, 0, "decode", 131072.0, "next_pass")
    # 25 GB/s per GPU over 2 ranks each side = 5e10 B/s again; 0.5 ms = 500,000 ns.
    spec = _spec(("engine.workers", {"prefill": {"tp": 2}, "decode": {"tp": 2}}),
                 ("engine.kv_transfer", {"bandwidth_gb_s": 25.0, "latency_ms": 0.5, "first_token_from": "prefill"}))
    assert dataclasses.astuple(spec.transfer)[:3] == (50e9, 500_000, "prefill")


def test_the_spec_is_frozen():
    spec = _spec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.roles["aggregated"].count = 2
    with pytest.raises(TypeError):
        spec.roles["extra"] = spec.roles["aggregated"]


def test_a_null_left_by_a_resolver_is_a_bug():
    with pytest.raises(AssertionError, match="max_num_seqs, max_num_batched_tokens, num_gpu_blocks"):
        _check_scheduler(VllmSchedulerConfig(), "engine.workers.aggregated.scheduler")


def test_engine_choice_per_role():
    # KV offload on the prefill role only: that role runs the reference cache and scheduler,
    # the decode role the fast engine; the run reports the reference with offload's reason.
    offload = {"host_gb": 10.0, "bandwidth_gb_s": 50.0}
    spec = _spec(("engine.backend", "sglang"), ("engine.workers", {"prefill": {"kv_offload": offload}, "decode": {}}))
    engines = choose_engines(spec, pass_log=False, token_times=False)
    assert {name: (c.path, c.exact_cache) for name, c in engines.roles.items()} == {
        "prefill": ("reference", True), "decode": ("fast", False)}
    assert engines.path == "reference" and engines.reason.startswith("KV offload")
    # Speculative decoding: the per-request scheduler over the fast cache.
    spec = _spec(("engine.workers.aggregated.speculative", {"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}))
    choice = choose_engines(spec, False, False).roles["aggregated"]
    assert (choice.path, choice.exact_cache) == ("reference", False)
    # A pass log does not change the engine (the fast one writes it); a token callback makes
    # the whole run the reference, cache included.
    assert choose_engines(_spec(), pass_log=True, token_times=True).roles["aggregated"].path == "fast"
    choice = choose_engines(_spec(), pass_log=False, token_times=False, on_token=True).roles["aggregated"]
    assert (choice.path, choice.exact_cache) == ("reference", True)


@pytest.mark.parametrize("overrides", [
    [("workload.max_requests", 200)],
    [("engine.backend", "sglang"), ("engine.workers", PD), ("workload.max_requests", 150)],
    [("engine.backend", "trtllm"), ("seed", 5), ("workload.max_requests", 150),
     ("workload.client", {"mode": "poisson", "rate": 20.0})],
], ids=["vllm", "sglang_pd", "trtllm_poisson"])
def test_resolved_yaml_reproduces_the_run(tmp_path, overrides):
    first = servesim.simulate(None, overrides=overrides)
    resolved = tmp_path / "config.resolved.yaml"
    resolved.write_text(config_to_yaml(first.config))
    load_config(resolved)   # a valid input
    again = servesim.simulate(resolved)
    assert config_to_yaml(again.config) == resolved.read_text()   # resolving it again changes nothing
    csv_first, csv_again = io.StringIO(), io.StringIO()
    first.requests.write_csv(csv_first)
    again.requests.write_csv(csv_again)
    assert csv_first.getvalue() == csv_again.getvalue() and len(first.requests) > 0
    drop = ("wall_time_ms",)
    assert ({k: v for k, v in first.summary.items() if k not in drop}
            == {k: v for k, v in again.summary.items() if k not in drop})
