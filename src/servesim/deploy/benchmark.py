"""The benchmark that measures the simulated workload on the deployed servers.

Synthetic workloads become `vllm bench serve` (vLLM 0.32 vllm/benchmarks/serve.py) with its
`random` dataset: servesim's length ranges are the dataset's sampling intervals
[floor(L·(1−r)), ceil(L·(1+r))] (cli_shorthands.random_lengths, the inverse of what
`servesim run --random-*` does), and the client is the one `servesim run` modelled: a closed
loop of C users is `--max-concurrency C` at an infinite rate, Poisson is a rate with
burstiness 1. Its `--save-result --save-detailed` file is what `servesim validate` reads.
A workload the tool cannot send as servesim replays it gets no command, and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.cli_shorthands import random_lengths
from servesim.engine.launch import json_or_str

RESULT_FILE = "result.json"


@dataclass(frozen=True)
class BenchmarkCommand:
    argv: tuple[str, ...] | None    # None: no tool sends this workload as servesim replays it
    notes: tuple[str, ...]


def benchmark_command(config, base_url: str, served_model_name: str, tokenizer: str,
                      trace_path=None, lengths_path=None) -> BenchmarkCommand:
    workload = config.workload
    synthetic = workload.synthetic
    if workload.trace is not None:
        return _trace_replay(config, base_url, served_model_name, tokenizer, trace_path)
    if workload.sessions is not None:
        return BenchmarkCommand(None, ("the workload is multi-turn sessions, which `vllm bench serve` cannot send "
                                       "(each of its requests stands alone)",))
    notes = []
    if synthetic.lengths_from is not None:
        if synthetic.lengths_format != "sharegpt":
            return BenchmarkCommand(None, (f"the workload resamples {_article(synthetic.lengths_format)} file's lengths; "
                                           "`vllm bench serve` cannot send it as servesim replays it",))
        # vLLM's ShareGPTDataset: each conversation's first message the prompt, the second's token
        # count the output length (workload/sharegpt.py follows it).
        dataset = ["--dataset-name", "sharegpt", "--dataset-path", str(lengths_path)]
        notes.append("vLLM shuffles the ShareGPT file and takes its first conversations where servesim draws "
                     "with replacement: the same length distribution, other requests")
    else:
        lengths = _random_flags(synthetic)
        if lengths is None:
            return BenchmarkCommand(None, ("the input and output length ranges are not one `--random-range-ratio` "
                                           "apart from their centres, as vLLM's random dataset draws them",))
        dataset = ["--dataset-name", "random", *lengths]
    argv = ["vllm", "bench", "serve", "--backend", "openai", "--base-url", base_url, "--endpoint",
            "/v1/completions", "--model", served_model_name, "--tokenizer", tokenizer, *dataset,
            "--num-prompts", str(synthetic.num_requests), "--ignore-eos"]
    client_flags = _client_flags(workload.client)
    if client_flags is None:
        return BenchmarkCommand(None, (f"the {workload.client.mode} client has no `vllm bench serve` "
                                       "counterpart",))
    argv += client_flags
    if workload.warmup_requests:
        argv += ["--num-warmups", str(workload.warmup_requests)]
    argv += _goodput(config.slo)
    argv += ["--seed", str(config.seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
             "--metric-percentiles", "50,90,95,99", "--save-result", "--save-detailed",
             "--result-filename", RESULT_FILE]
    if synthetic.seed is not None:
        notes.append("servesim's synthetic seed draws its own lengths; vLLM's --seed draws others from the "
                     "same distribution")
    return BenchmarkCommand(tuple(argv), tuple(notes))


def _random_flags(synthetic) -> list[str] | None:
    """--random-input-len/--random-output-len/--random-range-ratio giving servesim's ranges, or None."""
    ranges = [_bounds(synthetic.input_length), _bounds(synthetic.output_length)]
    ratio = _common_ratio(ranges)
    if ratio is None:
        return None
    centres = [_centre(low, high, ratio) for low, high in ranges]
    if None in centres:
        return None
    flags = ["--random-input-len", str(centres[0]), "--random-output-len", str(centres[1])]
    if ratio:
        flags += ["--random-range-ratio", json_or_str(ratio)]
    if synthetic.prefix_length:
        flags += ["--random-prefix-len", str(synthetic.prefix_length)]
    return flags


def _bounds(length) -> tuple[int, int]:
    return (length, length) if isinstance(length, int) else (length.min, length.max)


def _common_ratio(ranges: list[tuple[int, int]]) -> float | None:
    """The one ratio r whose intervals are both ranges (fixed lengths: 0)."""
    if all(low == high for low, high in ranges):
        return 0.0
    # The shortest decimal that gives both intervals (users write --random-range-ratio 0.2, not 0.200195).
    exact = [(high - low) / (high + low) for low, high in ranges if low != high]
    candidates = [round(r, digits) for digits in range(1, 7) for r in exact]
    for ratio in candidates:
        if all(_centre(low, high, ratio) is not None for low, high in ranges):
            return ratio
    return None


def _centre(low: int, high: int, ratio: float) -> int | None:
    guess = round((low + high) / 2)
    for length in (guess - 1, guess, guess + 1):
        drawn = random_lengths(length, ratio, 1)   # a length, or {"min", "max"}
        if (_bounds(drawn) if isinstance(drawn, int) else (drawn["min"], drawn["max"])) == (low, high):
            return length
    return None


def _client_flags(client) -> list[str] | None:
    mode = client.mode
    if mode == "closed_loop":
        return ["--request-rate", "inf", "--max-concurrency", str(client.concurrency)]
    if mode == "poisson":
        return ["--request-rate", json_or_str(client.rate), "--burstiness", "1.0"]
    if mode == "open_loop":
        return ["--request-rate", "inf"]   # a synthetic workload's open loop sends everything at 0
    if mode == "bench":
        flags = ["--request-rate", str(client.request_rate), "--burstiness", str(client.burstiness)]
        if client.max_concurrency is not None:
            flags += ["--max-concurrency", str(client.max_concurrency)]
        if client.ramp_up_strategy is not None:
            flags += ["--ramp-up-strategy", client.ramp_up_strategy, "--ramp-up-start-rps",
                      str(client.ramp_up_start_rps), "--ramp-up-end-rps", str(client.ramp_up_end_rps)]
        return flags
    return None


def _goodput(slo) -> list[str]:
    parts = [f"{name}:{json_or_str(value)}" for name, value in
             (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2el", slo.e2e_ms)) if value is not None]
    return ["--goodput", *parts] if parts else []


def _trace_replay(config, base_url: str, served_model_name: str, tokenizer: str, trace_path) -> BenchmarkCommand:
    """A Mooncake trace through aiperf (ai-dynamo/aiperf `aiperf profile`): its mooncake_trace dataset
    expands each line's hash ids into prompt blocks of --prompt-input-tokens-block-size tokens, as
    servesim's trace_block_size does, and --fixed-schedule sends each at its timestamp."""
    workload = config.workload
    if workload.format != "mooncake":
        return BenchmarkCommand(None, (f"the workload replays a {workload.format} trace; aiperf replays Mooncake "
                                       "traces (convert it to Mooncake JSONL to measure it)",))
    client = workload.client
    argv = ["aiperf", "profile", "--model", served_model_name, "--tokenizer", tokenizer, "--url", base_url,
            "--endpoint-type", "completions", "--streaming", "--input-file", str(trace_path),
            "--custom-dataset-type", "mooncake_trace", "--prompt-input-tokens-block-size",
            str(workload.trace_block_size), "--extra-inputs", "ignore_eos:true", "--random-seed", str(config.seed)]
    if client.mode == "open_loop":
        argv += ["--fixed-schedule", "--fixed-schedule-auto-offset"]
        if client.time_scale != 1.0:
            # servesim multiplies the gaps by time_scale; aiperf divides them by its speed-up ratio.
            argv += ["--synthesis-speedup-ratio", json_or_str(1 / client.time_scale)]
    elif client.mode == "closed_loop":
        argv += ["--concurrency", str(client.concurrency)]
    else:
        return BenchmarkCommand(None, (f"the {client.mode} client over a trace has no aiperf counterpart",))
    if workload.max_requests is not None:
        argv += ["--request-count", str(workload.max_requests)]
    if workload.warmup_requests:
        argv += ["--warmup-request-count", str(workload.warmup_requests)]
    argv += ["--output-artifact-dir", "aiperf"]
    return BenchmarkCommand(tuple(argv), ("aiperf writes aiperf/profile_export_aiperf.json (and the per-request "
                                          "profile_export.jsonl) for servesim validate",))


def _article(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"
