"""`python -m sglang.launch_server` for one role, with the settings the simulation used (SGLang 0.5.9).

Flag names are sglang 0.5.9's `ServerArgs.add_cli_args` (python/sglang/srt/server_args.py).
With DP attention, SGLang's `--tp-size` counts every GPU of the server and `--dp-size` the
attention ranks among them (each attends with tp-size / dp-size GPUs), so servesim's
`tp × attention_dp` is its `--tp-size`. The new-token-ratio schedule is one flag,
`--schedule-conservativeness` c (init 0.7 c, min 0.14 × init, decay (init − min) / 600:
`Scheduler.__init__`), when the three values follow it; otherwise the environment variables
SGLang reads them from.
"""

from __future__ import annotations

from servesim.engine.launch import ArgvBuilder, FrontLaunch, LaunchCommand, RoleLaunch, precision_flags, unsupported, without_flags

IMAGE = "lmsysorg/sglang:v{version}"
_KV_DTYPE = {"fp8": "fp8_e4m3", "bf16": "bf16"}
_INIT_RATIO, _MIN_FACTOR, _DECAY_STEPS = 0.7, 0.14, 600   # SGLANG_INIT_NEW_TOKEN_RATIO etc. defaults
_SPECULATIVE = {"eagle": "EAGLE", "mtp": "NEXTN", "ngram": "NGRAM"}


def sglang_launch(launch: RoleLaunch) -> LaunchCommand:
    sched = launch.scheduler
    cmd = ArgvBuilder(["python3", "-m", "sglang.launch_server", "--model-path", launch.model_path])
    cmd.add("--served-model-name", launch.served_model_name)
    cmd.add("--host", "0.0.0.0")
    cmd.add("--port", launch.port)
    _parallelism(cmd, launch)
    precision_flags(cmd, launch, "SGLang", _KV_DTYPE)
    cmd.add("--max-running-requests", sched.max_running_requests)
    cmd.add("--chunked-prefill-size", sched.chunked_prefill_size)
    cmd.add("--max-prefill-tokens", sched.max_prefill_tokens)
    _kv_size(cmd, launch)
    cmd.add("--page-size", sched.page_size)
    cmd.add("--context-length", sched.context_length)
    cmd.add("--schedule-policy", sched.schedule_policy)
    _cache(cmd, launch)
    if sched.disable_overlap_schedule:
        cmd.add("--disable-overlap-schedule")
    if sched.enable_mixed_chunk:
        cmd.add("--enable-mixed-chunk")
    _new_token_ratio(cmd, sched)
    cmd.add("--scheduler-recv-interval", sched.scheduler_recv_interval)
    _speculative(cmd, launch)
    _disaggregation(cmd, launch)
    follower = _multi_node(cmd, launch)
    return LaunchCommand(tuple(cmd.argv), IMAGE.format(version=launch.engine_version), tuple(cmd.env), (),
                         tuple(cmd.notes), "/health", follower)


def _parallelism(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    cmd.add("--tp-size", launch.tp * launch.attention_dp)
    if launch.attention_dp > 1:
        cmd.add("--dp-size", launch.attention_dp)
        cmd.add("--enable-dp-attention")
    if launch.ep > 1:
        cmd.add("--ep-size", launch.ep)
    if launch.pp > 1:
        cmd.add("--pp-size", launch.pp)


def _kv_size(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    sched = launch.scheduler
    if "max_total_tokens" in launch.pinned:
        cmd.add("--max-total-tokens", sched.max_total_tokens)
        return
    cmd.add("--mem-fraction-static", sched.mem_fraction_static)
    ranks = launch.attention_dp
    per_rank = f" ({sched.max_total_tokens // ranks:,} on each of the {ranks} attention ranks)" if ranks > 1 else ""
    cmd.note("KV cache size", f"sized by SGLang from --mem-fraction-static; the simulation predicted "
             f"{sched.max_total_tokens:,} tokens{per_rank}: compare with \"max_total_num_tokens\" in the "
             "server's start-up log")


def _cache(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    sched = launch.scheduler
    if launch.role == "decode":
        # 0.5.9's _handle_pd_disaggregation forces a chunk cache on every decode server.
        if not sched.disable_radix_cache:
            raise unsupported(launch, "SGLang", "scheduler.disable_radix_cache: false on a decode worker "
                              "(its decode servers always run a chunk cache)")
        return
    if sched.disable_radix_cache:
        cmd.add("--disable-radix-cache")
    offload = launch.kv_offload
    if offload is not None:
        ranks = launch.tp * launch.attention_dp
        cmd.add("--enable-hierarchical-cache")
        cmd.add("--hicache-size", max(int(offload.host_gb // ranks), 1))   # GB per rank
        cmd.note("--hicache-size", f"host KV pool per GPU rank: {offload.host_gb} GB over {ranks} ranks")


def _new_token_ratio(cmd: ArgvBuilder, sched) -> None:
    conservativeness = sched.init_new_token_ratio / _INIT_RATIO
    derived_min = sched.init_new_token_ratio * _MIN_FACTOR
    derived_decay = (sched.init_new_token_ratio - derived_min) / _DECAY_STEPS
    if abs(sched.min_new_token_ratio - derived_min) < 5e-4 and abs(sched.new_token_ratio_decay
                                                                  - derived_decay) < 5e-7:
        if abs(conservativeness - 1) > 1e-9:
            cmd.add("--schedule-conservativeness", round(conservativeness, 6))
        return
    # Values the flag cannot give: set SGLang's own variables (init / min factor / decay steps).
    cmd.env.append(("SGLANG_INIT_NEW_TOKEN_RATIO", str(sched.init_new_token_ratio)))
    cmd.env.append(("SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR",
                    str(round(sched.min_new_token_ratio / sched.init_new_token_ratio, 6))))
    steps = (sched.init_new_token_ratio - sched.min_new_token_ratio) / sched.new_token_ratio_decay \
        if sched.new_token_ratio_decay else 10**9
    cmd.env.append(("SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS", str(max(round(steps), 1))))


def _speculative(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    spec = launch.speculative
    if spec is None:
        return
    k = spec.num_speculative_tokens
    cmd.add("--speculative-algorithm", _SPECULATIVE[spec.method])
    if spec.method != "ngram":
        # A chain of k drafts (top-k 1): k steps, k + 1 tokens verified.
        cmd.add("--speculative-num-steps", k)
        cmd.add("--speculative-eagle-topk", 1)
    cmd.add("--speculative-num-draft-tokens", k + 1)
    if spec.method == "eagle":
        cmd.add("--speculative-draft-model-path", "<EAGLE draft model>")
        cmd.note("--speculative-draft-model-path", "set the EAGLE draft model in place of <EAGLE draft model>")


def _disaggregation(cmd: ArgvBuilder, launch: RoleLaunch) -> None:
    if not launch.disaggregated:
        return
    cmd.add("--disaggregation-mode", launch.role)
    cmd.add("--disaggregation-transfer-backend", "nixl")
    if launch.role == "decode":
        cmd.add("--num-reserved-decode-tokens", launch.scheduler.num_reserved_decode_tokens)
    cmd.note("--disaggregation-transfer-backend", "nixl; SGLang's default is mooncake, which needs the "
             "Mooncake transfer engine installed")


def _multi_node(cmd: ArgvBuilder, launch: RoleLaunch) -> tuple[str, ...] | None:
    if launch.nodes <= 1:
        return None
    cmd.add("--nnodes", launch.nodes)
    cmd.add("--node-rank", "0")
    cmd.add("--dist-init-addr", "$LEADER_ADDRESS:20000")
    follower = [*cmd.argv]
    follower[follower.index("--node-rank") + 1] = "$NODE_RANK"
    return tuple(follower)


# servesim's router policies in sglang-router's names; the rest have no counterpart there.
_ROUTER_POLICY = {"round_robin": "round_robin", "random": "random"}
BOOTSTRAP_PORT = 8998   # --disaggregation-bootstrap-port's default


def sglang_front(front: FrontLaunch) -> LaunchCommand | None:
    """sglang-router (`python -m sglang_router.launch_router`, shipped in the image): P/D with
    --pd-disaggregation, each prefill URL followed by its bootstrap port; aggregated replicas
    with --worker-urls. One replica behind no router needs no front."""
    prefill, decode, agg = front.role("prefill"), front.role("decode"), front.role("aggregated")
    notes = []
    policy = _ROUTER_POLICY.get(front.router_policy)
    if policy is None:
        policy = "round_robin"
        notes.append(("router policy", f"servesim simulated router.policy {front.router_policy}, which "
                      "sglang-router does not implement as servesim models it; written as round_robin"))
    argv = ["python3", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(front.port),
            "--policy", policy]
    if prefill is not None and decode is not None:
        argv += ["--pd-disaggregation", "--prefill", f"http://{prefill.host}:{prefill.port}", str(BOOTSTRAP_PORT),
                 "--decode", f"http://{decode.host}:{decode.port}"]
    elif agg is not None and agg.replicas > 1:
        argv += ["--worker-urls", f"http://{agg.host}:{agg.port}"]
        notes.append(("--worker-urls", "one URL per replica: list each pod's address (the Service name "
                      "balances by connection, not by the router's policy)"))
    else:
        return None
    return LaunchCommand(tuple(argv), IMAGE.format(version=front.engine_version), notes=tuple(notes))


_NOT_FOR_DYNAMO = {"--host", "--port", "--nnodes", "--node-rank", "--dist-init-addr"}


def sglang_dynamo_worker(launch: RoleLaunch, command: LaunchCommand) -> tuple[str, tuple[str, ...]]:
    """Dynamo 1.x's SGLang worker (`python -m dynamo.sglang`): SGLang's server flags, its P/D mode
    included; the Frontend serves HTTP and the operator places multi-node ranks."""
    return "dynamo.sglang", tuple(without_flags(command.argv[3:], _NOT_FOR_DYNAMO))
