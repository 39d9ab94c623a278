"""`servesim serve`: build the live simulation(s) and app(s), serve until SIGINT/SIGTERM, then
write `servesim run`'s files for what was served (--out; with --expose workers one folder per
worker, worker-<i>/)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import fastapi  # noqa: F401  (the serve extra: cli.py reports it missing)
import prometheus_client  # noqa: F401
import uvicorn  # noqa: F401

from servesim.errors import ServesimError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 1.0   # open streams get this long after a stop, then they are cut


@dataclass(frozen=True)
class ServeOptions:
    config: Path | None
    host: str = "127.0.0.1"
    port: int = 8000
    speed: float = 1.0
    served_model_name: list[str] | None = None
    api_key: str | None = None
    out: Path | None = None
    format: str = "servesim"
    overrides: tuple = ()
    expose: str = "fleet"       # or "workers": one port per worker


def build(options: ServeOptions, clock=None, overrides: tuple = (), lengths_purpose: str = "serve-output-length"):
    """The live simulation, its metrics and its app (tests call this with their own server, and
    may give a `clock`: a function of no arguments giving simulated ns)."""
    from servesim.serve.api import make_app
    from servesim.serve.live import LiveSimulation
    from servesim.serve.prom import ServeMetrics

    live = LiveSimulation(options.config, [*options.overrides, *overrides], options.speed, clock=clock,
                          lengths_purpose=lengths_purpose)
    hf_ids = live.spec.model.hf_ids
    root = hf_ids[0] if hf_ids else live.spec.config.model
    names = list(options.served_model_name or [root])
    workers = [w.name for role in live.sim.roles.values() for w in role.workers]
    live.metrics = ServeMetrics(names[0], workers, live.max_model_len)
    app = make_app(live, live.metrics, names, root, options.api_key)

    @contextlib.asynccontextmanager
    async def lifespan(_):
        driver = asyncio.create_task(live.drive())
        yield
        driver.cancel()

    app.router.lifespan_context = lifespan
    return live, app


def build_all(options: ServeOptions) -> list[tuple[int, object, object]]:
    """(port, live simulation, app) for each port: the fleet on --port, or with --expose workers
    each worker on its own port, from --port on (a one-worker fleet each: aggregated workers
    meet only in the router, which is then the client's)."""
    if options.expose == "fleet":
        return [(options.port, *build(options))]
    if options.expose != "workers":
        raise ServesimError(f"--expose must be fleet or workers, got {options.expose!r}")
    if options.port == 0:
        raise ServesimError("--expose workers listens on consecutive ports from --port: give --port P, not 0")
    first, app = build(options, overrides=(("engine.workers.aggregated.count", 1),))
    count = _fleet_size(options)
    built = [(options.port, first, app)]
    for index in range(1, count):
        built.append((options.port + index, *build(options, overrides=(("engine.workers.aggregated.count", 1),),
                                                   lengths_purpose=f"serve-output-length/{index}")))
    return built


def _fleet_size(options: ServeOptions) -> int:
    from servesim.config import load_config
    from servesim.config.resolution import resolve

    spec = resolve(load_config(options.config, list(options.overrides)))
    return sum(role.count for role in spec.roles.values())


def serve(options: ServeOptions) -> None:
    import uvicorn

    from servesim.metrics.output import AtomicFiles
    from servesim.metrics.vllm_result import check_report_options

    wall_start = time.perf_counter()
    percentiles = check_report_options(options.format, False, options.out, "50,90,95,99")
    files = AtomicFiles()
    if options.out is not None:
        files.stage_folder(options.out)   # a bad --out is refused before serving
    try:
        built = build_all(options)
        for port, _, _ in built:
            _check_port(options.host, port)
        files.protect([options.config])
        servers = [_QuietStopServer(uvicorn.Config(app, host=options.host, port=port, log_level="warning",
                                                   timeout_graceful_shutdown=GRACE_S, lifespan="on"))
                   for port, _, app in built]
        ports = ", ".join(str(port) for port, _, _ in built)
        sys.stderr.write(f"servesim serve: {built[0][1].spec.config.model} on {options.host}:{ports}, "
                         f"speed {options.speed:g}\n")
        _run_until_stopped(servers)
        for index, (_, live, _) in enumerate(built):
            live.stop()
            if options.out is not None:
                folder = options.out if len(built) == 1 else options.out / f"worker-{index}"
                write_files(files, folder, live, percentiles, options.format, wall_start)
        files.commit()
    except BaseException:
        files.abort()
        raise


def _run_until_stopped(servers) -> None:
    """Serve on every server in one event loop until SIGINT or SIGTERM stops them all."""
    def stop(sig, frame):
        for server in servers:
            server.handle_exit(sig, frame)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        asyncio.run(_serve_all(servers))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _serve_all(servers) -> None:
    await asyncio.gather(*(server.serve() for server in servers))


def _check_port(host: str, port: int) -> None:
    import socket

    if not 0 <= port <= 65535:
        raise ServesimError(f"--port must be between 0 and 65535, got {port}")
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as err:
        raise ServesimError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None


def write_files(files, out: Path, live, percentiles, fmt: str, wall_start: float) -> None:
    """summary.json, requests.csv, workers.csv and config.resolved.yaml (+ result.json) of the served requests."""
    from servesim.config import config_to_yaml
    from servesim.metrics.output import write_json, write_workers_csv
    from servesim.metrics.vllm_result import VLLM_BENCH_FORMAT, write_result
    from servesim.run import run_result

    info = {"trace": None, "trace_format": "served", "trace_sha256": None}
    result = run_result(live.spec, live.sim, live.collector, live.submitted, live.engines, False, percentiles,
                        info, wall_start)
    write_json(files.path_for(out / "summary.json"), result.summary)
    with open(files.path_for(out / "requests.csv"), "w", encoding="utf-8", newline="") as fh:
        result.requests.write_csv(fh)
    write_workers_csv(files.path_for(out / "workers.csv"), result.summary["workers"])
    files.path_for(out / "config.resolved.yaml").write_text(config_to_yaml(result.config))
    if fmt == VLLM_BENCH_FORMAT:
        write_result(files.path_for(out / "result.json"), result, percentiles, False)


class _QuietStopServer:
    """uvicorn's Server, leaving the signals to `_run_until_stopped` (uvicorn's own handling
    would re-raise the signal after its shutdown, ending the process before the files are written)."""

    def __new__(cls, config):
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):
                yield

        return Server(config)
