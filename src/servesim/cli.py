"""The `servesim` command line: a thin layer over `servesim.simulate`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from servesim import cli_shorthands as vb
from servesim.cli_usage import run_app, show_flags_plainly
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
        from servesim import __version__
        from servesim.engine.registry import engine_versions_line

        sys.stdout.write(f"servesim {__version__} (models {engine_versions_line()})\n")
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


class _ProgressBar:
    """A rich progress bar that appears only once a run has taken more than a second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.perf_counter()
        self._bar = None
        self._task = None

    def __call__(self, sim_ns: int, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            if time.perf_counter() - self.started < 1.0:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("requests"),
                TextColumn("[cyan]{task.fields[sim]}[/] simulated"), TimeElapsedColumn(),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("run", total=total, sim="0 s")
        self._bar.update(self._task, completed=done, sim=f"{sim_ns / 1e9:,.1f} s")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


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
    from servesim.config import config_to_yaml, parse_override
    from servesim.metrics.output import AtomicFiles, check_passes_target, write_json, write_workers_csv

    files = AtomicFiles()
    progress = _ProgressBar(enabled=not quiet and sys.stderr.isatty())
    pass_fh = None
    try:
        # Labelled, so an error names the --set (the Python API labels its own overrides otherwise).
        overrides = [(*parse_override(item)[:2], "--set " + item.split("=", 1)[0].strip()) for item in set_ or []]
        overrides = vb.shorthand_overrides(ctx.params, overrides) + overrides   # before --set, which wins
        if seed is not None and seed < 0:
            raise ServesimError(f"--seed must be a non-negative integer, got {seed}")
        if plots and out is None:
            raise ServesimError("--plots writes its figures into the --out folder; give --out DIR too")
        from servesim.metrics.vllm_result import VLLM_BENCH_FORMAT, check_report_options

        percentiles = check_report_options(format_, save_detailed, out, metric_percentiles)
        targets = {}
        if out is not None:
            files.stage_folder(out)   # a fresh folder swapped in whole: no stale files beside new results
            for name in ("summary.json", "requests.csv", "workers.csv", "config.resolved.yaml") + (
                    ("result.json",) if format_ == VLLM_BENCH_FORMAT else ()):
                targets[name] = files.path_for(out / name)
        if passes is not None:
            check_passes_target(passes, [config, trace], files)
            pass_fh = open(files.path_for(passes), "w", encoding="utf-8")
        import warnings

        from servesim.run import simulate

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reported below, once, in our own words
            result = simulate(config, trace=trace, seed=seed, overrides=overrides, pass_log=pass_fh,
                              progress=progress, percentiles=percentiles, detailed=save_detailed)
        files.protect([config, trace, result.summary.get("trace")])   # --out must not hold them
        if passes is not None:   # the trace a config names is known only now
            check_passes_target(passes, [result.summary.get("trace")])
        for note in result.warnings:
            sys.stderr.write(f"warning: {note}\n")
        progress.close()
        if pass_fh is not None:
            pass_fh.close()
        if targets:
            write_json(targets["summary.json"], result.summary)
            with open(targets["requests.csv"], "w", encoding="utf-8", newline="") as fh:
                result.requests.write_csv(fh)
            write_workers_csv(targets["workers.csv"], result.summary["workers"])
            if result.sessions is not None:   # workload.sessions: one row per session
                with open(files.path_for(out / "sessions.csv"), "w", encoding="utf-8", newline="") as fh:
                    result.sessions.write_csv(fh)
            if result.jobs is not None:       # an agentic trace: one row per job
                with open(files.path_for(out / "jobs.csv"), "w", encoding="utf-8", newline="") as fh:
                    result.jobs.write_csv(fh)
            targets["config.resolved.yaml"].write_text(config_to_yaml(result.config))
            if "result.json" in targets:
                from servesim.metrics.vllm_result import write_result

                write_result(targets["result.json"], result, percentiles, save_detailed)
        if plots:
            _write_run_plots(files, out, result)
        files.commit()
    except ServesimError as err:
        progress.close()
        if pass_fh is not None:
            pass_fh.close()
        files.abort()
        _fail(str(err))
    except KeyboardInterrupt:
        progress.close()
        files.abort()
        sys.stderr.write("interrupted; nothing was written\n")
        raise typer.Exit(130) from None
    except BaseException:
        files.abort()
        raise
    if json_:
        import json

        sys.stdout.write(json.dumps(result.summary, indent=2) + "\n")
    if not quiet:
        from servesim.metrics.table import print_summary

        print_summary(result.summary, result.config, stderr=json_)


# --------------------------------------------------------------------------- run --plots


def _write_run_plots(files, out: Path, result) -> None:
    from servesim.metrics.plots import plot_run, run_plot_names

    plot_run(result, {name: files.path_for(out / name) for name in run_plot_names(result)})


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


def main() -> None:
    # pydantic looks for third-party plugins through every installed package's entry points
    # on its first validation (~15 ms of start-up); servesim's schema needs none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        status = run_app(app, vb.expand_goodput(_optional_ray_address(sys.argv[1:])))  # usage errors: one line, exit 2
    except ServesimError as err:  # raised outside a command, e.g. while parsing options
        sys.stderr.write(f"error: {err}\n")
        status = 2
    sys.exit(status)


if __name__ == "__main__":
    main()
