"""Running trials: in this process, in a local process pool, or on Ray.

Every trial is one `servesim.simulate(config)` call made by `run_trial` (the same
simulation the CLI runs), returning a plain JSON-able outcome, or a copy of a sibling's,
when its run is provably the trial's own (sweep/sharing.py). The executors take groups of
trials that may share a run, one job each (`run_group`), and only move configs out and
outcomes back, yielding them as they complete; ordering and every decision that depends on
results stay with the caller (sweep/runner.py).

An executor failure that is not the trial's own (a worker process killed, a Ray node
lost) comes back as status `lost`, which a resumed sweep runs again.

Local workers die with the sweep: however the coordinator ends (Ctrl-C, SIGTERM, or a
SIGKILL nothing can catch), no worker outlives it. Each worker asks Linux to kill it when
its parent dies (prctl PR_SET_PDEATHSIG) and, everywhere, watches its parent's pid from a
thread, exiting within `PARENT_POLL_S` once it has been re-parented.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

Job = tuple[int, dict]            # (trial id, trial config)
Group = Sequence[Job]             # trials that may share a run, the one to run first (sweep/sharing.py)
Outcome = dict[str, Any]          # status, summary, error, wall_time_s


def slim_summary(summary: dict) -> dict:
    """The summary as stored: everything but the per-worker KV-usage timelines."""
    out = dict(summary)
    if isinstance(out.get("workers"), list):
        out["workers"] = [{k: v for k, v in w.items() if k != "kv_timeline"} for w in out["workers"]]
    return out


def run_trial(config: dict) -> Outcome:
    """Simulate one trial config; a failure is returned as its error, never raised."""
    return _run_trial(config)[0]


def run_group(group: Group) -> tuple[list[tuple[int, Outcome]], list[list[Job]]]:
    """A group's trials (sweep/sharing.py): the first run, the others its run provably is copied
    from it; returns their outcomes, and the rest of the group as the groups to run next,
    wherever a worker is free: one group again when a sibling's run may still cover the others
    (this run's limit bound), else each trial alone (this run failed or proves nothing), so that
    they run side by side, as without sharing."""
    from servesim.sweep.sharing import copied_outcome

    (first_id, first_config), rest = group[0], group[1:]
    outcome, source = _run_trial(first_config)
    out, left = [(first_id, outcome)], []
    for trial_id, config in rest:
        copy = None
        if source is not None and source.witness is not None:
            try:
                copy = copied_outcome(source, outcome["summary"], config)
            except Exception:  # a servesim bug: the sibling's own run reports it, as without sharing
                copy = None
        if copy is None:
            left.append((trial_id, config))
        else:
            out.append((trial_id, copy))
    if not left:
        return out, []
    if source is None or source.witness is None:
        return out, [[job] for job in left]
    return out, [left]


def after_loss(group: Group) -> list[list[Job]]:
    """The groups to run after `group`'s job was lost with its worker: the first trial was the
    one running (it is reported lost); its siblings go on as a group of their own."""
    return [list(group[1:])] if len(group) > 1 else []


def _run_trial(config: dict):
    """run_trial's outcome, and the run.TrialRun beside it (None if the trial failed)."""
    from servesim import startup_gc
    from servesim.errors import ServesimError
    from servesim.run import simulate_trial

    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, trial_run = simulate_trial(config)
    except ServesimError as err:
        return {"status": "error", "summary": None, "error": str(err), "wall_time_s": time.perf_counter() - start}, None
    except Exception as err:  # a servesim bug: keep where it happened
        where = traceback.extract_tb(err.__traceback__)[-1]
        message = f"{type(err).__name__}: {err} (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        return {"status": "error", "summary": None, "error": message, "wall_time_s": time.perf_counter() - start}, None
    finally:   # a first trial that failed before its simulation: the collector back on, nothing frozen
        startup_gc.resume(freeze=False)
    return {"status": "ok", "summary": slim_summary(result.summary), "error": None,
            "wall_time_s": time.perf_counter() - start}, trial_run


def _lost(err: BaseException) -> Outcome:
    return {"status": "lost", "summary": None, "error": f"{type(err).__name__}: {err}", "wall_time_s": None}


class InlineExecutor:
    """Trials one after another in this process (`--workers 1`)."""

    description = "in this process"

    def run(self, groups: Sequence[Group]) -> Iterator[tuple[int, Outcome]]:
        queue = list(groups)
        while queue:
            outcomes, rest = run_group(queue.pop(0))
            queue[:0] = rest
            yield from outcomes

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


PARENT_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1   # linux/prctl.h


def _die_with_parent() -> None:
    """Linux: the kernel sends this process SIGKILL when the thread that started it ends."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):   # no prctl: the watching thread still covers it
        pass


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent_pid:   # re-parented: the coordinator is gone
            os._exit(1)


def _init_worker(parent_pid: int, started_from_main_thread: bool) -> None:
    from servesim import startup_gc

    # The worker's imports come with its first trial, whose simulation freezes them (startup_gc.py).
    startup_gc.pause()
    # Ctrl-C is the coordinator's to handle; workers are stopped by it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # PR_SET_PDEATHSIG fires when the *thread* that spawned us ends: only safe from the main thread.
    if started_from_main_thread:
        _die_with_parent()
    if os.getppid() != parent_pid:   # the coordinator died before we got here
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="servesim-watch-parent", daemon=True).start()


class PoolExecutor:
    """A local `concurrent.futures.ProcessPoolExecutor` of `workers` processes (spawned)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.description = f"in a pool of {workers} local processes"
        self._pool = None

    def _ensure(self):
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            from_main = threading.current_thread() is threading.main_thread()
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=(os.getpid(), from_main))
        return self._pool

    def run(self, groups: Sequence[Group]) -> Iterator[tuple[int, Outcome]]:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        if not groups:
            return
        futures: dict = {}
        broken = False

        def submit(group: Group) -> None:
            try:
                futures[self._ensure().submit(run_group, group)] = group
            except BrokenProcessPool:   # a worker died: a fresh pool for the groups still to run
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
                futures[self._ensure().submit(run_group, group)] = group

        for group in groups:
            submit(group)
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                group = futures.pop(future)
                try:
                    outcomes, rest = future.result()
                except BrokenProcessPool as err:
                    broken = True
                    outcomes, rest = [(group[0][0], _lost(err))], after_loss(group)
                for part in rest:   # the siblings its run did not cover, for the next free worker
                    submit(part)
                yield from outcomes
        if broken and self._pool is not None:  # a worker died: start a fresh pool for what follows
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def abort(self) -> None:
        """Stop now: drop queued trials and end the worker processes."""
        if self._pool is None:
            return
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class RayExecutor:
    """Ray tasks: `ray.init(address)` joins a cluster; without an address, a local Ray instance.

    Needs the optional extra `servesim[ray]`. On a cluster every node needs servesim and
    the trace files at the same paths (a shared filesystem, or the same image).
    """

    def __init__(self, address: str | None, num_cpus: int | None = None) -> None:
        from servesim.errors import ServesimError

        try:
            import ray
        except ImportError:
            raise ServesimError("--ray needs Ray: pip install 'servesim[ray]'") from None
        self.ray = ray
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False}
            if address:
                kwargs["address"] = address
            else:
                kwargs.update(include_dashboard=False, num_cpus=num_cpus)
            try:
                ray.init(**kwargs)
            except Exception as err:  # ConnectionError and Ray's own
                raise ServesimError(f"cannot start Ray{' at ' + address if address else ''}: {err}") from None
            self._started = True
        self.description = f"on Ray ({address or 'a local instance'}, {int(ray.cluster_resources().get('CPU', 0))} CPUs)"
        self._remote = ray.remote(max_retries=3)(run_group)
        self._pending: list = []

    def run(self, groups: Sequence[Group]) -> Iterator[tuple[int, Outcome]]:
        ray = self.ray
        refs = {self._remote.remote(group): group for group in groups}
        self._pending = list(refs)
        while self._pending:
            ready, self._pending = ray.wait(self._pending, num_returns=1)
            for ref in ready:
                group = refs.pop(ref)
                try:
                    outcomes, rest = ray.get(ref)
                except Exception as err:  # a lost worker or node, after Ray's retries
                    outcomes, rest = [(group[0][0], _lost(err))], after_loss(group)
                for part in rest:   # the siblings its run did not cover, queued again
                    again = self._remote.remote(part)
                    refs[again] = part
                    self._pending.append(again)
                yield from outcomes

    def abort(self) -> None:
        for ref in self._pending:
            self.ray.cancel(ref, force=True)
        self._pending = []
        self.close()

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False


def make_executor(workers: int | None, ray_address: str | None, use_ray: bool):
    import os

    if use_ray:
        return RayExecutor(ray_address, workers)
    workers = workers or os.cpu_count() or 1
    return InlineExecutor() if workers == 1 else PoolExecutor(workers)
