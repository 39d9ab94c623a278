"""`servesim deploy`, `validate`, `calibrate` and `serve`: the commands over a finished model (cli.py registers them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from servesim.cli_app import app, _fail
from servesim.errors import ServesimError


@app.command()
def deploy(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config or a sweep folder; omit for the "
                                                    "embedded default.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Write the launch scripts, k8s.yaml, benchmark.sh, "
                                      "plan.json and README.md into this folder.")] = Path("deploy"),
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config field: "
                                                      "dotted.key=YAML_VALUE (repeatable).")] = None,
    model_path: Annotated[Optional[str], typer.Option("--model-path", help="The checkpoint the servers load "
                                                      "(default: the catalogue's first Hugging Face id).")] = None,
    served_model_name: Annotated[Optional[str], typer.Option("--served-model-name", help="The model name "
                                                             "clients send (default: servesim's name).")] = None,
    trial: Annotated[Optional[int], typer.Option("--trial", help="With a sweep folder: deploy this "
                                                 "trial.")] = None,
    pareto: Annotated[bool, typer.Option("--pareto", help="With a sweep folder: every trial on its Pareto "
                                         "frontier, one subfolder each.")] = False,
    stack: Annotated[str, typer.Option("--stack", metavar="plain|llm-d|dynamo", help="Also write llm-d "
                                       "Helm values or a Dynamo graph deployment.")] = "plain",
    print_: Annotated[bool, typer.Option("--print", help="Print the scripts instead of writing the "
                                         "folder.")] = False,
) -> None:
    """Write each role's engine launch command, Kubernetes manifests and the benchmark that measures the
    simulated workload, for a config or a sweep's trials."""
    from servesim.deploy.command import deploy as write_deploy

    try:
        write_deploy(config, out, set_, model_path, served_model_name, trial, pareto, stack=stack, show=print_)
    except ServesimError as err:
        _fail(str(err))


@app.command()
def validate(
    results: Annotated[list[Path], typer.Argument(
        metavar="RESULT", help="Result files: vllm bench serve JSON, SGLang bench_serving JSONL, aiperf, "
        "genai-perf or guidellm JSON.")],
    config: Annotated[Path, typer.Option("--config", help="The deployment the results were measured on "
                                         "(model, GPU, engine, workers); its workload is replaced.")],
    fail_above: Annotated[Optional[float], typer.Option("--fail-above", metavar="PCT", help="Exit 1 when any "
                                                        "compared figure is off by more than PCT percent.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write comparison.json, comparison.csv, plots "
                                                "and each simulated run's files into this folder.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but warnings and errors.")] = False,
) -> None:
    """Does servesim reproduce what you measured? Simulate each result file's run and compare."""
    from servesim.validate.command import run_validate

    try:
        status = run_validate(results, config, fail_above, out, quiet)
    except ServesimError as err:
        _fail(str(err))
    raise typer.Exit(status)


@app.command()
def calibrate(
    results: Annotated[list[Path], typer.Argument(
        metavar="RESULT", help="Result files of one model and engine (as validate reads them), at several "
        "prompt lengths and concurrencies.")],
    config: Annotated[Path, typer.Option("--config", help="The deployment they were measured on.")],
    out: Annotated[Path, typer.Option("--out", help="The profile to write, for engine.timing.profile_file.")],
    params: Annotated[Optional[str], typer.Option("--params", metavar="LIST", help="Comma-separated roofline "
                                                  "parameters to fit (default: every one the files constrain).")]
    = None,
    evals: Annotated[int, typer.Option("--evals", help="Evaluations of the fit (the leave-one-out refits get "
                                       "half).")] = 30,
    waves: Annotated[int, typer.Option("--waves", help="Waves of each closed-loop run simulated per "
                                       "evaluation.")] = 3,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
) -> None:
    """Fit the step-time model to your result files and write a profile sweeps can use."""
    from servesim.calibrate.command import run_calibrate

    try:
        run_calibrate(results, config, out, params, evals, waves, quiet)
    except ServesimError as err:
        _fail(str(err))


@app.command()
def serve(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config; omit for the embedded default.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    speed: Annotated[float, typer.Option("--speed", help="Simulated seconds per wall-clock second (below 1: "
                                         "slow motion).")] = 1.0,
    served_model_name: Annotated[Optional[list[str]], typer.Option("--served-model-name", help="Model name(s) "
                                                                   "the API answers to (default: the model's "
                                                                   "Hugging Face id).")] = None,
    api_key: Annotated[Optional[str], typer.Option("--api-key", help="Require `Authorization: Bearer KEY` "
                                                   "on /v1 routes.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="On stop, write servesim run's files for the "
                                                "served requests into this folder.")] = None,
    format_: Annotated[str, typer.Option("--format", metavar="servesim|vllm", help="vllm: also write "
                                         "result.json in --out.")] = "servesim",
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config field: "
                                                      "dotted.key=YAML_VALUE (repeatable).")] = None,
    expose: Annotated[str, typer.Option("--expose", metavar="fleet|workers", help="workers: each worker on its "
                                        "own port, from --port on, for an external router.")] = "fleet",
) -> None:
    """Serve the simulated deployment as an OpenAI-compatible HTTP server, at the engine's pace (docs/serve.md)."""
    try:
        from servesim.serve.server import ServeOptions, serve as run_server
    except ImportError as err:
        _fail(f"servesim serve needs the serve extra ({err.name} is missing): pip install 'servesim[serve]'")
    try:
        from servesim.config import parse_override

        overrides = tuple((*parse_override(item)[:2], "--set " + item.split("=", 1)[0].strip()) for item in set_ or [])
        run_server(ServeOptions(config, host, port, speed, served_model_name, api_key, out, format_, overrides,
                                expose))
    except ServesimError as err:
        _fail(str(err))
