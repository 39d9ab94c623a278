"""`vllm serve` for one role, with the settings the simulation used (vLLM 0.32.0).

Flag names and forms are vLLM 0.32.0's `EngineArgs.add_cli_args` (vllm/engine/arg_utils.py):
booleans are `argparse.BooleanOptionalAction` pairs (`--enable-prefix-caching` /
`--no-enable-prefix-caching`), JSON configs (`--speculative-config`, `--kv-transfer-config`)
take one JSON string. docs/deploy.md lists each flag with the servesim key it comes from.
"""

from __future__ import annotations

from servesim.engine.launch import ArgvBuilder, FrontLaunch, LaunchCommand, RoleLaunch, precision_flags, unsupported, without_flags

IMAGE = "vllm/vllm-openai:v{version}"
_KV_DTYPE = {"fp8": "fp8", "bf16": "bfloat16"}
# P/D: NIXL moves the KV between the two roles' GPUs (vLLM's disaggregated-serving docs).
_KV_TRANSFER = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def vllm_launch(launch: RoleLaunch) -> LaunchCommand:
    sched = launch.scheduler
    cmd = ArgvBuilder(["vllm", "serve", launch.model_path])
    cmd.add("--served-model-name", launch.served_model_name)
    cmd.add("--host", "0.0.0.0")
    cmd.add("--port", launch.port)
    _parallelism(cmd, launch)
    precision_flags(cmd, launch, "vLLM", _KV_DTYPE)
    cmd.add("--max-num-seqs", sched.max_num_seqs)
    cmd.add("--max-num-batched-tokens", sched.max_num_batched_tokens)
    cmd.add("--max-model-len", sched.max_model_len)
    cmd.add("--block-size", sched.block_size)
    _kv_size(cmd, launch)
    cmd.add("--enable-chunked-prefill" if sched.enable_chunked_prefill else "--no-enable-chunked-prefill")
    cmd.add("--enable-prefix-caching" if sched.enable_prefix_caching else "--no-enable-prefix-caching")
    if sched.long_prefill_token_threshold:
        cmd.add("--long-prefill-token-threshold", sched.long_prefill_token_threshold)
    if sched.watermark:
        cmd.add("--watermark", sched.watermark)
    cmd.add("--async-scheduling" if sched.async_scheduling else "--no-async-scheduling")
    cmd.add("--max-cudagraph-capture-size", sched.max_cudagraph_capture_size)
    _speculative(cmd, launch)
    _offload(cmd, launch)
    if launch.disaggregated:
        cmd.add("--kv-transfer-config", _KV_TRANSFER)
        cmd.note("--kv-transfer-config", "NixlConnector with kv_role kv_both on both roles; the proxy in "
                 "front (vLLM's disagg proxy example) sends each request to a prefill and then a decode server")
    follower = _multi_node(cmd, launch)
    return LaunchCommand(tuple(cmd.argv), IMAGE.format(version=launch.engine_version), tuple(cmd.env), (),
                         tuple(cmd.notes), "/health", follower)


def _parallelism(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    cmd.add("--tensor-parallel-size", launch.tp)
    if launch.pp > 1:
        cmd.add("--pipeline-parallel-size", launch.pp)
    if launch.attention_dp > 1:
        cmd.add("--data-parallel-size", launch.attention_dp)
    if launch.ep > 1:
        # vLLM's expert parallelism spans every GPU of the worker (tp × dp); it has no smaller size.
        if launch.ep != launch.tp * launch.attention_dp:
            raise unsupported(launch, "vLLM", f"ep {launch.ep} is not tp × attention_dp "
                              f"({launch.tp * launch.attention_dp}); --enable-expert-parallel spreads "
                              "experts over all of them")
        cmd.add("--enable-expert-parallel")


def _kv_size(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    sched = launch.scheduler
    if "num_gpu_blocks" in launch.pinned:
        cmd.add("--num-gpu-blocks-override", sched.num_gpu_blocks)
        return
    cmd.add("--gpu-memory-utilization", launch.gpu_memory_utilization)
    cmd.note("KV cache size", f"sized by vLLM from --gpu-memory-utilization; the simulation predicted "
             f"{sched.num_gpu_blocks} blocks ({launch.predicted_kv_tokens:,} tokens): compare with "
             "\"GPU KV cache size\" in the server's start-up log")


def _speculative(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    spec = launch.speculative
    if spec is None:
        return
    config = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.method == "eagle":
        config["model"] = "<EAGLE draft model>"
        cmd.note("--speculative-config", "set the EAGLE draft model's path in place of <EAGLE draft model>")
    cmd.add("--speculative-config", config)
    cmd.note("speculative acceptance", "the simulation assumed the configured acceptance rate; vLLM logs "
             "the measured per-position acceptance (SpecDecoding metrics) to compare")


def _offload(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    offload = launch.kv_offload
    if offload is None:
        return
    # vLLM counts the buffer in GiB summed over the TP ranks; servesim's host_gb is GB per worker.
    cmd.add("--kv-offloading-size", round(offload.host_gb * 1e9 / 1024**3, 3))
    cmd.add("--kv-offloading-backend", "native")


def _multi_node(cmd: ArgvBuilder, launch: RoleLaunch) -> tuple[str, ...] | None:
    if launch.nodes <= 1:
        return None
    ranks_gpus = launch.tp * launch.pp
    if ranks_gpus <= launch.gpus_per_host and launch.gpus_per_host % ranks_gpus == 0:
        # Data-parallel ranks spread over hosts, each rank inside one: vLLM's multi-node data
        # parallelism (the first host serves the API, the others run --headless from their start rank).
        local = launch.gpus_per_host // ranks_gpus
        cmd.add("--data-parallel-size-local", local)
        cmd.add("--data-parallel-address", "$LEADER_ADDRESS")
        cmd.add("--data-parallel-rpc-port", 13345)
        follower = [*cmd.argv, "--data-parallel-start-rank", "$START_RANK", "--headless"]
        cmd.env.append(("RANKS_PER_HOST", str(local)))   # host k starts at rank k × this ($START_RANK)
        return tuple(follower)
    # One engine's tensor/pipeline ranks over several hosts: vLLM's multiprocessing backend, every
    # host the same command with its own --node-rank; rank 0 serves the API.
    cmd.add("--nnodes", launch.nodes)
    cmd.add("--node-rank", "0")
    cmd.add("--master-addr", "$LEADER_ADDRESS")
    follower = [*cmd.argv]
    follower[follower.index("--node-rank") + 1] = "$NODE_RANK"
    follower.append("--headless")
    return tuple(follower)


def vllm_front(front: FrontLaunch) -> LaunchCommand | None:
    """P/D: vLLM's NIXL proxy (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py at the
    version's tag) sends each request to a prefill server with max_tokens 1, then to a decode
    server with the transfer's parameters. Aggregated replicas sit behind their Service."""
    prefill, decode = front.role("prefill"), front.role("decode")
    if prefill is None or decode is None:
        return None
    argv = ("python3", "toy_proxy_server.py", "--host", "0.0.0.0", "--port", str(front.port),
            "--prefiller-hosts", prefill.host, "--prefiller-ports", str(prefill.port),
            "--decoder-hosts", decode.host, "--decoder-ports", str(decode.port))
    notes = (("P/D proxy", f"toy_proxy_server.py is in vLLM's repository at v{front.engine_version} "
              "(tests/v1/kv_connector/nixl_integration/), not in the image: copy it beside the command "
              "(or into a ConfigMap mounted in the front's pod)"),)
    return LaunchCommand(argv, IMAGE.format(version=front.engine_version), notes=notes, health_path="/healthcheck")


# What a Dynamo worker does not take from `vllm serve`: it serves no HTTP (the Frontend does), sets
# up NIXL itself for P/D, and the operator places multi-node ranks.
_NOT_FOR_DYNAMO = {"--host", "--port", "--kv-transfer-config", "--nnodes", "--node-rank", "--master-addr",
                   "--data-parallel-size-local", "--data-parallel-address", "--data-parallel-rpc-port"}


def vllm_dynamo_worker(launch: RoleLaunch, command: LaunchCommand) -> tuple[str, tuple[str, ...]]:
    """Dynamo 1.x's vLLM worker (`python -m dynamo.vllm`): vLLM's engine flags, the model as --model,
    and the role as --disaggregation-mode."""
    args = ["--model", launch.model_path, *without_flags(command.argv[3:], _NOT_FOR_DYNAMO)]
    if launch.disaggregated:
        args += ["--disaggregation-mode", launch.role]
    return "dynamo.vllm", tuple(args)
