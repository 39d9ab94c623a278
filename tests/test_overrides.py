"""Overrides as a user means them: new traces, tags and backends, errors naming their source,
and the `vllm bench serve` shorthands of `servesim run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import servesim
from servesim import config as config_module
from servesim.cli_shorthands import expand_goodput, random_lengths, shorthand_overrides
from servesim.config import load_config
from servesim.errors import ServesimError
from servesim.config.resolution import resolve
from tests.support.cli import servesim_cli

SCHED = "engine.workers.aggregated.scheduler"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def _error(config=None, overrides=()) -> str:
    with pytest.raises(ServesimError) as info:
        resolve(load_config(config, list(overrides)))
    message = str(info.value)
    assert "\n" not in message and "default.yaml" not in message
    return message


# --------------------------------------------------------------------------- a new trace


def _traces(tmp_path: Path) -> dict[str, Path]:
    rows = [(0, 120, 5), (40, 300, 3), (90, 80, 7)]
    files = {
        "mooncake": ("t.jsonl", "".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o,
                                                    "hash_ids": [0, 1]}) + "\n" for t, i, o in rows)),
        "servesim-jsonl": ("s.jsonl", "".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o,
                                                          "request_id": f"r{t}"}) + "\n" for t, i, o in rows)),
        "vidur": ("v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"
                  + "".join(f"{t / 1000},{i},{o}\n" for t, i, o in rows)),
        "azure": ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  + "".join(f"2023-11-16 18:15:46.{t:03d}0000,{i},{o}\n" for t, i, o in rows)),
    }
    out = {}
    for fmt, (name, text) in files.items():
        out[fmt] = tmp_path / name
        out[fmt].write_text(text)
    return out


def test_a_trace_given_to_the_default_has_its_own_format(tmp_path):
    # The embedded default says `format: azure`; a new trace is read in the format its file has.
    for fmt, path in _traces(tmp_path).items():
        result = servesim.simulate(trace=path)
        assert result.summary["trace_format"] == fmt
        assert result.summary["completed"] == 3


def test_a_format_override_still_wins(tmp_path):
    # servesim-jsonl read as mooncake: its request_id field is then unknown.
    path = _traces(tmp_path)["servesim-jsonl"]
    with pytest.raises(ServesimError, match="unknown field 'request_id' for format mooncake"):
        servesim.simulate(trace=path, overrides=[("workload.format", "mooncake")])


def test_set_workload_trace_infers_its_format_and_drops_synthetic(tmp_path):
    path = _traces(tmp_path)["vidur"]
    base = {"workload": {"synthetic": {"num_requests": 2, "input_length": 8, "output_length": 2},
                         "format": "azure"}}
    loaded = load_config(base, [("workload.trace", str(path))])
    assert loaded.config.workload.format is None and loaded.config.workload.synthetic is None


SESSIONS = {"num_sessions": 2, "turns": 2, "input_length": 8, "output_length": 2}


def test_a_new_source_drops_the_files_sessions_and_vice_versa(tmp_path):
    path = _traces(tmp_path)["vidur"]
    loaded = load_config({"workload": {"sessions": SESSIONS}}, [("workload.trace", str(path))])
    assert loaded.config.workload.sessions is None and loaded.config.workload.trace == str(path)
    loaded = load_config({"workload": {"sessions": SESSIONS}}, [
        ("workload.synthetic", {"num_requests": 2, "input_length": 8, "output_length": 2})])
    assert loaded.config.workload.sessions is None and loaded.config.workload.synthetic.num_requests == 2
    loaded = load_config({"workload": {"trace": str(path), "format": "vidur"}}, [("workload.sessions", SESSIONS)])
    workload = loaded.config.workload
    assert (workload.trace, workload.format, workload.sessions.num_sessions) == (None, None, 2)
    # Editing the file's own sessions keeps them.
    loaded = load_config({"workload": {"sessions": SESSIONS}}, [("workload.sessions.num_sessions", 5)])
    assert loaded.config.workload.sessions.num_sessions == 5


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs shared/traces")
def test_cli_trace_on_the_default_for_every_shared_format(tmp_path):
    samples = {"mooncake": SHARED / "mooncake" / "conversation_trace.jsonl",
               "azure": SHARED / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv",
               "vidur": SHARED / "vidur_processed" / "splitwise_conv.csv"}
    for fmt, path in samples.items():
        head = tmp_path / path.name
        head.write_text("".join(path.read_text().splitlines(keepends=True)[:30]))
        done = servesim_cli("run", "--trace", head, "--json", timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["trace_format"] == fmt


# --------------------------------------------------------------------------- a new tag


def test_new_client_mode_drops_the_old_modes_fields():
    # The default's client is {mode: open_loop, time_scale: 1.0}.
    loaded = load_config(None, [("workload.client.mode", "poisson"), ("workload.client.rate", 10)])
    assert loaded.config.workload.client.model_dump() == {"mode": "poisson", "rate": 10.0}
    # Either order.
    loaded = load_config(None, [("workload.client.rate", 10), ("workload.client.mode", "poisson")])
    assert loaded.config.workload.client.rate == 10.0


def test_new_timing_kind_drops_the_old_kinds_fields():
    base = {"engine": {"timing": {"kind": "roofline", "gemm_efficiency": 0.5}},
            "workload": {"synthetic": {"num_requests": 1, "input_length": 8, "output_length": 2}}}
    loaded = load_config(base, [("engine.timing.kind", "fixed")])
    assert loaded.config.engine.timing.model_dump() == {"kind": "fixed", "pass_ms": 10.0}


def test_a_field_the_overrides_set_is_never_dropped():
    message = _error(None, [("workload.client.time_scale", 2.0), ("workload.client.mode", "poisson"),
                            ("workload.client.rate", 1.0)])
    assert message.startswith("--set workload.client.time_scale: unknown key workload.client.time_scale")


def test_a_missing_field_of_the_new_mode_names_the_set():
    assert _error(None, [("workload.client.mode", "poisson")]) == \
        "--set workload.client.mode: workload.client.rate is required"


# --------------------------------------------------------------------------- a new backend


def _default_with_vllm_keys() -> dict:
    """The embedded default with vLLM's scheduler keys written out, as an older default.yaml had them."""
    data = config_module.read_config_file(config_module.default_config_path())
    data["workload"]["trace"] = str(config_module.default_config_path().parent / data["workload"]["trace"])
    data["engine"]["workers"]["aggregated"]["scheduler"] = {
        "max_num_seqs": None, "block_size": 16, "num_gpu_blocks": 27000, "enable_chunked_prefill": True,
        "enable_prefix_caching": True, "long_prefill_token_threshold": 0, "async_scheduling": None}
    return data


def test_vllm_keys_carry_over_to_sglang():
    # block_size 16, num_gpu_blocks 27000 → page_size 16, 27000 × 16 = 432000 tokens;
    # enable_prefix_caching true → disable_radix_cache false; enable_chunked_prefill true with no
    # max_num_batched_tokens → chunked_prefill_size stays null (SGLang's default, chunked);
    # long_prefill_token_threshold 0 (vLLM's default, no counterpart) and the nulls are dropped.
    sched = load_config(_default_with_vllm_keys(), [("engine.backend", "sglang")]).config.engine.workers.aggregated.scheduler
    assert (sched.page_size, sched.max_total_tokens, sched.disable_radix_cache) == (16, 432000, False)
    assert sched.chunked_prefill_size is None and sched.max_running_requests is None


def test_vllm_keys_carry_over_to_trtllm_and_run():
    result = servesim.simulate(_default_with_vllm_keys(),
                               overrides=[("engine.backend", "trtllm"), ("workload.max_requests", 20)])
    sched = result.config.engine.workers.aggregated.scheduler
    assert (sched.tokens_per_block, sched.max_tokens, sched.enable_chunked_context) == (16, 432000, True)
    assert sched.enable_block_reuse is True and result.summary["completed"] == 20


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_the_embedded_default_switches_backend_with_each_engine_own_defaults(backend):
    # default.yaml writes no scheduler key, so nothing is carried: each engine sizes its own pool.
    # SGLang: floor((79.2 GiB x 0.834 - 14.957 GiB weights) x 8,192 tokens/GiB) = 418,576 (its KvCache
    # adds one null block); TensorRT-LLM: (79.2 - 14.957 - 1.75) x 0.9 x 8,192 = 460,748, floored to
    # 32-token blocks: 460,736 (test_resource_checks.py has the same figures).
    result = servesim.simulate(overrides=[("engine.backend", backend), ("workload.max_requests", 20)])
    assert result.summary["completed"] == 20 and result.summary["warnings"] == []
    if backend == "sglang":
        assert result.config.engine.workers.aggregated.scheduler.max_total_tokens == 418576
    else:
        assert result.config.engine.workers.aggregated.scheduler.max_tokens == 460736


def test_sglang_file_to_vllm_converts_units_and_inverts_flags():
    base = {"engine": {"backend": "sglang", "workers": {"aggregated": {"scheduler": {
        "page_size": 32, "max_total_tokens": 64000, "chunked_prefill_size": -1, "disable_radix_cache": True,
        "max_running_requests": 64, "schedule_policy": "fcfs"}}}},
        "workload": {"synthetic": {"num_requests": 1, "input_length": 8, "output_length": 2}}}
    sched = load_config(base, [("engine.backend", "vllm")]).config.engine.workers.aggregated.scheduler
    # 64000 tokens // 32 = 2000 blocks; -1 = no chunking; schedule_policy fcfs is SGLang's default: dropped.
    assert (sched.block_size, sched.num_gpu_blocks, sched.max_num_seqs) == (32, 2000, 64)
    assert sched.enable_chunked_prefill is False and sched.enable_prefix_caching is False


def test_keys_the_overrides_give_the_new_backend_win():
    sched = load_config(None, [("engine.backend", "sglang"), (f"{SCHED}.page_size", 32),
                               (f"{SCHED}.max_total_tokens", None)]).config.engine.workers.aggregated.scheduler
    assert sched.page_size == 32 and sched.max_total_tokens is None


def test_a_key_without_counterpart_refuses_the_switch(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text("workload: {synthetic: {num_requests: 1, input_length: 8, output_length: 2}}\n"
                    "engine: {workers: {aggregated: {scheduler: {long_prefill_token_threshold: 64, "
                    "watermark: 0.0, enable_chunked_prefill: false, max_num_batched_tokens: 4096, "
                    "max_model_len: 4096}}}}\n")
    message = _error(path, [("engine.backend", "sglang")])
    assert message == (f"--set engine.backend: SGLang has no counterpart of the vLLM settings {SCHED}."
                       f"long_prefill_token_threshold, {SCHED}.max_num_batched_tokens in {path}; remove them "
                       "to switch engine.backend to sglang")


def test_a_carried_value_the_new_backend_rejects_names_the_switch(tmp_path):
    # max_num_batched_tokens 100 → chunked_prefill_size 100, not a multiple of page_size 16.
    path = tmp_path / "my.yaml"
    path.write_text("workload: {synthetic: {num_requests: 1, input_length: 8, output_length: 2}}\n"
                    "engine: {workers: {aggregated: {scheduler: {max_num_batched_tokens: 100, block_size: 16}}}}\n")
    assert _error(path, [("engine.backend", "sglang")]) == (
        f"--set engine.backend: {SCHED}: chunked_prefill_size 100 must be a multiple of page_size 16")
    # A vLLM key the overrides themselves give is not carried: it is named as theirs.
    assert _error(None, [(f"{SCHED}.max_num_batched_tokens", 100), ("engine.backend", "sglang")]).startswith(
        f"--set {SCHED}.max_num_batched_tokens: {SCHED}.max_num_batched_tokens is a vLLM setting")


# --------------------------------------------------------------------------- who is named


def test_errors_name_the_set_not_the_packaged_file():
    assert _error(None, [("slo.ttft_ms", -1)]).startswith("--set slo.ttft_ms: slo.ttft_ms: input should be "
                                                         "greater than 0")
    assert _error(None, [(f"{SCHED}.max_num_seqs", 0)]).startswith(f"--set {SCHED}.max_num_seqs: ")


def test_errors_in_a_users_file_name_it(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("workload: {synthetic: {num_requests: 1, input_length: 8, output_length: 2}}\nslo: {ttft_ms: 0}\n")
    assert _error(path, [("seed", 3)]).startswith(f"{path}: slo.ttft_ms")


def test_the_embedded_default_is_named_as_such(tmp_path, monkeypatch):
    bad = tmp_path / "default.yaml"
    bad.write_text("workload: {synthetic: {num_requests: 1, input_length: 8, output_length: 2}}\nbogus: 1\n")
    monkeypatch.setattr(config_module.loading, "default_config_path", lambda: bad)
    assert _error(None).startswith("the embedded default config: unknown key bogus")


# --------------------------------------------------------------------------- shorthands


def _params(**given):
    names = ("request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps",
             "ramp_up_end_rps", "num_prompts", "random_input_len", "random_output_len", "random_range_ratio",
             "random_prefix_len", "goodput", "config", "trace")
    return {name: given.get(name) for name in names}


def _load(**given):
    return load_config(given.get("config"), shorthand_overrides(_params(**given))).config


def test_random_range_ratio_rounds_as_vllm():
    # floor(100·0.9) = 90, ceil(100·1.1) = ceil(110.00000000000001) = 111 (vLLM 0.32 get_sampling_params);
    # outputs: floor(128·0.9) = 115, ceil(128·1.1) = 141.
    workload = _load(random_input_len=100, random_range_ratio=0.1).workload
    assert workload.trace is None and workload.format is None
    synthetic = workload.synthetic
    assert (synthetic.input_length.min, synthetic.input_length.max) == (90, 111)
    assert (synthetic.output_length.min, synthetic.output_length.max) == (115, 141)
    assert synthetic.num_requests == 1000 and synthetic.prefix_length == 0   # vLLM's defaults
    # floor(1·0.5) = 0 is lifted to 1; ceil(1.5) = 2. r = 0: the length itself.
    assert random_lengths(1, 0.5, 1) == {"min": 1, "max": 2} and random_lengths(128, 0.0, 1) == 128


def test_random_flags_and_num_prompts():
    synthetic = _load(random_input_len=200, random_output_len=20, random_prefix_len=64, num_prompts=7).workload.synthetic
    assert (synthetic.num_requests, synthetic.input_length, synthetic.output_length, synthetic.prefix_length) == \
        (7, 200, 20, 64)
    assert _load(num_prompts=50).workload.max_requests == 50   # the default's trace: its first 50


def test_num_prompts_on_a_synthetic_file_sets_num_requests(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("workload: {synthetic: {num_requests: 10, input_length: 8, output_length: 2}, max_requests: 5}\n")
    workload = _load(config=path, num_prompts=30).workload
    assert (workload.synthetic.num_requests, workload.max_requests) == (30, None)


def test_client_flags_make_a_bench_client():
    client = _load(request_rate=float("inf"), max_concurrency=8).workload.client
    assert (client.mode, client.request_rate, client.max_concurrency) == ("bench", "inf", 8)
    client = _load(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=5).workload.client
    assert (client.ramp_up_strategy, client.ramp_up_start_rps, client.ramp_up_end_rps) == ("linear", 1, 5)


def test_goodput_sets_only_the_slos_given():
    slo = _load(goodput=["ttft:500", "e2el:9000"]).slo
    assert (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms) == (500.0, None, 9000.0)
    assert expand_goodput(["run", "--goodput", "ttft:5", "tpot:6", "x.yaml", "-q"]) == \
        ["run", "--goodput", "ttft:5", "--goodput", "tpot:6", "x.yaml", "-q"]


@pytest.mark.parametrize("given, words", [
    ({"random_range_ratio": 1.0}, "--random-range-ratio must be in [0, 1)"),
    ({"random_input_len": 1, "random_range_ratio": 0.5}, "can draw 0-token prompts"),
    ({"random_input_len": 10, "trace": "x.jsonl"}, "cannot be combined with --trace"),
    ({"num_prompts": 0}, "--num-prompts must be at least 1"),
    ({"goodput": ["ttft=5"]}, "KEY:MS pairs"),
    ({"goodput": ["itl:5"]}, "KEY:MS pairs"),
    ({"goodput": ["ttft:soon"]}, "not a number"),
])
def test_bad_shorthands(given, words):
    with pytest.raises(ServesimError, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        shorthand_overrides(_params(**given))


def test_a_bad_shorthand_value_names_the_flag():
    message = _error(None, shorthand_overrides(_params(request_rate=-1.0)))
    assert message.startswith("--request-rate: workload.client.request_rate")


def test_synthetic_prefix_is_shared_exactly():
    # 4 requests one after another (closed loop of 1), each 100 prefix + 50 own tokens, blocks of 16:
    # the prefix fills 6 whole blocks (96 tokens), so requests 1-3 hit 96 tokens each:
    # 3 × 96 / (4 × 150) = 0.48. The fast engine and the reference engine agree.
    cfg = {"engine": {"timing": {"kind": "fixed", "pass_ms": 5.0},
                      "workers": {"aggregated": {"scheduler": {"num_gpu_blocks": 500, "max_model_len": 1024}}}},
           "workload": {"synthetic": {"num_requests": 4, "input_length": 50, "output_length": 3,
                                      "prefix_length": 100},
                        "client": {"mode": "closed_loop", "concurrency": 1}}}
    fast = servesim.simulate(cfg)
    assert fast.summary["total_input_tokens"] == 600
    assert fast.summary["prefix_cache_hit_rate"] == pytest.approx(0.48)
    reference = servesim.simulate(cfg, overrides=[("engine.reference", True)])
    for key in ("prefix_cache_hit_rate", "mean_ttft_ms", "mean_e2e_ms", "duration_ms"):
        assert fast.summary[key] == reference.summary[key]


def test_cli_shorthands_end_to_end(tmp_path):
    done = servesim_cli("run", "--random-input-len", "200", "--random-output-len", "10", "--num-prompts", "40",
                    "--request-rate", "20", "--max-concurrency", "4", "--goodput", "ttft:500", "tpot:30", "--json",
                    "--set", "workload.client.request_rate=40", timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["completed"] == 40 and summary["total_input_tokens"] == 40 * 200
    assert summary["peak_batch_requests"] <= 4
    client = summary["simulated"]["client"]
    assert (client["mode"], client["request_rate"], client["max_concurrency"]) == ("bench", 40.0, 4)
    assert summary["simulated"]["slo"] == {"ttft_ms": 500.0, "tpot_ms": 30.0, "e2e_ms": None}


def test_num_prompts_follows_the_source_the_set_overrides_leave(tmp_path):
    # A synthetic base: --num-prompts is its num_requests. A --set that makes the workload a trace
    # turns it into max_requests, as it is for a trace base; one that makes it synthetic, back.
    base = tmp_path / "syn.yaml"
    base.write_text("workload:\n  synthetic: {num_requests: 50, input_length: 100, output_length: 20}\n")
    later = [("workload.trace", "t.jsonl", "--set workload.trace"), ("workload.synthetic", None, "--set x")]
    assert shorthand_overrides(_params(num_prompts=2, config=base)) == [
        ("workload.synthetic.num_requests", 2, "--num-prompts"), ("workload.max_requests", None, "--num-prompts")]
    assert shorthand_overrides(_params(num_prompts=2, config=base), later) == [
        ("workload.max_requests", 2, "--num-prompts")]
    to_synthetic = [("workload", {"synthetic": {"num_requests": 9}}, "--set workload")]
    assert shorthand_overrides(_params(num_prompts=2), to_synthetic)[0] == (
        "workload.synthetic.num_requests", 2, "--num-prompts")   # the embedded default is a trace
