"""`trtllm-serve` for one role, with its `--extra_llm_api_options` YAML (TensorRT-LLM 1.2.0rc2).

The command-line options are `tensorrt_llm/commands/serve.py`'s (underscores, PyTorch backend);
everything the CLI has no option for goes in the LLM-API YAML (`llmapi/llm_args.py`
`TorchLlmArgs`, `KvCacheConfig`, `SchedulerConfig`, `CacheTransceiverConfig`, the decoding
configs). trtllm-serve merges that YAML over its own arguments one top-level key at a time, so a
`kv_cache_config` block repeats the memory fraction and a `scheduler_config` block repeats the
dynamic-batch settings trtllm-serve would otherwise inject. Read from sources near the
1.2.0rc2 tag (docs/deploy.md says which).
"""

from __future__ import annotations

import yaml

from servesim.engine.launch import ArgvBuilder, FrontLaunch, LaunchCommand, RoleLaunch, unsupported

IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:{version}"
# get_llm_args' own scheduler_config: dynamic batch-size tuning on, as trtllm-serve starts it.
_DYNAMIC_BATCH = {"enable_batch_size_tuning": True, "enable_max_num_tokens_tuning": False,
                  "dynamic_batch_moving_average_window": 128}


def trtllm_launch(launch: RoleLaunch) -> LaunchCommand:
    if launch.nodes > 1:
        raise unsupported(launch, "TensorRT-LLM", f"a worker of {launch.gpus} GPUs over {launch.nodes} hosts "
                          "(trtllm-serve starts multi-host workers through MPI or Slurm, which servesim deploy "
                          "does not write)")
    sched = launch.scheduler
    options = f"extra_llm_api_options_{launch.role}.yaml"
    cmd = ArgvBuilder(["trtllm-serve", launch.model_path])
    cmd.add("--host", "0.0.0.0")
    cmd.add("--port", launch.port)
    cmd.add("--backend", "pytorch")
    cmd.add("--tp_size", _tp_size(launch))
    if launch.pp > 1:
        cmd.add("--pp_size", launch.pp)
    if launch.ep > 1:
        cmd.add("--ep_size", launch.ep)
    cmd.add("--max_batch_size", sched.max_batch_size)
    cmd.add("--max_num_tokens", sched.max_num_tokens)
    cmd.add("--max_seq_len", sched.max_seq_len)
    cmd.add("--kv_cache_free_gpu_memory_fraction", sched.free_gpu_memory_fraction)
    cmd.add("--extra_llm_api_options", options)
    extra = _llm_api_options(cmd, launch)
    if launch.precision != launch.checkpoint_precision:
        cmd.note("model", f"the simulation ran {launch.precision} weights: TensorRT-LLM loads them from a "
                 "checkpoint quantized ahead (ModelOpt); pass its path with --model-path")
    if "max_tokens" not in launch.pinned:
        cmd.note("KV cache size", f"sized by TensorRT-LLM from free_gpu_memory_fraction; the simulation "
                 f"predicted {sched.max_tokens:,} tokens: compare with the KV cache manager's start-up log")
    cmd.note("scheduler_config.dynamic_batch_config", "batch-size tuning is on as trtllm-serve starts it; "
             "servesim holds max_batch_size fixed")
    files = ((options, yaml.safe_dump(extra, sort_keys=False)),)
    return LaunchCommand(tuple(cmd.argv), IMAGE.format(version=launch.engine_version), tuple(cmd.env), files,
                         tuple(cmd.notes), "/health")


def _tp_size(launch: RoleLaunch) -> int:
    if launch.attention_dp > 1 and launch.tp > 1:
        # enable_attention_dp gives every rank of the server its own attention: attention TP is 1.
        raise unsupported(launch, "TensorRT-LLM", f"tp {launch.tp} with attention_dp {launch.attention_dp} "
                          "(with enable_attention_dp each of its ranks attends alone: use tp 1)")
    return launch.tp * launch.attention_dp


def _llm_api_options(cmd: ArgvBuilder, launch: RoleLaunch) -> dict:
    sched = launch.scheduler
    kv = {"free_gpu_memory_fraction": sched.free_gpu_memory_fraction, "enable_block_reuse": sched.enable_block_reuse,
          "tokens_per_block": sched.tokens_per_block}
    if "max_tokens" in launch.pinned:
        kv["max_tokens"] = sched.max_tokens
    if launch.kv_cache_dtype == "fp8":
        kv["dtype"] = "fp8"
    if launch.kv_offload is not None:
        kv["host_cache_size"] = int(launch.kv_offload.host_gb * 1e9)   # bytes
    extra = {
        "kv_cache_config": kv,
        "scheduler_config": {"capacity_scheduler_policy": sched.capacity_scheduler_policy,
                             "dynamic_batch_config": dict(_DYNAMIC_BATCH)},
        "enable_chunked_prefill": sched.enable_chunked_context,
        "disable_overlap_scheduler": sched.disable_overlap_scheduler,
    }
    if launch.attention_dp > 1:
        extra["enable_attention_dp"] = True
    if sched.batch_wait_timeout_iters:
        extra["batch_wait_timeout_iters"] = sched.batch_wait_timeout_iters
    if sched.batch_wait_max_tokens_ratio:
        extra["batch_wait_max_tokens_ratio"] = sched.batch_wait_max_tokens_ratio
    spec = _speculative(cmd, launch)
    if spec is not None:
        extra["speculative_config"] = spec
    if launch.disaggregated:
        extra["cache_transceiver_config"] = {"backend": "DEFAULT"}
    return extra


def _speculative(cmd: ArgvBuilder, launch: RoleLaunch) -> dict | None:
    spec = launch.speculative
    if spec is None:
        return None
    k = spec.num_speculative_tokens
    if spec.method == "mtp":
        return {"decoding_type": "MTP", "num_nextn_predict_layers": k}
    if spec.method == "eagle":
        cmd.note("speculative_config.speculative_model_dir", "set the EAGLE draft model in place of "
                 "<EAGLE draft model>")
        return {"decoding_type": "Eagle", "max_draft_len": k, "speculative_model_dir": "<EAGLE draft model>"}
    cmd.note("speculative_config.max_matching_ngram_size", "servesim models the drafts' acceptance, not the "
             "n-gram match: 2 is written")
    return {"decoding_type": "NGram", "max_draft_len": k, "max_matching_ngram_size": 2}


def trtllm_front(front: FrontLaunch) -> LaunchCommand | None:
    """P/D: `trtllm-serve disaggregated -c disagg_config.yaml`, its context and generation servers
    given as URLs (one per instance; here each role's Service stands for its instances)."""
    prefill, decode = front.role("prefill"), front.role("decode")
    if prefill is None or decode is None:
        return None
    config = {"hostname": "0.0.0.0", "port": front.port,
              "context_servers": {"num_instances": 1, "urls": [f"{prefill.host}:{prefill.port}"]},
              "generation_servers": {"num_instances": 1, "urls": [f"{decode.host}:{decode.port}"]}}
    notes = (("disagg_config.yaml", f"one URL per role's Service; list each of the {prefill.replicas} prefill "
              f"and {decode.replicas} decode servers (num_instances = their count) to let trtllm-serve balance "
              "them itself"),)
    return LaunchCommand(("trtllm-serve", "disaggregated", "-c", "disagg_config.yaml"),
                         IMAGE.format(version=front.engine_version),
                         files=(("disagg_config.yaml", yaml.safe_dump(config, sort_keys=False)),), notes=notes)
