"""`servesim run`'s work, apart from typer: the command body and the plain command lines it takes directly.

typer builds every command and a pydantic TypeAdapter for each of `run`'s 24 parameters before it
calls the command: about 15% of a one-request run's instructions (docs/performance.md,
"Start-up"). `parse_run_argv` reads the command lines benchmarks and scripts write (a config,
`--out DIR`, `-q`, `--seed N`, `--set KEY=VALUE` ...) into the parameters typer would pass, so
`servesim.cli.main` runs them without importing typer; any other command line (help, a
`vllm bench serve` flag, a joined `--out=DIR`, a repeated option, anything unusual) returns None
and goes through typer, which parses it and reports usage errors as before.
tests/test_cli_fast_run.py holds the parse to typer's on each form it accepts.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError

# `vllm bench serve`'s flags (cli_shorthands.py), each None when not given; the direct parse takes none.
SHORTHANDS = ("request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps",
              "ramp_up_end_rps", "num_prompts", "random_input_len", "random_output_len", "random_range_ratio",
              "random_prefix_len", "goodput")
# Every parameter of the run command with typer's value when it is not given (`set_` and
# `goodput` are click's empty tuple of a repeatable option).
RUN_DEFAULTS: dict[str, Any] = {
    "config": None, "trace": None, "out": None, "seed": None, "set_": (), "passes": None, "quiet": False,
    "plots": False, "format_": "servesim", "save_detailed": False, "json_": False,
    "metric_percentiles": "50,90,95,99", **dict.fromkeys(SHORTHANDS), "goodput": (),
}

# The options the direct parse takes: flag → (parameter, kind).
_FLAGS = {"-q": "quiet", "--quiet": "quiet", "--plots": "plots", "--json": "json_",
          "--save-detailed": "save_detailed"}
_VALUED = {"--trace": ("trace", Path), "--out": ("out", Path), "--passes": ("passes", Path),
           "--seed": ("seed", int), "--format": ("format_", str), "--metric-percentiles": ("metric_percentiles", str)}


def parse_run_argv(argv: list[str]) -> dict[str, Any] | None:
    """The run command's parameters for `argv` (`run ...`), as typer would pass them, or None for
    a command line this parse leaves to typer."""
    if not argv or argv[0] != "run":
        return None
    params = dict(RUN_DEFAULTS)
    given: set[str] = set()
    sets: list[str] = []
    args = iter(argv[1:])
    for arg in args:
        if arg in _FLAGS:
            name = _FLAGS[arg]
            if name in given:
                return None
            params[name] = True
        elif arg in _VALUED or arg == "--set":
            value = next(args, None)
            if value is None or value.startswith("-"):
                return None   # typer's error, or a value that looks like an option
            if arg == "--set":
                sets.append(value)
                continue
            name, kind = _VALUED[arg]
            if name in given or (kind is int and not (value.isascii() and value.isdigit())):
                return None
            params[name] = kind(value)
        elif arg.startswith("-") or "config" in given:
            return None   # an option this parse does not take, or a second argument
        else:
            name = "config"
            params[name] = Path(arg)
        given.add(name)
    if sets:
        params["set_"] = sets
    return params


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


def _error(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return 2


def run_command(params: dict[str, Any]) -> int:
    """`servesim run` with typer's parameters (`params`); the exit status (2: one `error:` line)."""
    from servesim.config import config_to_yaml, parse_override
    from servesim.metrics.output import AtomicFiles, check_passes_target, write_json, write_workers_csv

    config, trace, out, seed, passes = (params[k] for k in ("config", "trace", "out", "seed", "passes"))
    format_, save_detailed, plots, quiet = (params[k] for k in ("format_", "save_detailed", "plots", "quiet"))
    files = AtomicFiles()
    progress = _ProgressBar(enabled=not quiet and sys.stderr.isatty())
    pass_fh = None
    try:
        # Labelled, so an error names the --set (the Python API labels its own overrides otherwise).
        overrides = [(*parse_override(item)[:2], "--set " + item.split("=", 1)[0].strip())
                     for item in params["set_"] or []]
        if any(params[name] not in (None, ()) for name in SHORTHANDS):   # else they stand for nothing
            from servesim.cli_shorthands import shorthand_overrides

            overrides = shorthand_overrides(params, overrides) + overrides   # before --set, which wins
        if seed is not None and seed < 0:
            raise ServesimError(f"--seed must be a non-negative integer, got {seed}")
        if plots and out is None:
            raise ServesimError("--plots writes its figures into the --out folder; give --out DIR too")
        from servesim.metrics.vllm_result import VLLM_BENCH_FORMAT, check_report_options

        percentiles = check_report_options(format_, save_detailed, out, params["metric_percentiles"])
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
        return _error(str(err))
    except KeyboardInterrupt:
        progress.close()
        files.abort()
        sys.stderr.write("interrupted; nothing was written\n")
        return 130
    except BaseException:
        files.abort()
        raise
    if params["json_"]:
        import json

        sys.stdout.write(json.dumps(result.summary, indent=2) + "\n")
    if not quiet:
        from servesim.metrics.table import print_summary

        print_summary(result.summary, result.config, stderr=params["json_"])
    return 0


def _write_run_plots(files, out: Path, result) -> None:
    from servesim.metrics.plots import plot_run, run_plot_names

    plot_run(result, {name: files.path_for(out / name) for name in run_plot_names(result)})
