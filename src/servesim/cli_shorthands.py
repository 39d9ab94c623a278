"""`servesim run`'s `vllm bench serve` flags: each one is an override of config fields.

- `--request-rate`, `--burstiness`, `--max-concurrency`, `--ramp-up-strategy`,
  `--ramp-up-start-rps`, `--ramp-up-end-rps`: `workload.client` in mode `bench` (any other
  client's keys are dropped), with the flag's field set;
- `--random-input-len`, `--random-output-len`, `--random-range-ratio`, `--random-prefix-len`:
  a synthetic workload as `--dataset-name random` draws it (vLLM 0.32
  benchmarks/datasets/utils.py get_sampling_params): lengths uniform in
  [floor(L·(1−r)), ceil(L·(1+r))] (outputs at least 1), after a shared prefix; flags not
  given take vLLM's defaults (1024 input, 128 output, ratio 0, prefix 0, 1000 prompts);
- `--num-prompts N`: that many requests (a synthetic workload's `num_requests`, or the
  first N of a trace: `workload.max_requests`);
- `--goodput ttft:MS tpot:MS e2el:MS`: the SLOs goodput counts; as in vLLM, only those given.

They are applied before `--set`, so a `--set` of the same field wins.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from servesim.errors import ServesimError

PANEL = "vllm bench serve flags (each overrides config fields)"

RequestRate = Annotated[Optional[float], typer.Option(
    "--request-rate", rich_help_panel=PANEL, help="Requests/s, or inf (all at once); switches "
    "workload.client to mode bench.")]
Burstiness = Annotated[Optional[float], typer.Option(
    "--burstiness", rich_help_panel=PANEL, help="Gamma shape of the gaps (1: Poisson; <1 burstier).")]
MaxConcurrency = Annotated[Optional[int], typer.Option(
    "--max-concurrency", rich_help_panel=PANEL, help="At most this many requests in flight.")]
RampUpStrategy = Annotated[Optional[str], typer.Option(
    "--ramp-up-strategy", rich_help_panel=PANEL, metavar="linear|exponential",
    help="Ramp the rate from --ramp-up-start-rps to --ramp-up-end-rps over the requests.")]
RampUpStart = Annotated[Optional[int], typer.Option("--ramp-up-start-rps", rich_help_panel=PANEL,
                                                    help="Requests/s of the first request.")]
RampUpEnd = Annotated[Optional[int], typer.Option("--ramp-up-end-rps", rich_help_panel=PANEL,
                                                  help="Requests/s of the last request.")]
NumPrompts = Annotated[Optional[int], typer.Option(
    "--num-prompts", rich_help_panel=PANEL, help="Requests: a synthetic workload's num_requests, or the "
    "first N of a trace.")]
RandomInputLen = Annotated[Optional[int], typer.Option(
    "--random-input-len", rich_help_panel=PANEL, help="Synthetic prompts of this many tokens after the "
    "prefix (default 1024).")]
RandomOutputLen = Annotated[Optional[int], typer.Option(
    "--random-output-len", rich_help_panel=PANEL, help="Synthetic outputs of this many tokens (default 128).")]
RandomRangeRatio = Annotated[Optional[float], typer.Option(
    "--random-range-ratio", rich_help_panel=PANEL, help="Lengths uniform in [L(1-r), L(1+r)], 0 <= r < 1.")]
RandomPrefixLen = Annotated[Optional[int], typer.Option(
    "--random-prefix-len", rich_help_panel=PANEL, help="A prefix of this many tokens shared by every prompt.")]
Goodput = Annotated[Optional[list[str]], typer.Option(
    "--goodput", rich_help_panel=PANEL, metavar="KEY:MS ...", help="SLOs for goodput: ttft:MS tpot:MS "
    "e2el:MS (only those given count).")]

_CLIENT_FLAGS = (("request_rate", "--request-rate"), ("burstiness", "--burstiness"),
                 ("max_concurrency", "--max-concurrency"), ("ramp_up_strategy", "--ramp-up-strategy"),
                 ("ramp_up_start_rps", "--ramp-up-start-rps"), ("ramp_up_end_rps", "--ramp-up-end-rps"))
_RANDOM_FLAGS = ("random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len")
# vLLM 0.32's defaults (benchmarks/datasets/datasets.py RandomDataset, DEFAULT_NUM_PROMPTS).
VLLM_RANDOM_DEFAULTS = {"random_input_len": 1024, "random_output_len": 128, "random_range_ratio": 0.0,
                        "random_prefix_len": 0, "num_prompts": 1000}
_GOODPUT_KEYS = {"ttft": "slo.ttft_ms", "tpot": "slo.tpot_ms", "e2el": "slo.e2e_ms"}


def shorthand_overrides(params: dict[str, Any], later: list[tuple] = ()) -> list[tuple[str, Any, str]]:
    """The (dotted key, value, flag) overrides the flags in `params` (the run command's) stand for;
    `later` are the --set overrides applied after them (they can change the workload's source)."""
    out = _client_overrides(params)
    out += _workload_overrides(params, later)
    out += _goodput_overrides(params.get("goodput"))
    return out


def _client_overrides(params: dict[str, Any]) -> list[tuple[str, Any, str]]:
    given = [(name, flag) for name, flag in _CLIENT_FLAGS if params.get(name) is not None]
    if not given:
        return []
    out: list[tuple[str, Any, str]] = [("workload.client.mode", "bench", given[0][1])]
    for name, flag in given:
        value = params[name]
        if isinstance(value, float) and math.isinf(value) and value > 0:
            value = "inf"
        out.append((f"workload.client.{name}", value, flag))
    return out


def _workload_overrides(params: dict[str, Any], later: list[tuple] = ()) -> list[tuple[str, Any, str]]:
    prompts = params.get("num_prompts")
    if prompts is not None and prompts < 1:
        raise ServesimError(f"--num-prompts must be at least 1, got {prompts}")
    flags = [name for name in _RANDOM_FLAGS if params.get(name) is not None]
    if flags:
        if params.get("trace") is not None:
            raise ServesimError(f"--{flags[0].replace('_', '-')} makes the workload synthetic; it cannot be "
                                "combined with --trace")
        return _random_workload(params, flags[0])
    if prompts is None:
        return []
    if params.get("trace") is None and _is_synthetic(params.get("config"), later):
        return [("workload.synthetic.num_requests", prompts, "--num-prompts"),
                ("workload.max_requests", None, "--num-prompts")]
    return [("workload.max_requests", prompts, "--num-prompts")]


def random_lengths(length: int, ratio: float, minimum: int) -> int | dict[str, int]:
    """vLLM's sampling interval [floor(L·(1−r)), ceil(L·(1+r))], each end at least `minimum`."""
    low = max(math.floor(length * (1 - ratio)), minimum)
    high = max(math.ceil(length * (1 + ratio)), minimum)
    return low if low == high else {"min": low, "max": high}


def _random_workload(params: dict[str, Any], first_flag: str) -> list[tuple[str, Any, str]]:
    value = {k: (params.get(k) if params.get(k) is not None else d) for k, d in VLLM_RANDOM_DEFAULTS.items()}
    ratio = value["random_range_ratio"]
    if not 0 <= ratio < 1:
        raise ServesimError(f"--random-range-ratio must be in [0, 1), as vLLM requires, got {ratio}")
    for name in ("random_input_len", "random_output_len", "random_prefix_len"):
        if value[name] < 0:
            raise ServesimError(f"--{name.replace('_', '-')} must not be negative, got {value[name]}")
    input_low = math.floor(value["random_input_len"] * (1 - ratio))
    if input_low < 1:
        raise ServesimError(f"--random-input-len {value['random_input_len']} with --random-range-ratio "
                            f"{ratio} can draw {input_low}-token prompts; servesim needs at least 1 token "
                            "after the prefix")
    synthetic = {
        "num_requests": value["num_prompts"],
        "input_length": random_lengths(value["random_input_len"], ratio, 1),
        # vLLM lifts the output interval's ends to at least 1 token.
        "output_length": random_lengths(value["random_output_len"], ratio, 1),
    }
    if value["random_prefix_len"]:
        synthetic["prefix_length"] = value["random_prefix_len"]
    label = f"--{first_flag.replace('_', '-')}"
    return [("workload.trace", None, label), ("workload.format", None, label),
            ("workload.max_requests", None, label), ("workload.synthetic", synthetic, label)]


def _is_synthetic(config: Path | None, later: list[tuple]) -> bool:
    """Whether the workload is synthetic once the --set overrides are applied: the last one that
    names its source decides, else the config file."""
    synthetic = None
    for key, value, *_ in later:
        if key == "workload.trace" and value is not None:
            synthetic = False
        elif key == "workload.synthetic" or key.startswith("workload.synthetic."):
            synthetic = value is not None
        elif key == "workload" and isinstance(value, dict):
            synthetic = value.get("synthetic") is not None
    return _base_is_synthetic(config) if synthetic is None else synthetic


def _base_is_synthetic(config: Path | None) -> bool:
    """Whether the config file (None: the embedded default) has a synthetic workload."""
    from servesim.config import default_config_path, read_config_file

    data = read_config_file(default_config_path() if config is None else Path(config))
    workload = data.get("workload")
    return isinstance(workload, dict) and workload.get("synthetic") is not None


def _goodput_overrides(pairs: list[str] | None) -> list[tuple[str, Any, str]]:
    if not pairs:
        return []
    slo: dict[str, float | None] = dict.fromkeys(_GOODPUT_KEYS.values())
    for pair in (p for item in pairs for p in item.replace(",", " ").split()):
        name, sep, text = pair.partition(":")
        if not sep or name not in _GOODPUT_KEYS:
            raise ServesimError(f"--goodput takes KEY:MS pairs with KEY one of ttft, tpot, e2el, got {pair!r}")
        try:
            ms = float(text)
        except ValueError:
            raise ServesimError(f"--goodput {name}: {text!r} is not a number of milliseconds") from None
        slo[_GOODPUT_KEYS[name]] = ms
    return [(key, ms, "--goodput") for key, ms in slo.items()]


def expand_goodput(argv: list[str]) -> list[str]:
    """`--goodput ttft:500 tpot:50` (vLLM's nargs="+") as `--goodput ttft:500 --goodput tpot:50`."""
    out: list[str] = []
    after_goodput = False
    for arg in argv:
        if after_goodput and not arg.startswith("-") and arg.partition(":")[0] in _GOODPUT_KEYS:
            if out[-1] != "--goodput":
                out.append("--goodput")
            out.append(arg)
            continue
        after_goodput = arg == "--goodput" or arg.startswith("--goodput=")
        out.append(arg)
    return out
