"""`servesim recommend`: a sensible default space for one model, GPU type, GPU budget and workload.

The space (written to the output folder as space.yaml beside base.yaml, so it can be
edited and rerun with `servesim sweep`):
- every tensor-parallel size (1, 2, 4, 8, ... up to a node) at which the model and one
  request of the workload's longest length fit on the GPUs;
- for each, aggregated fleets of 1, 2, 3, 4, 6, 8, ... replicas and prefill/decode
  splits in the ratios 1:1, 1:2, 1:3, 2:1, 2:3 and 3:2 (scaled up by 2, 4, ...), all
  within the GPU budget;
- the engine's running-request limit (64 to 512) and per-pass token budget (8192, 16384);
- roofline step times, successive halving from about a ninth of the workload, and the
  goodput-per-GPU objective under the given SLOs.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servesim.config import error_sentence, load_config
from servesim.engine.registry import BACKENDS, DEFAULT_BACKEND
from servesim.errors import ServesimError
from servesim.sweep.space import SweepSpace, SweepSlo, parse_space
from servesim.yaml_io import load_yaml, read_text

RUNNING_LIMITS = [64, 128, 256, 512]
TOKEN_BUDGETS = [8192, 16384]
PD_RATIOS = [(1, 1), (1, 2), (1, 3), (2, 1), (2, 3), (3, 2)]
CONTEXTS = [4096, 8192, 16384, 32768, 65536, 131072]
MIN_RUNG_REQUESTS = 150


def parse_slo(text: str) -> SweepSlo:
    """`ttft_ms=2000,tpot_ms=50[,e2e_ms=...][,percentile=90]`."""
    data: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise ServesimError(f"--slo {text!r}: expected name=value pairs like ttft_ms=2000,tpot_ms=50")
        key, value = item.split("=", 1)
        data[key.strip()] = load_yaml(value, f"--slo {key.strip()}")
    try:
        parsed = SweepSlo.model_validate(data)
    except ValidationError as err:
        raise ServesimError(error_sentence(err, data, "--slo")) from None
    if parsed.ttft_ms is None and parsed.tpot_ms is None and parsed.e2e_ms is None:
        raise ServesimError("--slo: give at least one of ttft_ms, tpot_ms, e2e_ms")
    return parsed


def _spec_length(value: str, key: str) -> Any:
    if "-" in value:
        low, high = value.split("-", 1)
        low_n, high_n = _int(low, key), _int(high, key)
        if low_n > high_n:
            raise ServesimError(f"--workload {key}={value}: the range is reversed ({low_n} > {high_n}); "
                                f"write it low-high, as {key}={high_n}-{low_n}")
        return {"min": low_n, "max": high_n}
    return _int(value, key)


def _int(text: str, key: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ServesimError(f"--workload {key}={text}: expected a whole number") from None
    if value < 1:
        raise ServesimError(f"--workload {key}={text}: must be at least 1")
    return value


def parse_workload(text: str) -> dict:
    """A trace file, a YAML file holding a workload, or `requests=N,input=L,output=L,rate=R|concurrency=C`."""
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix in (".yaml", ".yml"):
            data = load_yaml(read_text(path, "workload file"), str(path))
            data = data.get("workload", data) if isinstance(data, dict) else data
            if not isinstance(data, dict):
                raise ServesimError(f"{path}: expected a workload mapping (or a config with a workload key)")
            if isinstance(data.get("trace"), str):
                data["trace"] = os.path.normpath(path.resolve().parent / Path(data["trace"]).expanduser())
            return data
        return {"trace": str(path.resolve()), "client": {"mode": "open_loop"}}
    if "=" not in text:
        raise ServesimError(f"--workload {text}: no such file; give a trace or YAML file, or a spec like "
                            "requests=1000,input=1024,output=256,rate=4")
    spec = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        spec[key.strip()] = value.strip()
    known = {"requests", "input", "output", "rate", "concurrency"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ServesimError(f"--workload: unknown key {unknown[0]}; the keys are {', '.join(sorted(known))}")
    missing = [k for k in ("requests", "input", "output") if k not in spec]
    if missing:
        raise ServesimError(f"--workload: give {missing[0]}= too (requests, input and output are required)")
    if ("rate" in spec) == ("concurrency" in spec):
        raise ServesimError("--workload: give rate=REQUESTS_PER_S (Poisson arrivals) or concurrency=USERS, one")
    if "rate" in spec:
        try:
            client = {"mode": "poisson", "rate": float(spec["rate"])}
        except ValueError:
            raise ServesimError(f"--workload rate={spec['rate']}: expected a number") from None
    else:
        client = {"mode": "closed_loop", "concurrency": _int(spec["concurrency"], "concurrency")}
    return {"synthetic": {"num_requests": _int(spec["requests"], "requests"),
                          "input_length": _spec_length(spec["input"], "input"),
                          "output_length": _spec_length(spec["output"], "output")},
            "client": client}


def _longest_request(workload: dict) -> int:
    from servesim.workload.trace import load_trace

    if workload.get("trace"):
        requests, _ = load_trace(Path(workload["trace"]), workload.get("format"), workload.get("max_requests"))
        return max(r.input_length + r.output_length for r in requests)
    synthetic = workload.get("synthetic") or {}

    def top(length: Any) -> int:
        return length["max"] if isinstance(length, dict) else int(length or 0)
    if synthetic.get("lengths_from"):
        return 0   # unknown without reading it: keep the model's context
    return top(synthetic.get("input_length")) + top(synthetic.get("output_length"))


def _role(backend: str, tp: int, context: int, node: int | None, count: int | None = None) -> dict:
    """One role of the space; `node` is a gpus_per_node past the GPU's NVLink domain, if asked for."""
    role = {} if count is None else {"count": count}
    role.update({"tp": tp, "scheduler": {BACKENDS[backend].length_limit_key: context}})
    if node is not None:
        role["gpus_per_node"] = node
    return role


def _layout_error(spec, gpu_spec, tp: int, node: int) -> str | None:
    """Why the engines refuse this TP for the model (heads it does not divide), or None."""
    from servesim.hardware.parallelism import check_parallelism

    try:
        check_parallelism("tp", spec.arch, gpu_spec, tp=tp, attention_dp=1, ep=1, pp=1, node_gpus=node)
    except ServesimError as err:
        return str(err)
    return None


def _fits(base: dict, backend: str, tp: int, context: int, node: int | None = None) -> str | None:
    """None when one worker at this TP holds the model and a `context`-token request; else why not."""
    from servesim.config.resolution import resolve

    probe = dict(base, engine=dict(base["engine"], workers={"aggregated": _role(backend, tp, context, node)}))
    try:
        resolve(load_config(probe))
    except ServesimError as err:
        return str(err)
    return None


def _layouts(tps: list[int], gpus: int, backend: str, context: int, node: int | None = None) -> list[dict]:
    out = []
    for tp in tps:
        workers = gpus // tp
        def role(count: int) -> dict:
            return _role(backend, tp, context, node, count)
        replicas = sorted({r for r in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, workers) if r <= workers})
        out += [{"aggregated": role(r)} for r in replicas]
        pairs: list[tuple[int, int]] = []
        for p, d in PD_RATIOS:
            scale = 1
            while (p + d) * scale <= workers:
                if (p * scale, d * scale) not in pairs:
                    pairs.append((p * scale, d * scale))
                scale *= 2
        out += [{"prefill": role(p), "decode": role(d)} for p, d in sorted(pairs)]
    return out


def build(model: str, gpu: str, gpus: int, workload: str, slo: str, backend: str = DEFAULT_BACKEND,
          max_requests: int | None = 2000, gpus_per_node: int = 8,
          profile_file: str | None = None) -> tuple[dict, SweepSpace, list[str]]:
    """The base config, the space, and notes on the choices made (shown to the user); `profile_file`
    is a profile `servesim calibrate` wrote, for the base's roofline timing."""
    from servesim.hardware import resolve_gpu
    from servesim.models import resolve_model

    if gpus < 1:
        raise ServesimError(f"--gpus must be at least 1, got {gpus}")
    if max_requests is not None and max_requests < 1:
        raise ServesimError(f"--max-requests must be at least 1, got {max_requests}")
    if gpus_per_node < 1:
        raise ServesimError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    if backend not in BACKENDS:
        raise ServesimError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend}")
    # The knobs under the backend's own names: running requests, tokens per pass, context.
    knobs = BACKENDS[backend].sweep_knobs
    spec = resolve_model(model)
    gpu_spec = resolve_gpu(gpu)
    sweep_slo = parse_slo(slo)
    work = parse_workload(workload)
    if max_requests is not None and work.get("trace"):
        work["max_requests"] = min(max_requests, work.get("max_requests") or max_requests)
    base = {"model": spec.name, "gpu": gpu_spec.name,
            "engine": {"backend": backend, "timing": {"kind": "roofline"}, "workers": {"aggregated": {}}},
            "workload": work}
    if profile_file is not None:
        import os

        base["engine"]["timing"]["profile_file"] = os.path.abspath(os.path.expanduser(profile_file))
    # The workload's own mistakes are reported as such, before any probe could call them a misfit.
    load_config(base)
    longest = _longest_request(work)
    context = next((c for c in CONTEXTS if c >= longest), spec.context_length)
    context = min(context, spec.context_length)
    notes = [f"{knobs[2]} {context:,} (the workload's longest request is {longest:,} tokens)"]
    # Workers wider than the GPU's NVLink domain span nodes, which the role must say.
    node = gpus_per_node if gpus_per_node > gpu_spec.nvlink_domain else None
    tps, refused, unsplittable = [], [], []
    tp = 1
    while tp <= min(gpus, gpus_per_node):
        if _layout_error(spec, gpu_spec, tp, gpus_per_node):
            unsplittable.append(tp)
        else:
            (refused if _fits(base, backend, tp, context, node) else tps).append(tp)
        tp *= 2
    if not tps and not refused:
        raise ServesimError(f"no TP up to {min(gpus, gpus_per_node)} suits {spec.name}: "
                            f"{_layout_error(spec, gpu_spec, unsplittable[-1], gpus_per_node)}")
    if not tps:
        raise ServesimError(f"{spec.name} does not fit on up to {refused[-1]} {gpu_spec.name} GPUs "
                            f"with a {context:,}-token context: {_fits(base, backend, refused[-1], context, node)}")
    if refused:
        notes.append(f"TP {', '.join(map(str, refused))} left out: the model and a {context:,}-token request "
                     f"do not fit in {gpu_spec.name} memory there")
    if unsplittable:
        notes.append(f"TP {', '.join(map(str, unsplittable))} left out: {spec.name}'s {spec.arch.heads} attention "
                     f"heads (or {spec.arch.kv_heads} KV heads) do not split that many ways")
    layouts = _layouts(tps, gpus, backend, context, node)
    running, tokens, _ = knobs
    # An engine whose token budget must cover its running limit (vLLM) sweeps only such budgets.
    budgets = [t for t in TOKEN_BUDGETS if not BACKENDS[backend].budget_covers_running or t >= max(RUNNING_LIMITS)]
    from servesim.sweep.trials import workload_size

    total = workload_size(base)
    search: dict[str, Any] = {"method": "grid"}
    eta = 3
    rungs = int(math.log(total / MIN_RUNG_REQUESTS, eta)) if total > MIN_RUNG_REQUESTS * eta else 0
    if rungs:
        search["halving"] = {"min_requests": math.ceil(total / eta ** rungs), "eta": eta}
    space = parse_space({
        "parameters": {"engine.workers": layouts, f"engine.workers.*.scheduler.{running}": RUNNING_LIMITS,
                       f"engine.workers.*.scheduler.{tokens}": budgets},
        "search": search,
        "constraints": {"max_gpus": gpus, "gpus_per_node": gpus_per_node},
        "objective": {"kind": "goodput_per_gpu"},
        "slo": sweep_slo.model_dump(),
    }, "recommend")
    notes.append(f"{len(layouts)} fleet layouts (TP {', '.join(map(str, tps))}; aggregated and prefill/decode) × "
                 f"{running} {RUNNING_LIMITS} × {tokens} {budgets}, on {total:,} requests"
                 + (f", successive halving from {search['halving']['min_requests']:,}" if rungs else ""))
    return base, space, notes
