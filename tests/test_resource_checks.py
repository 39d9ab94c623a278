"""Checks no configuration skips: weights and pinned KV sizes fit, parallelism the engines accept,
fleet sizes servesim can set up, and messages that name the real cause (issue 18, section 2).

Figures used throughout (H100 SXM as torch reports it: 79.2 GiB):
- Llama-3.1-8B: 8,029,995,008 parameters × 2 bytes (bf16) = 16,059,990,016 B = 14.957 GiB of weights;
  KV per token = 32 layers × 2 (K and V) × 8 heads × 128 × 2 bytes = 131,072 B (128 KiB), so a
  16-token vLLM block is 2 MiB and one GiB holds 8,192 tokens.
- vLLM activations at its H100 defaults (max_num_batched_tokens 8192, max_num_seqs 1024):
  8192 × (2 × 14336 + 4 × 4096) × 2 B + 1024 × 128,256 vocab × 4 B = 738,197,504 + 525,336,576
  = 1,263,534,080 B = 1.177 GiB; runtime reserve 1.75 GiB.
"""

from __future__ import annotations

import json

import pytest

from servesim.cluster.fleet import MAX_FLEET_GPUS
from servesim.config import load_config
from servesim.errors import ServesimError
from servesim.config.resolution import resolve
from servesim.sweep.recommend import build, parse_workload
from tests.support.cli import servesim_cli

ROLE = "engine.workers.aggregated"


def resolved(*overrides, config=None):
    return resolve(load_config(config, list(overrides)))


def backend_config(backend: str, model: str = "llama-3.1-8b", **role) -> dict:
    return {"model": model, "gpu": "h100-sxm", "engine": {"backend": backend, "workers": {"aggregated": role}},
            "workload": {"synthetic": {"num_requests": 1, "input_length": 10, "output_length": 10},
                         "client": {"mode": "closed_loop", "concurrency": 1}}}


# --------------------------------------------------------------------------- weights and pinned KV


def test_405b_weights_do_not_fit_one_h100_even_with_pinned_blocks():
    # 405,849,243,648 params × 2 bytes = 811.7e9 B = 756.0 GiB, 676.8 GiB more than the 79.2 GiB GPU;
    # a pinned num_gpu_blocks (the embedded default had 27000) used to skip the check.
    with pytest.raises(ServesimError, match=r"llama-3.1-405b in bf16 does not fit on h100-sxm at tp=1: its weights "
                                            r"alone take 756.0 GiB per GPU, 676.8 GiB more than the 79.2 GiB"):
        resolved(("model", "llama-3.1-405b"), (f"{ROLE}.scheduler.num_gpu_blocks", 27000))


def test_cli_405b_on_the_default_exits_2_with_one_sentence(tmp_path):
    proc = servesim_cli("run", "--set", "model=llama-3.1-405b", "--out", tmp_path / "out", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "weights alone take 756.0 GiB" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_default_pinned_blocks_fit_up_to_the_whole_gpu():
    # Left for KV = 79.2 − 14.957 (weights) − 1.177 (activations) − 1.75 (reserve) = 61.316 GiB
    # = 31,393.9 blocks of 2 MiB: vLLM allocates a pinned count whatever gpu_memory_utilization says.
    assert resolved((f"{ROLE}.scheduler.num_gpu_blocks", 27000)).config.engine.workers.aggregated.scheduler \
        .num_gpu_blocks == 27000   # the old default's pin runs
    resolved((f"{ROLE}.scheduler.num_gpu_blocks", 31393))
    with pytest.raises(ServesimError, match=r"num_gpu_blocks: 31,394 blocks need 61.3 GiB of KV cache per GPU but "
                                            r"only 61.3 GiB is left after weights \(15.0 GiB\), activations "
                                            r"\(1.18 GiB\) and the runtime reserve \(1.75 GiB\) on the 79.2 GiB "
                                            r"h100-sxm; .* use at most 31,393"):
        resolved((f"{ROLE}.scheduler.num_gpu_blocks", 31394))


def test_absurd_pinned_blocks_are_refused():
    # 1e15 blocks × 2 MiB = 2e15 MiB = 1,953,125,000,000 GiB.
    with pytest.raises(ServesimError, match=r"1,000,000,000,000,000 blocks need 1,953,125,000,000.0 GiB"):
        resolved((f"{ROLE}.scheduler.num_gpu_blocks", 10**15))


def test_pinned_blocks_count_per_attention_dp_rank():
    # attention_dp 2: each rank (one GPU at tp 1) holds half the worker's blocks, so 2 × 31,393 fit
    # and 62,787 (31,394 on one rank) does not.
    resolved((f"{ROLE}.attention_dp", 2), (f"{ROLE}.scheduler.num_gpu_blocks", 62786))
    with pytest.raises(ServesimError, match=r"62,787 blocks need 61.3 GiB .* use at most 62,786"):
        resolved((f"{ROLE}.attention_dp", 2), (f"{ROLE}.scheduler.num_gpu_blocks", 62787))


def test_sglang_pinned_pool_above_the_profiled_one_is_refused():
    # mem_fraction_static = round((81,100.8 − 13,440 reserved MB) / 81,100.8, 3) = 0.834 (engine/sglang/defaults.py);
    # 79.2 × 0.834 − 14.957 = 51.0958 GiB × 8,192 = 418,576 tokens, which SGLang caps a larger pin to.
    cfg = backend_config("sglang", scheduler={"max_total_tokens": 418576})
    assert resolve(load_config(cfg)).config.engine.workers.aggregated.scheduler.max_total_tokens == 418576
    cfg["engine"]["workers"]["aggregated"]["scheduler"]["max_total_tokens"] = 418577
    with pytest.raises(ServesimError, match=r"max_total_tokens: 418,577 tokens need 51.1 GiB of KV cache per GPU "
                                            r"but only 51.1 GiB is left after weights \(15.0 GiB\) within "
                                            r"mem_fraction_static 0.834 .*SGLang would cap the cache at 418,576"):
        resolve(load_config(cfg))


def test_trtllm_pinned_max_tokens_above_its_fraction_is_refused():
    # (79.2 − 14.957 − 1.75) × 0.9 = 56.2437 GiB × 8,192 = 460,748 tokens, 460,736 in 32-token blocks.
    cfg = backend_config("trtllm", scheduler={"max_tokens": 460736})
    resolve(load_config(cfg))
    cfg["engine"]["workers"]["aggregated"]["scheduler"]["max_tokens"] = 460737
    with pytest.raises(ServesimError, match=r"max_tokens: 460,737 tokens need .* TensorRT-LLM would cap the cache "
                                            r"at 460,736 tokens"):
        resolve(load_config(cfg))


@pytest.mark.parametrize("backend, key", [("sglang", "max_total_tokens"), ("trtllm", "max_tokens")])
def test_pinned_token_pools_do_not_skip_the_weights_check(backend, key):
    with pytest.raises(ServesimError, match="weights alone take 756.0 GiB"):
        resolve(load_config(backend_config(backend, "llama-3.1-405b", scheduler={key: 1000})))


# --------------------------------------------------------------------------- batch limits


def test_huge_max_num_seqs_names_vllms_own_rule():
    # vLLM checks max_num_batched_tokens >= max_num_seqs before it profiles memory.
    with pytest.raises(ServesimError, match=r"max_num_batched_tokens \(8192\) must be at least max_num_seqs "
                                            r"\(1000000\)"):
        resolved((f"{ROLE}.scheduler.max_num_seqs", 1_000_000))


def test_huge_batch_limits_name_the_activations_with_a_positive_shortfall():
    # Activations: 1e6 × 90,112 B + 1e6 × 128,256 × 4 B = 603.136e9 B = 561.7 GiB; with the weights
    # (14.957) and reserve (1.75) 578.4 GiB, 499.2 GiB more than the whole 79.2 GiB GPU (pinned blocks),
    # 507.1 GiB more than the 71.3 GiB gpu_memory_utilization 0.9 leaves (profiled blocks).
    limits = [(f"{ROLE}.scheduler.max_num_seqs", 10**6), (f"{ROLE}.scheduler.max_num_batched_tokens", 10**6)]
    with pytest.raises(ServesimError, match=r"activations for max_num_batched_tokens 1,000,000 and max_num_seqs "
                                            r"1,000,000 \(561.7 GiB\) need 578.4 GiB per GPU, 499.2 GiB more than "
                                            r"the 79.2 GiB of one h100-sxm; lower max_num_batched_tokens"):
        resolved(*limits, (f"{ROLE}.scheduler.num_gpu_blocks", 27000))
    with pytest.raises(ServesimError, match=r"507.1 GiB more than the 71.3 GiB that gpu_memory_utilization 0.9 "
                                            r"leaves of the 79.2 GiB h100-sxm; lower max_num_batched_tokens"):
        resolved(*limits)   # the embedded default leaves num_gpu_blocks to vLLM's profile


# --------------------------------------------------------------------------- parallelism


@pytest.mark.parametrize("tp", [3, 1024])
def test_tp_must_divide_the_attention_heads(tp):
    with pytest.raises(ServesimError, match=rf"{ROLE}.tp: llama-3.1-8b has 32 attention heads, which tp {tp} "
                                            r"does not divide .*; use tp 1, 2, 4, 8$"):
        resolved((f"{ROLE}.tp", tp))


def test_worker_within_the_nvlink_domain_unless_declared_to_span_nodes():
    # tp 16 divides 32 heads; 16 > 8 KV heads is 2 whole copies; but 16 GPUs > an HGX H100's 8.
    with pytest.raises(ServesimError, match=rf"{ROLE}: one worker spans tp 16 × attention_dp 1 × pp 1 = 16 GPUs, "
                                            r"more than the 8 of one node .*set gpus_per_node: 16"):
        resolved((f"{ROLE}.tp", 16))
    with pytest.raises(ServesimError, match=r"tp 4 × attention_dp 4 × pp 1 = 16 GPUs"):
        resolved((f"{ROLE}.tp", 4), (f"{ROLE}.attention_dp", 4))
    run = resolved((f"{ROLE}.tp", 16), (f"{ROLE}.gpus_per_node", 16))
    assert run.config.engine.workers.aggregated.gpus_per_node == 16
    # KV heads replicated past their count: one whole head per GPU at tp 8 and at tp 16
    # (32 layers × 2 × 1 head × 128 × 2 B = 16,384 B per token), not half a head.
    assert run.deployments["aggregated"].kv_bytes_per_token_per_gpu() == 16384
    assert resolved((f"{ROLE}.tp", 8)).deployments["aggregated"].kv_bytes_per_token_per_gpu() == 16384


def test_gpus_per_node_defaults_to_the_catalogues_nvlink_domain():
    assert resolved().config.engine.workers.aggregated.gpus_per_node == 8            # HGX H100
    assert resolved(("gpu", "gb200")).config.engine.workers.aggregated.gpus_per_node == 72   # NVL72


def test_kv_heads_must_split_or_replicate_whole(tmp_path):
    # 48 heads, 8 KV heads: tp 12 divides the heads but is neither a divisor nor a multiple of 8.
    model = tmp_path / "config.json"
    model.write_text(json.dumps({"hidden_size": 6144, "num_hidden_layers": 2, "num_attention_heads": 48,
                                 "num_key_value_heads": 8, "intermediate_size": 16384, "vocab_size": 32000}))
    with pytest.raises(ServesimError, match=rf"{ROLE}.tp: .* has 8 KV heads, and tp 12 neither divides them nor "
                                            r"is a multiple of them"):
        resolved(("model", str(model)), (f"{ROLE}.tp", 12), (f"{ROLE}.gpus_per_node", 12))
    resolved(("model", str(model)), (f"{ROLE}.tp", 16), (f"{ROLE}.gpus_per_node", 16))   # 2 copies of each


def test_ep_error_names_the_role():
    with pytest.raises(ServesimError, match=rf"{ROLE}.ep: ep 3 must divide tp × attention_dp = 2"):
        resolve(load_config(backend_config("vllm", "mixtral-8x7b", tp=2, ep=3)))


# --------------------------------------------------------------------------- fleet size


def test_fleet_size_is_bounded_before_set_up():
    assert MAX_FLEET_GPUS == 100_000
    resolved((f"{ROLE}.count", 100_000))   # resolving builds no worker, so this is quick
    with pytest.raises(ServesimError, match=r"the fleet has 1,000,000 GPUs \(aggregated 1,000,000 × 1 per "
                                            r"worker\), more than the 100,000"):
        resolved((f"{ROLE}.count", 1_000_000))
    # Prefill 50,000 × 1 + decode 25,001 × 2 = 100,002 GPUs.
    split = {"prefill": {"count": 50_000}, "decode": {"count": 25_001, "tp": 2}}
    with pytest.raises(ServesimError, match=r"100,002 GPUs \(prefill 50,000 × 1, decode 25,001 × 2 per worker\)"):
        resolved(("engine.workers", split))


# --------------------------------------------------------------------------- recommend


def test_recommend_reversed_range_says_so():
    with pytest.raises(ServesimError, match=r"--workload input=2000-1000: the range is reversed \(2000 > 1000\); "
                                            r"write it low-high, as input=1000-2000"):
        parse_workload("requests=100,input=2000-1000,output=100,rate=1")


def test_recommend_max_requests_must_be_positive():
    with pytest.raises(ServesimError, match=r"^--max-requests must be at least 1, got 0$"):
        build("llama-3.1-8b", "h100-sxm", 2, "requests=100,input=100,output=100,rate=1", "ttft_ms=2000",
              max_requests=0)


def test_recommend_leaves_out_tps_the_heads_do_not_split(tmp_path):
    # 14 heads (2 KV heads): tp 4 and 8 do not divide 14, so only tp 1 and 2 remain, said as such.
    model = tmp_path / "small.json"
    model.write_text(json.dumps({"hidden_size": 896, "num_hidden_layers": 2, "num_attention_heads": 14,
                                 "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 32000}))
    _, space, notes = build(str(model), "h100-sxm", 8, "requests=100,input=100,output=100,rate=1",
                            "ttft_ms=2000")
    assert {layout.get("aggregated", {}).get("tp") for layout in space.parameters["engine.workers"]} >= {1, 2}
    assert {role["tp"] for layout in space.parameters["engine.workers"] for role in layout.values()} == {1, 2}
    assert any(note.startswith("TP 4, 8 left out:") and "14 attention heads" in note for note in notes)
    assert not any("memory" in note for note in notes)
