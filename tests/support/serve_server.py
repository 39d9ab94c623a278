"""A `servesim serve` app on a loopback ephemeral port, in a thread, for the tests."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

MS = 1_000_000

# One slot, no async scheduling, 10 ms passes, no API-server time: a request's tokens come at
# 10, 20, 30 ms ... after it enters (the hand arithmetic of tests/test_stepping.py).
ONE_SLOT = {"max_num_seqs": 1, "max_num_batched_tokens": 2048, "async_scheduling": False}


def serve_config(scheduler: dict | None = None, serve: dict | None = None, pass_ms: float = 10.0) -> dict:
    cfg = {
        "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"backend": "vllm", "tokenization_ms": 0.0, "timing": {"kind": "fixed", "pass_ms": pass_ms},
                   "workers": {"aggregated": {"scheduler": dict(ONE_SLOT if scheduler is None else scheduler)}}},
        "workload": {"synthetic": {"num_requests": 1, "input_length": 10, "output_length": 10}},
    }
    if serve is not None:
        cfg["serve"] = serve
    return cfg


@contextmanager
def running_server(config, speed: float = 1.0, **options):
    """(live simulation, base URL) while a uvicorn server runs the app in a daemon thread."""
    import uvicorn

    from servesim.serve.server import ServeOptions, build

    live, app = build(ServeOptions(config, port=0, speed=speed, **options))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield live, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def wait_for(condition, what: str, bound_s: float = 20.0) -> None:
    """Poll `condition()` until true; a bound on a hang, not a timing assertion."""
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)
