"""The `servesim` commands (typer), a thin layer over `servesim.simulate`; cli.py's `main` runs them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from servesim import cli_shorthands as vb
from servesim.cli_usage import show_flags_plainly
from servesim.errors import ServesimError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="servesim: simulate LLM serving (vLLM's scheduler, KV cache and step time) without a GPU.",
    pretty_exceptions_enable=False,
)
show_flags_plainly()  # `--quiet` in --help, not `--quiet <bool>` (typer 0.2x)


def _print_version(value: bool) -> None:
    if value:
        from servesim.cli import version_line

        sys.stdout.write(version_line() + "\n")
        raise typer.Exit(0)


@app.callback()
def _group(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True,
                                          help="Print servesim's version and the engine versions it models.")]
    = False,
) -> None:
    """servesim: simulate LLM serving without a GPU."""


def _fail(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(2)


@app.command()
def run(
    ctx: typer.Context,
    config: Annotated[Optional[Path], typer.Argument(help="YAML config; omit for the embedded default.")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="Replace the workload's trace file.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write summary.json, requests.csv, workers.csv "
                                                "and config.resolved.yaml into this folder.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Root seed of every random choice.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config field: "
                                                      "dotted.key=YAML_VALUE (repeatable).")] = None,
    passes: Annotated[Optional[Path], typer.Option("--passes", help="Write one JSON line per engine pass "
                                                   "to this file (slow; for debugging).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    plots: Annotated[bool, typer.Option("--plots", help="Also write ttft_cdf.png, tpot_cdf.png and "
                                        "timeline_<worker>.png into the --out folder.")] = False,
    format_: Annotated[str, typer.Option("--format", metavar="servesim|vllm", help="vllm: also write result.json "
                                         "in --out, as `vllm bench serve --save-result` does.")] = "servesim",
    save_detailed: Annotated[bool, typer.Option("--save-detailed", help="With --format vllm: per-request "
                                                "arrays in result.json.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary JSON on stdout (the table goes "
                                        "to stderr).")] = False,
    metric_percentiles: Annotated[str, typer.Option("--metric-percentiles", metavar="LIST", help="Percentiles "
                                                    "of TTFT, TPOT, ITL and E2E to report, as vllm bench "
                                                    "spells them.")] = "50,90,95,99",
    # `vllm bench serve`'s flags, each an override of config fields (servesim/cli_shorthands.py).
    request_rate: vb.RequestRate = None, burstiness: vb.Burstiness = None,
    max_concurrency: vb.MaxConcurrency = None, ramp_up_strategy: vb.RampUpStrategy = None,
    ramp_up_start_rps: vb.RampUpStart = None, ramp_up_end_rps: vb.RampUpEnd = None,
    num_prompts: vb.NumPrompts = None, random_input_len: vb.RandomInputLen = None,
    random_output_len: vb.RandomOutputLen = None, random_range_ratio: vb.RandomRangeRatio = None,
    random_prefix_len: vb.RandomPrefixLen = None, goodput: vb.Goodput = None,
) -> None:
    """Replay a workload through a simulated deployment and print a vllm-bench-style summary."""
    from servesim.cli_run import run_command

    status = run_command(ctx.params)   # servesim.cli.main runs plain command lines without typer
    if status:
        raise typer.Exit(status)


@app.command()
def models() -> None:
    """List the built-in models: parameters, KV-cache bytes per token, context length."""
    from rich.console import Console
    from rich.table import Table

    from servesim.models import list_models

    table = Table(title="servesim models")
    for column in ("name", "Hugging Face ids", "params (B)", "active (B)", "KV bytes/token (bf16)", "context"):
        table.add_column(column, justify="left" if column in ("name", "Hugging Face ids") else "right")
    for spec in list_models():
        arch = spec.arch
        table.add_row(spec.name, ", ".join(spec.hf_ids[:2]) + (", ..." if len(spec.hf_ids) > 2 else ""),
                      f"{arch.total_params() / 1e9:.2f}", f"{arch.active_params() / 1e9:.2f}",
                      f"{arch.kv_bytes_per_token(2):,.0f}", f"{arch.context_length:,}")
    Console(width=None if sys.stdout.isatty() else 160).print(table)


@app.command()
def gpus() -> None:
    """List the built-in GPUs: dense TFLOPS, HBM, NVLink and network bandwidth."""
    from rich.console import Console
    from rich.table import Table

    from servesim.hardware import list_gpus

    table = Table(title="servesim gpus (dense TFLOPS; bandwidths in bytes)")
    for column in ("name", "also", "BF16", "FP8", "FP4", "HBM GB", "HBM TB/s", "NVLink GB/s", "network GB/s"):
        table.add_column(column, justify="left" if column in ("name", "also") else "right")
    for gpu in list_gpus():
        table.add_row(gpu.name, ", ".join(gpu.aliases), f"{gpu.bf16_tflops:,.0f}",
                      f"{gpu.fp8_tflops:,.0f}" if gpu.fp8_tflops else "-",
                      f"{gpu.fp4_tflops:,.0f}" if gpu.fp4_tflops else "-", f"{gpu.memory_gb:g}",
                      f"{gpu.hbm_tb_s:g}", f"{gpu.nvlink_gb_s:,.0f}", f"{gpu.network_gb_s:g}")
    Console(width=None if sys.stdout.isatty() else 160).print(table)


@app.command()
def bench(
    only: Annotated[str, typer.Option("--only", metavar="ROWS", help="Comma-separated row keys, e.g. 1a,2a "
                                      "(docs/performance.md); default: every row whose trace is there.")] = "",
    timing: Annotated[str, typer.Option("--timing", metavar="KINDS", help="Comma-separated timing kinds: "
                                        "fixed, roofline, aic.")] = "fixed",
    repeat: Annotated[int, typer.Option("--repeat", help="Runs per row; the table shows the median "
                                        "wall time.")] = 3,
    traces: Annotated[Optional[Path], typer.Option("--traces", metavar="DIR", help="Folder holding mooncake/ "
                                                   "and azure_llm_2023/ (default: shared/traces beside a "
                                                   "source checkout).")] = None,
    vs: Annotated[Optional[tuple[str, str]], typer.Option("--vs", metavar="aisimulate PYTHON", help="Also time "
                                                          "AISimulate, run by this interpreter of its "
                                                          "virtualenv, and print the speed-up.")] = None,
) -> None:
    """Run the simulator's speed benchmark suite and print it as a Markdown table."""
    from servesim.bench import run_suite

    try:
        raise typer.Exit(run_suite(only, timing, repeat, traces, vs))
    except ServesimError as err:
        _fail(str(err))


RAY_LOCAL = "local"


def _optional_ray_address(argv: list[str]) -> list[str]:
    """`--ray` with no address after it (last, or before another option) means a local Ray instance."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--ray" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = f"--ray={RAY_LOCAL}"
    return out


# The other commands live in their own modules; importing them adds them to `app`.
from servesim import cli_sweep, cli_tools  # noqa: E402,F401
