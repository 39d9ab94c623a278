"""Strict configuration: wrong types, unknown keys and impossible values are one-sentence errors."""

import copy

import pytest

from servesim.config import load_config, set_dotted
from servesim.errors import ServesimError
from servesim.config.resolution import resolve

BASE = {"workload": {"synthetic": {"num_requests": 4, "input_length": 8, "output_length": 2}}}
SCHED = "engine.workers.aggregated.scheduler"


def _load(**dotted):
    data = copy.deepcopy(BASE)
    for key, value in dotted.items():
        set_dotted(data, key.replace("__", "."), value)
    return load_config(data)


def _error(**dotted) -> str:
    with pytest.raises(ServesimError) as info:
        resolve(_load(**dotted))
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("value", [1, 0, "true", "on", "yes", 1.0, "True"])
def test_async_scheduling_needs_a_real_boolean(value):
    message = _error(**{f"{SCHED}.async_scheduling".replace(".", "__"): value})
    assert "async_scheduling must be true or false" in message


def test_yaml_on_is_a_string_not_a_boolean(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("workload:\n  synthetic: {num_requests: 1, input_length: 8, output_length: 1}\n"
                    "engine:\n  workers:\n    aggregated:\n      scheduler:\n        async_scheduling: on\n")
    with pytest.raises(ServesimError, match='got "on"'):
        load_config(path)


def test_unknown_key_is_named():
    assert "unknown key engine.workers.aggregated.scheduler.max_seqs" in _error(
        engine__workers__aggregated__scheduler__max_seqs=4)
    assert "unknown key bogus" in _error(bogus=1)


@pytest.mark.parametrize("key,value,fragment", [
    ("block_size", 0, "block_size: input should be greater than 0"),
    ("max_num_seqs", 0, "max_num_seqs: input should be greater than 0"),
    ("num_gpu_blocks", 1, "num_gpu_blocks: input should be greater than or equal to 2"),
    ("max_num_batched_tokens", -5, "greater than 0"),
])
def test_impossible_values(key, value, fragment):
    assert fragment in _error(**{f"engine__workers__aggregated__scheduler__{key}": value})


def test_vllm_key_under_sglang_names_the_counterpart():
    message = _error(engine__backend="sglang", engine__workers__aggregated__scheduler__async_scheduling=False)
    assert "async_scheduling is a vLLM setting" in message
    assert "disable_overlap_schedule" in message


def test_sglang_key_under_vllm():
    assert "vLLM's counterpart is max_num_seqs" in _error(
        engine__workers__aggregated__scheduler__max_running_requests=8)


def test_ngram_with_explicit_async_is_rejected():
    message = _error(**{
        "engine__workers__aggregated__scheduler__async_scheduling": True,
        "engine__workers__aggregated__speculative": {"method": "ngram", "num_speculative_tokens": 3,
                                                     "acceptance_rate": 0.6},
    })
    assert "cannot be combined with ngram" in message


def test_ngram_with_explicit_false_is_fine():
    run = resolve(_load(**{
        "engine__workers__aggregated__scheduler__async_scheduling": False,
        "engine__workers__aggregated__speculative": {"method": "ngram", "num_speculative_tokens": 3,
                                                     "acceptance_rate": 0.6},
    }))
    assert run.config.engine.workers.aggregated.scheduler.async_scheduling is False


def test_eagle_keeps_async_default_on():
    run = resolve(_load(engine__workers__aggregated__speculative={
        "method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": [0.8, 0.6]}))
    assert run.config.engine.workers.aggregated.scheduler.async_scheduling is True


def test_max_model_len_that_does_not_fit_says_by_how_much():
    # 10 blocks of 16 → 9 usable → 144 tokens; 200 is 56 short.
    message = _error(engine__workers__aggregated__scheduler__num_gpu_blocks=10,
                     engine__workers__aggregated__scheduler__max_model_len=200)
    assert "56 tokens short" in message


def test_default_model_context_must_fit():
    # Llama-3.1-8B's context (131072) needs 8192 usable blocks of 16.
    assert "131072" in _error(engine__workers__aggregated__scheduler__num_gpu_blocks=8000)
    resolve(_load(engine__workers__aggregated__scheduler__num_gpu_blocks=8193))


def test_serving_defaults_by_gpu():
    cfg = resolve(_load()).config.engine.workers.aggregated.scheduler
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.max_model_len) == (1024, 8192, 131072)
    cfg = resolve(_load(gpu="a100-sxm")).config.engine.workers.aggregated.scheduler
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (256, 2048)
    cfg = resolve(_load(gpu="b200")).config.engine.workers.aggregated.scheduler
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (1024, 16384)


def test_sglang_and_trtllm_resolve_their_own_defaults():
    sg = resolve(_load(engine__backend="sglang")).config.engine.workers.aggregated.scheduler
    # H100 (79.2 GiB): chunk 8192; mem_fraction_static = (81101 − max(512 + 8192×1.5 + 256×2 + 128,
    # 10240) MB) / 81101 MB ≈ 0.838; the pool is whatever that leaves after the weights.
    assert sg.chunked_prefill_size == 8192 and sg.page_size == 1
    assert 0.83 < sg.mem_fraction_static < 0.85
    assert sg.context_length == 131072
    trt = resolve(_load(engine__backend="trtllm")).config.engine.workers.aggregated.scheduler
    assert (trt.max_batch_size, trt.max_num_tokens, trt.tokens_per_block) == (2048, 8192, 32)
    assert trt.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"
    assert trt.max_tokens % 32 == 0


def test_unknown_model_and_gpu_suggest_names():
    assert "did you mean llama-3.1-8b" in _error(model="llama-3.1-8")
    assert "unknown GPU 'h100x'" in _error(gpu="h100x")


def test_trace_xor_synthetic():
    data = copy.deepcopy(BASE)
    data["workload"]["trace"] = "x.jsonl"
    with pytest.raises(ServesimError, match="exactly one of workload.trace, workload.synthetic and workload.sessions"):
        load_config(data)


def test_length_range_order():
    with pytest.raises(ServesimError, match=r"min \(9\) is larger than max \(3\)"):
        _load(workload__synthetic__input_length={"min": 9, "max": 3})


def test_duplicate_yaml_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seed: 1\nseed: 2\n")
    with pytest.raises(ServesimError, match="duplicate key 'seed' at line 2"):
        load_config(path)


def test_resolved_config_round_trips(tmp_path):
    from servesim.config import config_to_yaml

    run = resolve(_load())
    path = tmp_path / "resolved.yaml"
    path.write_text(config_to_yaml(run.config))
    again = resolve(load_config(path))
    assert again.config == run.config


def test_sglang_chunk_size_is_positive_or_minus_one():
    message = _error(engine__backend="sglang", engine__workers__aggregated__scheduler={"chunked_prefill_size": 0})
    assert "chunked_prefill_size must be a positive number of tokens, or -1" in message
    message = _error(engine__backend="sglang",
                     engine__workers__aggregated__scheduler={"chunked_prefill_size": 100, "page_size": 64})
    assert "must be a multiple of page_size 64" in message


def test_roofline_profile_is_recorded_and_unknown_profiles_are_errors():
    run = resolve(_load())
    assert run.config.engine.timing.kind == "roofline"
    assert run.config.engine.timing.profile == "h100-sxm/vllm"   # fitted for the default deployment
    import servesim

    with pytest.raises(ServesimError, match="no fitted profile 'a100_sxm/nope'; the fitted ones are"):
        servesim.simulate(_load(engine__timing={"kind": "roofline", "profile": "a100_sxm/nope"}).config)
    # A GPU alias names the same profile.
    servesim.simulate(_load(engine__timing={"kind": "roofline", "profile": "h100_sxm/vllm"}).config)


def test_warmup_requests_are_left_out_and_must_leave_something():
    import servesim

    base = {"engine": {"timing": {"kind": "fixed", "pass_ms": 10.0}},
            "workload": {"synthetic": {"num_requests": 4, "input_length": 8, "output_length": 2},
                         "client": {"mode": "closed_loop", "concurrency": 1}}}
    # One user, 8-token prompts, 2 outputs: each request takes 2 passes (20 ms) back to back.
    # With 2 warm-up requests the summary covers requests 2 and 3: 40 ms to 80 ms.
    summary = servesim.simulate(dict(base, workload=dict(base["workload"], warmup_requests=2))).summary
    assert (summary["completed"], summary["failed_requests"], summary["warmup_requests"]) == (2, 0, 2)
    assert summary["duration_ms"] == 40.0
    with pytest.raises(ServesimError, match="warmup_requests is 4 but the workload has only 4 requests"):
        servesim.simulate(dict(base, workload=dict(base["workload"], warmup_requests=4)))


@pytest.mark.parametrize("reference", [False, True])
def test_itl_leaves_warmup_requests_out(tmp_path, reference):
    import servesim

    from tests.support.runs import fixed_config, write_trace

    # Passes cost 10 ms plus 1 ms per prefill token. R0 (warm-up): prompt 10 at 0, [0,20)
    # gives its first token. R1 (prompt 10) arrives at 15 and is prefilled beside R0's
    # decode in [20,40): R0's gap 20, R1's first token at 40. Then [40,50), [50,60): gaps of
    # 10 for both. ITL with R0: {20, 10, 10, 10, 10}, mean 12 ms; without it: {10, 10}.
    rows = [{"timestamp": 0.0, "input_length": 10, "output_length": 4},
            {"timestamp": 15.0, "input_length": 10, "output_length": 3}]
    config = fixed_config(write_trace(tmp_path / "t.jsonl", rows), async_scheduling=False)
    config["engine"]["timing"] = {"kind": "polynomial", "base_ms": 10.0, "per_prefill_token_ms": 1.0,
                                  "per_decode_token_ms": 0.0, "per_context_token_ms": 0.0, "per_request_ms": 0.0}
    config["engine"]["reference"] = reference
    everything = servesim.simulate(config).summary
    assert everything["mean_itl_ms"] == pytest.approx(12.0)
    config["workload"]["warmup_requests"] = 1
    measured = servesim.simulate(config).summary
    assert measured["mean_itl_ms"] == pytest.approx(10.0)
    assert measured["completed"] == 1


def test_missing_lengths_file_is_one_sentence(tmp_path):
    import servesim

    with pytest.raises(ServesimError, match="lengths_from: .* does not exist"):
        servesim.simulate({"workload": {"synthetic": {"num_requests": 4, "lengths_from": str(tmp_path / "x.csv")}}})


@pytest.mark.parametrize("value", [0, -3, "30", 30.0, True])
def test_sglang_recv_interval_is_a_positive_integer(value):
    message = _error(engine__backend="sglang", engine__workers__aggregated__scheduler={"scheduler_recv_interval": value})
    assert "scheduler_recv_interval" in message
    run = resolve(_load(engine__backend="sglang", engine__workers__aggregated__scheduler={"scheduler_recv_interval": 30}))
    assert run.config.engine.workers.aggregated.scheduler.scheduler_recv_interval == 30


# --------------------------------------------------------------------------- engine.version


@pytest.mark.parametrize("backend,newest", [("vllm", "0.32.0"), ("sglang", "0.5.9"), ("trtllm", "1.2.0rc2")])
def test_engine_version_defaults_to_the_newest_the_backend_models(backend, newest):
    run = resolve(_load(engine__backend=backend))
    assert run.config.engine.version == newest
    assert resolve(_load(engine__backend=backend, engine__version=newest)).config.engine.version == newest


def test_an_unmodelled_engine_version_lists_the_modelled_ones():
    message = _error(engine__version="0.31.0")
    assert message == ("config: engine.version 0.31.0 is not a vLLM version servesim models; it models 0.32.0 "
                       "(leave engine.version unset for the newest)")
    assert "SGLang version servesim models; it models 0.5.9" in _error(engine__backend="sglang",
                                                                         engine__version="0.32.0")


def test_a_version_written_as_a_number_says_to_quote_it():
    # YAML reads `version: 0.30` as the float 0.3.
    assert 'quote it, as in version: "0.3"' in _error(engine__version=0.3)
    assert "must be" not in _error(engine__version=1)


def test_engine_version_is_in_the_resolved_config_and_the_summary(tmp_path):
    import servesim
    from servesim.config import config_to_yaml

    result = servesim.simulate(copy.deepcopy(BASE))
    assert "version: 0.32.0" in config_to_yaml(result.config)
    assert result.summary["simulated"]["engine_version"] == "0.32.0"
    assert result.summary["simulated"]["engine_version_followed"] == "vLLM 0.32.0"
    # The resolved config runs again.
    path = tmp_path / "config.resolved.yaml"
    path.write_text(config_to_yaml(result.config))
    assert servesim.simulate(path).summary["simulated"]["engine_version"] == "0.32.0"


def test_a_backend_switch_drops_the_files_engine_version():
    config = dict(copy.deepcopy(BASE), engine={"version": "0.32.0"})
    assert load_config(config, [("engine.backend", "sglang")]).config.engine.version is None
    kept = load_config(config, [("engine.backend", "sglang"), ("engine.version", "0.5.9")])
    assert kept.config.engine.version == "0.5.9"


def test_backend_picks_the_scheduler_schema_inside_pydantic():
    # engine.backend is the discriminator of every role's scheduler, in SimulationConfig itself,
    # not only under load_config; a role with no scheduler gets the backend's defaults.
    from pydantic import ValidationError

    from servesim.config import SimulationConfig, SglangSchedulerConfig, TrtllmSchedulerConfig

    workload = {"synthetic": {"num_requests": 1, "input_length": 4, "output_length": 1}}
    model = SimulationConfig.model_validate({
        "engine": {"backend": "sglang", "workers": {"prefill": {"scheduler": {"max_running_requests": 8}},
                                                     "decode": {}}},
        "workload": workload})
    prefill, decode = model.engine.workers.prefill.scheduler, model.engine.workers.decode.scheduler
    assert isinstance(prefill, SglangSchedulerConfig) and prefill.max_running_requests == 8
    assert isinstance(decode, SglangSchedulerConfig)
    model = SimulationConfig.model_validate({"engine": {"backend": "trtllm"}, "workload": workload})
    assert isinstance(model.engine.workers.aggregated.scheduler, TrtllmSchedulerConfig)
    with pytest.raises(ValidationError, match="max_num_seqs is a vLLM setting, not valid with engine.backend "
                                              "sglang; SGLang's counterpart is max_running_requests"):
        SimulationConfig.model_validate({
            "engine": {"backend": "sglang", "workers": {"aggregated": {"scheduler": {"max_num_seqs": 3}}}},
            "workload": workload})
