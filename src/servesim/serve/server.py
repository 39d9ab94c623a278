"""`servesim serve`: build the live simulation and its app, serve until SIGINT/SIGTERM, then
write `servesim run`'s files for what was served (--out)."""

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


def build(options: ServeOptions, clock=None):
    """The live simulation, its metrics and its app (tests call this with their own server, and
    may give a `clock`: a function of no arguments giving simulated ns)."""
    from servesim.serve.api import make_app
    from servesim.serve.live import LiveSimulation
    from servesim.serve.prom import ServeMetrics

    live = LiveSimulation(options.config, list(options.overrides), options.speed, clock=clock)
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
        _check_port(options.host, options.port)
        live, app = build(options)
        files.protect([options.config])
        config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning",
                                timeout_graceful_shutdown=GRACE_S, lifespan="on")
        server = _QuietStopServer(config)
        sys.stderr.write(f"servesim serve: {live.spec.config.model} on {options.host}:{options.port}, "
                         f"speed {options.speed:g}\n")
        server.run()
        live.stop()
        if options.out is not None:
            write_files(files, options.out, live, percentiles, options.format, wall_start)
        files.commit()
    except BaseException:
        files.abort()
        raise


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
    """uvicorn's Server, stopping on SIGINT/SIGTERM without re-raising the signal afterwards
    (it does, to let the default handler end the process): the files are written after it."""

    def __new__(cls, config):
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):
                previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
                try:
                    yield
                finally:
                    for sig, handler in previous.items():
                        signal.signal(sig, handler)

        return Server(config)
