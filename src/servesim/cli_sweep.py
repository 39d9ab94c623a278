"""`servesim sweep` and `servesim recommend` (cli.py registers them)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from servesim.cli_app import RAY_LOCAL, app, _fail
from servesim.errors import ServesimError


# --------------------------------------------------------------------------- sweep and recommend

_WORKERS_HELP = "Local worker processes (default: one per CPU; 1 runs trials in this process)."
_RAY_HELP = ("Run trials on Ray: a cluster at ADDRESS, or a local Ray instance when no address follows "
             "(needs servesim\\[ray]).")


def _run_sweep_command(base: dict, space, out: Path, workers: Optional[int], ray: Optional[str], resume: bool,
                       top: int, quiet: bool, title: str, extra_files: Optional[dict[str, str]] = None,
                       emit: Optional[Path] = None) -> None:
    """Run a sweep, print its table and recommendation, write its files; exit 1 without a recommendation."""
    from servesim.sweep.executor import make_executor
    from servesim.sweep.progress import SweepProgress
    from servesim.sweep.report import build_report, print_report, write_outputs
    from servesim.sweep.runner import run_sweep

    if workers is not None and workers < 1:
        raise ServesimError(f"--workers must be at least 1, got {workers}")
    from servesim.metrics.output import claim_sweep_folder

    claim_sweep_folder(out)   # before any worker starts: never write over someone's files
    executor = make_executor(workers, None if ray in (None, RAY_LOCAL) else ray, ray is not None)
    progress = SweepProgress(enabled=not quiet and sys.stderr.isatty())
    try:
        result = run_sweep(base, space, out, executor, resume, progress)
    except KeyboardInterrupt:
        progress.close()
        executor.abort()
        sys.stderr.write(f"interrupted; finished trials are kept in {out}/trials.sqlite: "
                         "rerun with --resume to run the rest\n")
        raise typer.Exit(130) from None
    finally:
        progress.close()
        executor.close()
    try:
        if result.lost:
            sys.stderr.write(f"error: {len(result.lost)} trials were lost (a worker died); the others are kept in "
                             f"{out}/trials.sqlite: rerun with --resume to run the lost ones\n")
            raise typer.Exit(1)
        report = build_report(result)
        write_outputs(result, report, out, title, extra_files)
        if not quiet:
            print_report(result, report, top)
            sys.stdout.write(f"wrote {out}/trials.sqlite, trials.csv, pareto.png"
                             + (", best.yaml" if report.best else "") + "\n")
        if emit is not None and report.best is not None:
            from servesim.deploy.command import deploy
            from servesim.sweep.report import final_config

            deploy(final_config(result, report.best), emit, None, None, None, announce=not quiet)
            if not quiet:
                sys.stdout.write(f"wrote the best trial's launch commands, k8s.yaml and benchmark to {emit}\n")
        elif emit is not None:
            sys.stderr.write(f"--emit: no trial meets the SLOs, so nothing was written to {emit}\n")
    finally:
        result.store.close()
    if report.best is None:
        raise typer.Exit(1)


@app.command()
def sweep(
    config: Annotated[Path, typer.Argument(help="Base YAML config every trial starts from.")],
    space: Annotated[Path, typer.Option("--space", help="YAML space file: parameters, search, constraints, "
                                        "objective, slo (docs/sweeps.md).")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Folder for trials.sqlite, trials.csv, "
                                                "pareto.png and best.yaml (default: sweeps/<space name>).")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", help=_WORKERS_HELP)] = None,
    ray: Annotated[Optional[str], typer.Option("--ray", metavar="[ADDRESS]", help=_RAY_HELP)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the sweep in --out: run only the trials "
                                         "it lacks.")] = False,
    top: Annotated[int, typer.Option("--top", help="Rows of the ranked table.")] = 10,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
) -> None:
    """Simulate many deployments of one workload and recommend the best that meets the SLOs."""
    try:
        from servesim.sweep.runner import load_base
        from servesim.sweep.space import load_space

        parsed = load_space(space)
        base = load_base(config)
        out = out if out is not None else Path("sweeps") / space.stem
        _run_sweep_command(base, parsed, out, workers, ray, resume, top, quiet,
                           title=f"{config.name} over {space.name}")
    except ServesimError as err:
        _fail(str(err))


@app.command()
def recommend(
    model: Annotated[str, typer.Option("--model", help="Model from the catalogue (servesim models).")],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU type from the catalogue (servesim gpus).")],
    gpus: Annotated[int, typer.Option("--gpus", help="GPU budget: the most GPUs a deployment may use.")],
    workload: Annotated[str, typer.Option("--workload", help="A trace file, a YAML workload, or "
                                          "requests=N,input=L,output=L,rate=R (or concurrency=C).")],
    slo: Annotated[str, typer.Option("--slo", help="Latency targets: ttft_ms=...,tpot_ms=...[,e2e_ms=...]"
                                     "[,percentile=50|90|99] (default percentile 90).")],
    backend: Annotated[str, typer.Option("--backend", help="Engine: vllm, sglang or trtllm.")] = "vllm",
    max_requests: Annotated[int, typer.Option("--max-requests", help="Use at most the first N requests "
                                              "of a trace.")] = 2000,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="No worker spans more GPUs than "
                                               "this.")] = 8,
    out: Annotated[Optional[Path], typer.Option("--out", help="Output folder (default: "
                                                "sweeps/recommend-<model>-<gpu>-<N>gpus).")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", help=_WORKERS_HELP)] = None,
    ray: Annotated[Optional[str], typer.Option("--ray", metavar="[ADDRESS]", help=_RAY_HELP)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the sweep in --out.")] = False,
    top: Annotated[int, typer.Option("--top", help="Rows of the ranked table.")] = 10,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    emit: Annotated[Optional[Path], typer.Option("--emit", metavar="DIR", help="Also write the best trial's "
                                                 "launch commands, k8s.yaml and benchmark (servesim "
                                                 "deploy) into DIR.")] = None,
    profile_file: Annotated[Optional[Path], typer.Option("--profile-file", help="Step times from a profile "
                                                         "servesim calibrate wrote (for --gpu and --backend).")]
    = None,
) -> None:
    """Which deployment should I run? Sweep a default space for this model, GPU budget, workload and SLOs."""
    try:
        from servesim.sweep.recommend import build
        from servesim.yaml_io import dump_yaml

        base, space, notes = build(model, gpu, gpus, workload, slo, backend, max_requests, gpus_per_node,
                                   None if profile_file is None else str(profile_file))
        out = out if out is not None else Path("sweeps") / f"recommend-{base['model']}-{base['gpu']}-{gpus}gpus"
        if not quiet:
            for note in notes:
                sys.stdout.write(f"{note}\n")
        files = {"base.yaml": dump_yaml(base), "space.yaml": dump_yaml(space.model_dump(mode="json"))}
        _run_sweep_command(base, space, out, workers, ray, resume, top, quiet,
                           title=f"{base['model']} on up to {gpus}× {base['gpu']}", extra_files=files, emit=emit)
    except ServesimError as err:
        _fail(str(err))
