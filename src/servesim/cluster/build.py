"""A simulation built by construction: the fleet, its routers and request factories, the
P/D handoff, and the loop over them.

`build_cluster` makes everything a run needs from the resolved config in one go; the
batch runner (run.py) and `open_simulation` (a steppable loop that takes requests with
`submit`, for the calibration fitter and a live server) share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from servesim.cluster.engine_choice import RunEngines, choose_engines
from servesim.cluster.fleet import RequestFactory, build_roles
from servesim.cluster.router import Router
from servesim.cluster.simulation import Cluster, Simulation, TokenFn
from servesim.config.run_spec import RunSpec
from servesim.metrics.collector import Collector
from servesim.workload.clients import Client, ScheduledClient
from servesim.workload.prompt import PrefixInterner
from servesim.workload.synthetic import content_block_size
from servesim.workload.trace import TraceRequest


def build_cluster(spec: RunSpec, engines: RunEngines, client: Client, collector: Collector,
                  requests: Iterable[TraceRequest] = (), on_token: TokenFn | None = None) -> Simulation:
    """The simulation of `spec`'s fleet under `client`. `requests`, when a list, are counted
    first by the shared prefix interner (a trace's block ids)."""
    workload = spec.config.workload
    disaggregated = spec.disaggregated
    # A finish is quiet outside its engine when no client waits on it and no prefill worker
    # waits for the blocks it frees: runs of decode passes may then go past it. Under
    # disaggregation KV transfers and block reservations reach a decode worker between its
    # passes too, and a run in flight cannot take those in: runs commit their follow-up early.
    quiet = isinstance(client, ScheduledClient) and not disaggregated
    roles = build_roles(spec, engines, finishes_are_quiet=quiet, runs_commit_late=not disaggregated)
    workers = [w for role in roles.values() for w in role.workers]
    collector.register(workers)
    for worker in workers:
        worker.scheduler.exclude_warmup(spec.warmup_requests)
    interner = PrefixInterner()
    if isinstance(requests, list):
        interner.count_requests(requests, workload.trace_block_size)
    factories, routers = {}, {}
    for name, role in roles.items():
        factories[name] = RequestFactory(role.scheduler_cfg, content_block_size(workload), interner)
        routers[name] = Router(spec.router, role.workers, purpose=f"router:{name}", factory=factories[name])
    cluster = Cluster(roles, factories, routers, spec.transfer,
                      autoscalers(roles, routers, collector, spec.warmup_requests))
    return Simulation(client, spec.request_path, collector, cluster, on_token)


def open_simulation(config: Any = None, overrides: list[tuple[str, Any]] | None = None,
                    on_token: TokenFn | None = None) -> Simulation:
    """A simulation of `config`'s fleet (a parsed config, a dict, a YAML path or None for the
    embedded default) with no workload of its own: requests come by `submit(request, at)`.

    Step it with `run_until(t)`, look with `snapshot()`, finish with `run()`; the records are
    `sim.collector.records`. `on_token(request_id, t_ns, outputs)` is called at each delivery
    (the reference engine runs then: cluster/engine_choice.py).
    """
    from servesim import limits
    from servesim.config import load_config
    from servesim.config.resolution import resolve

    loaded = load_config(config, list(overrides or []))
    limits.check_config(loaded.config, loaded.source)
    spec = resolve(loaded)
    engines = choose_engines(spec, pass_log=False, token_times=False, on_token=on_token is not None)
    collector = Collector(None, spec.warmup_requests)
    return build_cluster(spec, engines, ScheduledClient(iter(())), collector, on_token=on_token)


def autoscalers(roles, routers, collector: Collector, warmup_requests: int) -> dict | None:
    """(Autoscaler, grow) for each role with `autoscaling`; None when no role has it."""
    from servesim.cluster.autoscaler import Autoscaler
    from servesim.cluster.planner import Planner

    out = {}
    for name, role in roles.items():
        if role.spec.autoscaling is None:
            continue
        router = routers[name]

        def grow(role=role, router=router):
            worker = role.make_worker(len(role.workers))
            worker.scheduler.exclude_warmup(warmup_requests)
            collector.register([worker])
            role.workers.append(worker)
            router.add_worker()
            return worker
        cfg = role.spec.autoscaling
        scaler = Planner if getattr(cfg, "policy", None) == "sla_planner" else Autoscaler
        out[name] = (scaler(role, router, cfg), grow)
    return out or None
