"""`servesim deploy`: each engine's launch command, the benchmark command, and the folder.

Golden files (tests/data/deploy/<case>.json, plan.json's content) pin every argument; the
tests below also derive the flags that come from arithmetic. Regenerate the golden files
after a deliberate change with SERVESIM_REGOLD=1.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from servesim.config.loading import load_config
from servesim.deploy.benchmark import benchmark_command
from servesim.deploy.manifests import manifests
from servesim.deploy.plan import deploy_plan
from servesim.deploy.stacks import dynamo_graph, llm_d_values, stack_files
from servesim.deploy.writer import plan_json
from servesim.errors import ServesimError
from tests.support.cli import servesim_cli

GOLDEN = Path(__file__).parent / "data" / "deploy"
CLOSED_1K = {"synthetic": {"num_requests": 200, "input_length": 1024, "output_length": 1024},
             "client": {"mode": "closed_loop", "concurrency": 64}}

CASES = {
    # Llama-3.1-8B on one H100: everything resolved from vLLM 0.32's defaults.
    "vllm_aggregated": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "workload": CLOSED_1K},
    # P/D on vLLM, the decode pool's KV blocks pinned, fp8 weights from a bf16 checkpoint.
    "vllm_pd": {"model": "llama-3.1-70b", "gpu": "h200", "precision": "fp8", "kv_cache_dtype": "fp8",
                "engine": {"workers": {"prefill": {"count": 2, "tp": 2},
                                       "decode": {"tp": 4, "scheduler": {"num_gpu_blocks": 20000,
                                                                         "async_scheduling": False}}}},
                "workload": CLOSED_1K},
    # DeepSeek-R1 with DP attention and wide EP, MTP drafts, across two 8-GPU nodes.
    "vllm_dp_ep_mtp": {"model": "deepseek-r1", "gpu": "h200",
                       "engine": {"workers": {"aggregated": {"tp": 1, "attention_dp": 16, "ep": 16,
                                                             "gpus_per_node": 16,
                                                             "speculative": {"method": "mtp",
                                                                             "num_speculative_tokens": 1,
                                                                             "acceptance_rate": 0.8}}}},
                       "workload": CLOSED_1K},
    # SGLang P/D with DP attention on the decode side, ranged lengths (range ratio 0.1).
    "sglang_pd_dp": {"model": "deepseek-r1", "gpu": "h200",
                     "engine": {"backend": "sglang",
                                "workers": {"prefill": {"count": 2, "tp": 8, "ep": 8},
                                            "decode": {"tp": 2, "attention_dp": 8, "ep": 16,
                                                       "gpus_per_node": 16}}},
                     "workload": {"synthetic": {"num_requests": 200,
                                                "input_length": {"min": 900, "max": 1100},
                                                "output_length": {"min": 900, "max": 1100}},
                                  "client": {"mode": "bench", "request_rate": 8.0, "max_concurrency": 128}}},
    # SGLang aggregated with a pinned pool, a new-token-ratio schedule off the flag's line, EAGLE.
    "sglang_eagle": {"model": "llama-3.1-8b", "gpu": "h100-sxm",
                     "engine": {"backend": "sglang",
                                "workers": {"aggregated": {"scheduler": {"max_total_tokens": 200000,
                                                                         "init_new_token_ratio": 0.5,
                                                                         "schedule_policy": "lpm"},
                                                           "speculative": {"method": "eagle",
                                                                           "num_speculative_tokens": 3,
                                                                           "acceptance_rate": 0.7}}}},
                     "workload": {"synthetic": {"num_requests": 100, "input_length": 2048, "output_length": 256},
                                  "client": {"mode": "poisson", "rate": 4.0}}},
    # TensorRT-LLM P/D: batch waiting on the prefill side, attention DP and MTP on the decode side.
    "trtllm_pd_mtp": {"model": "deepseek-r1", "gpu": "b200", "kv_cache_dtype": "fp8",
                      "engine": {"backend": "trtllm", "workers": {
                          "prefill": {"count": 2, "tp": 4, "ep": 4,
                                      "scheduler": {"batch_wait_timeout_iters": 20,
                                                    "batch_wait_max_tokens_ratio": 0.9}},
                          "decode": {"tp": 1, "attention_dp": 8, "ep": 8,
                                     "speculative": {"method": "mtp", "num_speculative_tokens": 2,
                                                     "acceptance_rate": 0.7}}}},
                      "workload": CLOSED_1K},
}


def _plan(config: dict):
    return deploy_plan(load_config(config))


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_matches_its_golden_file(case):
    got = plan_json(_plan(CASES[case]))
    path = GOLDEN / f"{case}.json"
    if os.environ.get("SERVESIM_REGOLD"):
        path.write_text(json.dumps(got, indent=2) + "\n")
    assert got == json.loads(path.read_text())


def _flags(argv) -> dict:
    """--flag value pairs (a flag without a value maps to True)."""
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            out[argv[i]] = argv[i + 1] if has_value else True
            i += 2 if has_value else 1
        else:
            i += 1
    return out


def test_vllm_flags_carry_the_resolved_scheduler():
    plan = _plan(CASES["vllm_aggregated"])
    role = plan.roles[0]
    flags = _flags(role.command.argv)
    sched = role.spec.scheduler
    assert role.command.argv[:3] == ("vllm", "serve", "meta-llama/Llama-3.1-8B")
    assert flags["--max-num-seqs"] == str(sched.max_num_seqs)
    # vLLM 0.32 on a GPU of at least 70 GiB that is not an A100 (the H100: 79.2 GiB): 1024 / 8192.
    assert flags["--max-num-seqs"] == "1024" and flags["--max-num-batched-tokens"] == "8192"
    # The capture size: min(max_num_seqs × (1 + 0 drafts) × 2, 512, budget) = min(2048, 512, 8192) = 512.
    assert flags["--max-cudagraph-capture-size"] == "512"
    assert flags["--gpu-memory-utilization"] == "0.9" and "--num-gpu-blocks-override" not in flags
    assert flags["--enable-prefix-caching"] is True and flags["--async-scheduling"] is True
    assert "--kv-transfer-config" not in flags and "--quantization" not in flags
    assert role.command.image == "vllm/vllm-openai:v0.32.0"
    assert any(setting == "KV cache size" and f"{sched.num_gpu_blocks} blocks" in why
               for setting, why in role.command.notes)


def test_vllm_pd_flags():
    plan = _plan(CASES["vllm_pd"])
    prefill, decode = plan.roles
    pf, df = _flags(prefill.command.argv), _flags(decode.command.argv)
    assert (pf["--port"], df["--port"]) == ("8100", "8200")
    assert pf["--tensor-parallel-size"] == "2" and df["--tensor-parallel-size"] == "4"
    assert pf["--quantization"] == "fp8" and df["--kv-cache-dtype"] == "fp8"
    # The user pinned the decode pool: the override, not the memory fraction.
    assert df["--num-gpu-blocks-override"] == "20000" and "--gpu-memory-utilization" not in df
    assert "--gpu-memory-utilization" in pf
    assert df["--no-async-scheduling"] is True
    assert json.loads(pf["--kv-transfer-config"]) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def test_vllm_wide_ep_spans_nodes_with_a_headless_follower():
    role = _plan(CASES["vllm_dp_ep_mtp"]).roles[0]
    flags = _flags(role.command.argv)
    # 1 × 16 DP ranks = 16 GPUs over 8-GPU nodes: 2 nodes.
    assert flags["--data-parallel-size"] == "16" and flags["--enable-expert-parallel"] is True
    # Each 8-GPU host holds 8 one-GPU ranks; the second host starts at rank 8 ($START_RANK), headless.
    assert flags["--data-parallel-size-local"] == "8" and flags["--data-parallel-address"] == "$LEADER_ADDRESS"
    follower = _flags(role.command.follower_argv)
    assert follower["--data-parallel-start-rank"] == "$START_RANK" and follower["--headless"] is True
    assert "--nnodes" not in flags
    assert json.loads(flags["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 1}
    # max_num_seqs × (1 + 1 draft) × 2, capped at 512 (and at the budget).
    sched = role.spec.scheduler
    assert flags["--max-cudagraph-capture-size"] == str(min(sched.max_num_seqs * 4, 512,
                                                              sched.max_num_batched_tokens))


def test_vllm_tensor_parallelism_over_hosts_uses_node_ranks():
    config = {"model": "llama-3.1-405b", "gpu": "h100-sxm",
              "engine": {"workers": {"aggregated": {"tp": 16, "gpus_per_node": 16}}}, "workload": CLOSED_1K}
    role = _plan(config).roles[0]
    flags, follower = _flags(role.command.argv), _flags(role.command.follower_argv)
    # tp 16 over 8-GPU hosts: 2 nodes, the same command with node rank 0 and $NODE_RANK.
    assert (flags["--nnodes"], flags["--node-rank"], follower["--node-rank"]) == ("2", "0", "$NODE_RANK")
    assert follower["--headless"] is True


def test_sglang_pd_with_dp_attention():
    plan = _plan(CASES["sglang_pd_dp"])
    prefill, decode = plan.roles
    pf, df = _flags(prefill.command.argv), _flags(decode.command.argv)
    # SGLang's --tp-size counts the server's GPUs: tp 2 × 8 attention ranks = 16.
    assert df["--tp-size"] == "16" and df["--dp-size"] == "8" and df["--enable-dp-attention"] is True
    assert df["--ep-size"] == "16" and pf["--tp-size"] == "8" and "--dp-size" not in pf
    assert (pf["--disaggregation-mode"], df["--disaggregation-mode"]) == ("prefill", "decode")
    assert df["--num-reserved-decode-tokens"] == "512" and "--num-reserved-decode-tokens" not in pf
    assert "--disable-radix-cache" not in df   # the decode server's chunk cache is SGLang's own rule
    assert prefill.command.image == "lmsysorg/sglang:v0.5.9"


def test_sglang_ratio_schedule_and_eagle():
    role = _plan(CASES["sglang_eagle"]).roles[0]
    flags, env = _flags(role.command.argv), dict(role.command.env)
    assert flags["--max-total-tokens"] == "200000" and "--mem-fraction-static" not in flags
    assert flags["--schedule-policy"] == "lpm"
    # init 0.5 with min 0.098 and decay 0.0010033 kept: not 0.14 × init, so SGLang's variables.
    # decay steps = (0.5 - 0.098) / 0.0010033 = 400.7 -> 401.
    assert env == {"SGLANG_INIT_NEW_TOKEN_RATIO": "0.5", "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": "0.196",
                   "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS": "401"}
    assert (flags["--speculative-algorithm"], flags["--speculative-num-steps"],
            flags["--speculative-num-draft-tokens"]) == ("EAGLE", "3", "4")


def test_sglang_conservativeness_is_one_flag():
    # init 0.35 = 0.7 × 0.5, min 0.049 = 0.14 × 0.35, decay (0.35 - 0.049) / 600 = 0.000501667.
    config = {"engine": {"backend": "sglang", "workers": {"aggregated": {"scheduler": {
        "init_new_token_ratio": 0.35, "min_new_token_ratio": 0.049, "new_token_ratio_decay": 0.000501667}}}},
        "workload": CLOSED_1K}
    role = _plan(config).roles[0]
    assert _flags(role.command.argv)["--schedule-conservativeness"] == "0.5" and role.command.env == ()


def test_benchmark_inverts_the_random_dataset():
    bench = _plan(CASES["sglang_pd_dp"]).benchmark
    flags = _flags(bench.argv)
    # [900, 1100] = [floor(1000 × 0.9), ceil(1000 × 1.1)]: length 1000, ratio 0.1, for both.
    assert (flags["--random-input-len"], flags["--random-output-len"], flags["--random-range-ratio"]) == \
        ("1000", "1000", "0.1")
    assert (flags["--request-rate"], flags["--burstiness"], flags["--max-concurrency"]) == ("8.0", "1.0", "128")
    assert flags["--save-detailed"] is True and flags["--result-filename"] == "result.json"
    closed = _flags(_plan(CASES["vllm_aggregated"]).benchmark.argv)
    assert (closed["--request-rate"], closed["--max-concurrency"], closed["--num-prompts"]) == ("inf", "64", "200")
    assert "--random-range-ratio" not in closed


@pytest.mark.parametrize("lengths,why", [
    ({"input_length": {"min": 900, "max": 1100}, "output_length": {"min": 100, "max": 300}}, "range-ratio"),
    ({"lengths_from": "x.csv", "lengths_format": "azure"}, "resamples an azure file's lengths"),
])
def test_benchmark_refuses_what_the_random_dataset_cannot_send(lengths, why):
    config = load_config({"workload": {"synthetic": {"num_requests": 10, **lengths},
                                       "client": {"mode": "closed_loop", "concurrency": 2}}}).config
    bench = benchmark_command(config, "http://x", "m", "m")
    assert bench.argv is None and why in bench.notes[0]


@pytest.mark.parametrize("config,message", [
    ({"model": "deepseek-r1", "gpu": "h200", "engine": {"workers": {"aggregated": {"tp": 8, "ep": 4}}},
      "workload": CLOSED_1K}, "ep 4 is not tp × attention_dp (8)"),
    ({"model": "llama-3.1-8b", "engine": {"backend": "sglang", "workers": {
        "prefill": {}, "decode": {"scheduler": {"disable_radix_cache": False}}}}, "workload": CLOSED_1K},
     "disable_radix_cache: false on a decode worker"),
])
def test_settings_the_engine_version_cannot_take_are_refused(config, message):
    with pytest.raises(ServesimError, match="0.32.0|0.5.9") as err:
        _plan(config)
    assert message in str(err.value)


def test_deploy_cli_writes_the_folder(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(CASES["vllm_pd"]))
    out = tmp_path / "out"
    proc = servesim_cli("deploy", str(config), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert names == ["README.md", "benchmark.sh", "k8s.yaml", "launch_decode.sh", "launch_front.sh",
                     "launch_prefill.sh", "plan.json"]
    script = (out / "launch_decode.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash") and "    --num-gpu-blocks-override 20000 \\\n" in script
    assert os.access(out / "benchmark.sh", os.X_OK)
    assert json.loads((out / "plan.json").read_text()) == plan_json(_plan(CASES["vllm_pd"]))
    assert "servesim validate result.json" in (out / "README.md").read_text()


def test_deploy_cli_refusal_writes_nothing(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"model": "deepseek-r1", "gpu": "h200", "engine": {"workers": {
        "aggregated": {"tp": 8, "ep": 4}}}, "workload": CLOSED_1K}))
    out = tmp_path / "out"
    proc = servesim_cli("deploy", str(config), "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not out.exists()


def test_trtllm_command_and_its_llm_api_yaml():
    plan = _plan(CASES["trtllm_pd_mtp"])
    prefill, decode = plan.roles
    pf, df = _flags(prefill.command.argv), _flags(decode.command.argv)
    # Attention DP: every one of the 8 ranks attends alone, so --tp_size is 1 × 8.
    assert (pf["--tp_size"], pf["--ep_size"], df["--tp_size"], df["--ep_size"]) == ("4", "4", "8", "8")
    assert df["--extra_llm_api_options"] == "extra_llm_api_options_decode.yaml"
    extra = yaml.safe_load(dict(decode.command.files)["extra_llm_api_options_decode.yaml"])
    assert extra["enable_attention_dp"] is True and extra["kv_cache_config"]["dtype"] == "fp8"
    assert extra["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    assert extra["cache_transceiver_config"] == {"backend": "DEFAULT"}
    # The YAML replaces trtllm-serve's kv_cache_config whole: it repeats the memory fraction.
    assert extra["kv_cache_config"]["free_gpu_memory_fraction"] == float(df["--kv_cache_free_gpu_memory_fraction"])
    pextra = yaml.safe_load(dict(prefill.command.files)["extra_llm_api_options_prefill.yaml"])
    assert (pextra["batch_wait_timeout_iters"], pextra["batch_wait_max_tokens_ratio"]) == (20, 0.9)
    assert "enable_attention_dp" not in pextra and "speculative_config" not in pextra
    assert prefill.command.image == "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc2"
    front = yaml.safe_load(dict(plan.front.files)["disagg_config.yaml"])
    assert front["context_servers"]["urls"] == ["deepseek-r1-prefill:8100"]
    assert plan.front.argv == ("trtllm-serve", "disaggregated", "-c", "disagg_config.yaml")


def test_trtllm_refuses_attention_tp_under_attention_dp():
    config = {"model": "deepseek-r1", "gpu": "b200", "engine": {"backend": "trtllm", "workers": {
        "aggregated": {"tp": 2, "attention_dp": 4, "ep": 8}}}, "workload": CLOSED_1K}
    with pytest.raises(ServesimError, match="TensorRT-LLM 1.2.0rc2's server cannot be launched"):
        _plan(config)


def _objects(plan) -> list[dict]:
    return list(yaml.safe_load_all(manifests(plan)))


def test_manifests_per_role():
    objects = _objects(_plan(CASES["sglang_pd_dp"]))
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    # Prefill fits one host (8 GPUs): a Deployment; decode spans two 8-GPU hosts: a LeaderWorkerSet.
    assert kinds == [("Deployment", "deepseek-r1-prefill"), ("Service", "deepseek-r1-prefill"),
                     ("LeaderWorkerSet", "deepseek-r1-decode"), ("Service", "deepseek-r1-decode"),
                     ("Deployment", "deepseek-r1-front"), ("Service", "deepseek-r1-front")]
    prefill, lws = objects[0], objects[2]
    pod = prefill["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert prefill["spec"]["replicas"] == 2 and container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8100}
    assert container["image"] == "lmsysorg/sglang:v0.5.9"
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert "--node-rank $NODE_RANK" in worker["command"][2] and "ports" not in worker
    assert objects[3]["spec"]["selector"] == {"app": "deepseek-r1-decode", "servesim.part": "leader"}


def test_manifests_mount_the_commands_files():
    objects = _objects(_plan(CASES["trtllm_pd_mtp"]))
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    assert sorted(config_maps) == ["deepseek-r1-decode-files", "deepseek-r1-front-files", "deepseek-r1-prefill-files"]
    assert "extra_llm_api_options_decode.yaml" in config_maps["deepseek-r1-decode-files"]["data"]
    decode = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "deepseek-r1-decode")
    container = decode["spec"]["template"]["spec"]["containers"][0]
    assert container["workingDir"] == "/servesim"
    assert {"name": "servesim-files", "mountPath": "/servesim"} in container["volumeMounts"]


SWEEP_BASE = """\
model: llama-3.1-8b
gpu: h100-sxm
engine:
  timing: {kind: fixed, pass_ms: 10.0}
  workers:
    aggregated:
      scheduler: {num_gpu_blocks: 4000, max_model_len: 4096}
workload:
  synthetic: {num_requests: 40, input_length: 256, output_length: 32}
  client: {mode: closed_loop, concurrency: 8}
"""
SWEEP_SPACE = """\
parameters:
  engine.workers.aggregated.scheduler.max_num_seqs: [2, 8]
"""


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    (root / "base.yaml").write_text(SWEEP_BASE)
    (root / "space.yaml").write_text(SWEEP_SPACE)
    proc = servesim_cli("sweep", str(root / "base.yaml"), "--space", str(root / "space.yaml"), "--out",
                        str(root / "sw"), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return root / "sw"


def test_deploy_a_sweep_trial(sweep_folder, tmp_path):
    proc = servesim_cli("deploy", str(sweep_folder), "--trial", "1", "--out", str(tmp_path / "t1"))
    assert proc.returncode == 0, proc.stderr
    argv = json.loads((tmp_path / "t1" / "plan.json").read_text())["roles"][0]["argv"]
    # Trial 1 is the space's second value.
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    for args, message in ((["--trial", "7"], "has no trial 7 (trials 0-1)"),
                          ([], "either --trial N or --pareto")):
        proc = servesim_cli("deploy", str(sweep_folder), *args, "--out", str(tmp_path / "bad"))
        assert proc.returncode == 2 and message in proc.stderr and not (tmp_path / "bad").exists()


def test_deploy_the_pareto_trials(sweep_folder, tmp_path):
    proc = servesim_cli("deploy", str(sweep_folder), "--pareto", "--out", str(tmp_path / "p"))
    assert proc.returncode == 0, proc.stderr
    folders = sorted(p.name for p in (tmp_path / "p").iterdir() if p.is_dir())
    assert folders and all(name.startswith("trial-") for name in folders)
    assert all((tmp_path / "p" / name / "launch_aggregated.sh").is_file() for name in folders)


def test_trial_flags_need_a_sweep_folder(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(SWEEP_BASE)
    proc = servesim_cli("deploy", str(config), "--trial", "0", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "give its folder, not a config file" in proc.stderr


def test_recommend_emits_the_best_deployment(tmp_path):
    proc = servesim_cli("recommend", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1",
                        "--workload", "requests=20,input=128,output=16,concurrency=2",
                        "--slo", "ttft_ms=5000,tpot_ms=200", "--workers", "1", "--quiet",
                        "--out", str(tmp_path / "sw"), "--emit", str(tmp_path / "emit"))
    assert proc.returncode == 0, proc.stderr
    best = yaml.safe_load((tmp_path / "sw" / "best.yaml").read_text())
    plan = json.loads((tmp_path / "emit" / "plan.json").read_text())
    argv = plan["roles"][0]["argv"]
    sched = best["engine"]["workers"]["aggregated"]["scheduler"]
    assert argv[argv.index("--max-num-seqs") + 1] == str(sched["max_num_seqs"])
    assert plan["benchmark"][plan["benchmark"].index("--max-concurrency") + 1] == "2"


TRT_OPTIONS = yaml.safe_load((GOLDEN / "trtllm-1.2.0rc2-options.yaml").read_text())


@pytest.mark.parametrize("spec", [None, {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.6},
                                  {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.5}])
def test_trtllm_options_are_the_versions_own(spec):
    config = json.loads(json.dumps(CASES["trtllm_pd_mtp"]))
    if spec is not None:
        config["engine"]["workers"]["decode"]["speculative"] = spec
    plan = _plan(config)
    for role in plan.roles:
        flags = [w for w in role.command.argv if w.startswith("-")]
        assert set(flags) <= set(TRT_OPTIONS["serve_options"]), set(flags) - set(TRT_OPTIONS["serve_options"])
        extra = yaml.safe_load(dict(role.command.files)[f"extra_llm_api_options_{role.spec.name}.yaml"])
        assert set(extra) <= set(TRT_OPTIONS["llm_api_keys"])
        assert set(extra["kv_cache_config"]) <= set(TRT_OPTIONS["kv_cache_config"])
        sched = extra["scheduler_config"]
        assert set(sched) <= set(TRT_OPTIONS["scheduler_config"])
        assert sched["capacity_scheduler_policy"] in TRT_OPTIONS["capacity_scheduler_policy"]
        assert set(sched["dynamic_batch_config"]) == set(TRT_OPTIONS["dynamic_batch_config"])
        if "speculative_config" in extra:
            decoding = extra["speculative_config"]
            assert set(decoding) <= set(TRT_OPTIONS["speculative_config"][decoding["decoding_type"]])
        if "cache_transceiver_config" in extra:
            assert extra["cache_transceiver_config"]["backend"] in TRT_OPTIONS["cache_transceiver_backend"]
    front = yaml.safe_load(dict(plan.front.files)["disagg_config.yaml"])
    assert set(front) <= set(TRT_OPTIONS["disagg_config_keys"])
    assert set(front["context_servers"]) <= set(TRT_OPTIONS["disagg_server_keys"])
    assert set(w for w in plan.front.argv if w.startswith("-")) <= set(TRT_OPTIONS["disaggregated_options"])


def test_llm_d_values():
    values = llm_d_values(_plan(CASES["vllm_pd"]))
    assert values["routing"]["proxy"] == {"enabled": True, "connector": "nixlv2"}
    assert values["modelArtifacts"]["uri"] == "hf://meta-llama/Llama-3.1-70B"
    decode, prefill = values["decode"], values["prefill"]
    assert (decode["replicas"], decode["parallelism"], prefill["replicas"], prefill["parallelism"]) == \
        (1, {"tensor": 4, "data": 1}, 2, {"tensor": 2, "data": 1})
    args = decode["containers"][0]["args"]
    # The chart writes the port, the model name and the parallelism itself; the rest as --flag=value.
    assert "--num-gpu-blocks-override=20000" in args and not any(a.startswith("--port") for a in args)
    assert not any(a.startswith("--tensor-parallel-size") for a in args)
    assert decode["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    aggregated = llm_d_values(_plan(CASES["vllm_aggregated"]))
    assert aggregated["prefill"] == {"create": False} and aggregated["routing"]["proxy"]["enabled"] is False


def test_dynamo_graph():
    graph = dynamo_graph(_plan(CASES["vllm_pd"]))
    services = graph["spec"]["services"]
    assert sorted(services) == ["Frontend", "VllmDecodeWorker", "VllmPrefillWorker"]
    prefill = services["VllmPrefillWorker"]
    assert (prefill["componentType"], prefill["subComponentType"], prefill["replicas"]) == ("worker", "prefill", 2)
    main = prefill["extraPodSpec"]["mainContainer"]
    assert main["command"] == ["python3", "-m", "dynamo.vllm"]
    args = main["args"]
    assert args[:2] == ["--model", "meta-llama/Llama-3.1-70B"] and args[-2:] == ["--disaggregation-mode", "prefill"]
    assert "--kv-transfer-config" not in args and "--port" not in args
    sglang = dynamo_graph(_plan(CASES["sglang_pd_dp"]))["spec"]["services"]["SglangDecodeWorker"]
    assert sglang["multinode"] == {"nodeCount": 2} and sglang["resources"]["limits"] == {"gpu": "16"}


@pytest.mark.parametrize("case,stack,message", [
    ("sglang_pd_dp", "llm-d", "llm-d-modelservice values for vLLM servers"),
    ("trtllm_pd_mtp", "dynamo", "no worker command for TensorRT-LLM"),
    ("vllm_aggregated", "helm", "--stack must be one of plain, llm-d, dynamo"),
])
def test_stacks_refused(case, stack, message):
    with pytest.raises(ServesimError, match=message):
        stack_files(_plan(CASES[case]), stack)


def test_a_mooncake_trace_is_measured_with_aiperf(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}\n')
    config = {"workload": {"trace": str(trace), "format": "mooncake", "trace_block_size": 512,
                           "max_requests": 1, "client": {"mode": "open_loop", "time_scale": 0.5}}}
    bench = _plan(config).benchmark
    flags = _flags(bench.argv)
    assert bench.argv[:2] == ("aiperf", "profile") and flags["--input-file"] == str(trace)
    assert (flags["--custom-dataset-type"], flags["--prompt-input-tokens-block-size"]) == ("mooncake_trace", "512")
    # time_scale 0.5 halves the gaps: aiperf's speed-up ratio 1 / 0.5 = 2.
    assert flags["--fixed-schedule"] is True and flags["--synthesis-speedup-ratio"] == "2.0"
    assert flags["--request-count"] == "1"
    # The embedded default replays an Azure CSV, which aiperf does not read.
    default = deploy_plan(load_config(None)).benchmark
    assert default.argv is None and "azure trace" in default.notes[0]


def test_sharegpt_lengths_are_measured_with_vllms_sharegpt_dataset():
    sample = Path(__file__).parent / "data" / "sharegpt" / "sample.json"
    config = {"workload": {"synthetic": {"num_requests": 5, "lengths_from": str(sample), "lengths_format": "sharegpt"},
                           "client": {"mode": "poisson", "rate": 2.0}}}
    flags = _flags(_plan(config).benchmark.argv)
    assert (flags["--dataset-name"], flags["--dataset-path"], flags["--num-prompts"]) == ("sharegpt", str(sample), "5")
    assert (flags["--request-rate"], flags["--burstiness"]) == ("2.0", "1.0")
