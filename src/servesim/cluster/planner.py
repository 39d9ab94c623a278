"""Dynamo's SLA planner: replicas from predicted load and profiled per-GPU throughput.

Followed: ai-dynamo/dynamo's SLA planner of 2025 (each file's commit: docs/modeling/
autoscaling.md), components/planner/src/dynamo/planner/utils/planner_core.py's
`Planner.observe_metrics`, `predict_load`, `_compute_replica_requirements` and
`make_adjustments`; `defaults.py`'s `SLAPlannerDefaults`; `load_predictor.py`'s
`ConstantPredictor`; `perf_interpolation.py`'s `PrefillInterpolator.interpolate_thpt_per_gpu`
and `DecodeInterpolator.find_best_throughput_per_gpu`; the frontend's metrics
(lib/llm/src/http/service/metrics.rs). The rules (docs/modeling/autoscaling.md, "SLA planner"):

- every adjustment interval (at k × interval, k ≥ 1) it reads what the frontend saw over the
  interval: the requests completed, their mean input and output lengths, TTFT, ITL and
  duration; with an average NaN (nothing finished, no second token) it changes nothing;
- correction (Dynamo's default): p = observed TTFT / profiled, d = observed ITL / profiled
  at the engines' mean concurrency (Little's law) and context `isl + osl / 2`;
- the constant predictor takes the next interval's load to be the last one observed;
- prefill: `ceil(num_req × isl / interval × min(1, p) / (thpt_per_gpu(isl) × gpus per
  replica))`, the per-GPU prefill throughput of one prompt of `isl` tokens;
- decode: the per-GPU decode throughput at the highest concurrency whose inter-token
  latency meets `itl_s / d` at context `isl + osl / 2`, and
  `ceil(num_req × osl / interval / (that × gpus per replica))`;
- aggregated (not a mode of that planner; servesim's extension): one engine time-shares
  both, so the two fractions of a replica add before the ceiling;
- the count is clamped to [min_replicas, max_replicas] and applied at once, through the same
  provisioning, readiness and draining as the HPA (cluster/autoscaler.py).

The profile Dynamo's profiler measures on the GPUs servesim takes from the role's own step
time model: that is how the planner uses profile data, with servesim's pass time as the
profile (exact for a steady single prompt and a steady decode batch; no interpolation grid).
"""

from __future__ import annotations

import math

from servesim.cluster.autoscaler import Autoscaler
from servesim.engine.registry import backend_of
from servesim.engine.request import Status
from servesim.timing.base import PassShape


class Profile:
    """A role's prefill and decode performance from its step-time model, as Dynamo's profiler
    would measure it on the role's GPUs."""

    def __init__(self, timing, sched, gpus: int) -> None:
        self.timing = timing
        self.gpus = gpus
        counterparts = backend_of(sched).counterparts
        budget = getattr(sched, counterparts["budget"], None)
        self.budget = budget if isinstance(budget, int) and budget > 0 else None
        self.max_seqs = getattr(sched, counterparts["seqs"])
        self.kv_tokens = (sched.kv_blocks - 1) * sched.kv_block_size

    def ttft_s(self, isl: float) -> float:
        """One prompt of `isl` tokens alone, in chunks of the token budget."""
        tokens = max(1, round(isl))
        step = self.budget or tokens
        done = total = 0
        while done < tokens:
            chunk = min(step, tokens - done)
            total += self.timing.duration_ns(PassShape(prefill_chunks=[(chunk, done)]))
            done += chunk
        return total / 1e9

    def prefill_thpt_per_gpu(self, isl: float) -> float:
        return max(1, round(isl)) / self.ttft_s(isl) / self.gpus

    def itl_s(self, concurrency: int, context: int) -> float:
        shape = PassShape(num_decodes=concurrency, decode_tokens=concurrency, decode_context=concurrency * context)
        return self.timing.duration_ns(shape) / 1e9

    def best_decode(self, itl_target: float, context_length: float) -> tuple[float, int]:
        """(decode tokens/s per GPU, concurrency) at the highest concurrency that meets the ITL
        target, searched from the most the KV cache and the batch hold down (the interpolated
        ITL need not be monotonic); none meeting it: that of one request."""
        context = max(1, round(context_length))
        most = max(1, min(self.max_seqs, self.kv_tokens // context))
        for concurrency in range(most, 0, -1):
            itl = self.itl_s(concurrency, context)
            if itl <= itl_target:
                return concurrency / itl / self.gpus, concurrency
        return 1 / self.itl_s(1, context) / self.gpus, 1


class Window:
    """What the frontend's counters and histograms gather over one adjustment interval."""

    def __init__(self) -> None:
        self.count = 0             # requests_total
        self.isl = self.osl = 0    # Σ input_sequence_tokens, Σ output_sequence_tokens
        self.ttft_ns = self.duration_ns = 0   # Σ time_to_first_token, Σ request_duration
        self.itl_ns = self.itl_tokens = 0     # Σ inter-token gaps and their count

    def add(self, request) -> None:
        self.count += 1
        self.isl += request.prompt_len
        self.osl += request.num_output
        self.duration_ns += request.finish_ns - request.arrival_ns
        if request.first_token_ns is not None:
            self.ttft_ns += request.first_token_ns - request.arrival_ns
        if request.num_output > 1:
            self.itl_ns += request.finish_ns - request.first_token_ns
            self.itl_tokens += request.num_output - 1

    def averages(self) -> dict | None:
        """Dynamo's Metrics of the interval; None when one is NaN (nothing finished, or no
        request gave a second token): the adjustment is skipped."""
        if not self.count or not self.itl_tokens:
            return None
        n = self.count
        return {"num_req": n, "isl": self.isl / n, "osl": self.osl / n, "ttft_s": self.ttft_ns / n / 1e9,
                "itl_s": self.itl_ns / self.itl_tokens / 1e9, "request_duration_s": self.duration_ns / n / 1e9}


class Planner(Autoscaler):
    """Autoscaler whose count comes from Dynamo's SLA planner (the module docstring)."""

    def __init__(self, role, router, cfg) -> None:
        super().__init__(role, router, cfg)
        worker = role.workers[0]
        self.profile = Profile(worker.timing, role.scheduler_cfg, self.gpus_per_replica)
        self.interval_s = cfg.adjustment_interval_s
        self.window = Window()
        # Dynamo's correction factors: observed TTFT and ITL over the profile's, kept from the
        # last adjustment that computed them.
        self.p_correction = self.d_correction = 1.0
        self.adjustments: list[dict] = []

    def on_complete(self, request, now: int) -> None:
        """The frontend saw a request's response end."""
        if request.status != Status.REJECTED:
            self.window.add(request)

    def recommend(self, now: int, ready: list, current: int) -> tuple[float | None, int]:
        seen, self.window = self.window.averages(), Window()
        if seen is None:
            return None, current   # Dynamo's metrics are NaN: the adjustment is skipped
        if self.cfg.correction:
            self._correct(seen, len(ready))
        # The constant predictor: the next interval's load is the one just observed.
        needed, facts = self.replicas_needed(seen["num_req"], seen["isl"], seen["osl"])
        cfg = self.cfg
        applied = min(max(math.ceil(needed), cfg.min_replicas), cfg.max_replicas)
        self.adjustments.append({"time_s": now / 1e9, **seen, **facts, "replicas_needed": needed,
                                 "replicas": applied})
        return needed / len(ready), applied

    def _correct(self, seen: dict, ready: int) -> None:
        """`make_adjustments`: the TTFT and ITL the profile expects for what was observed."""
        isl, osl = seen["isl"], seen["osl"]
        if self.role.name in ("prefill", "aggregated"):
            self.p_correction = seen["ttft_s"] / self.profile.ttft_s(isl)
        if self.role.name in ("decode", "aggregated"):
            # The decode engines' mean concurrency over the interval, by Little's law.
            concurrency = seen["num_req"] / ready * seen["request_duration_s"] / self.interval_s
            expected = self.profile.itl_s(max(1, round(concurrency)), max(1, round(isl + osl / 2)))
            self.d_correction = seen["itl_s"] / expected

    def replicas_needed(self, num_req: float, isl: float, osl: float) -> tuple[float, dict]:
        """The replicas the predicted load needs, before the ceiling, and how they were found."""
        role, cfg, gpus = self.role.name, self.cfg, self.gpus_per_replica
        facts, needed = {}, 0.0
        if role in ("prefill", "aggregated"):
            # Prefill's correction only ever lowers the load (Dynamo's min(1, factor)).
            tokens_s = num_req * isl / self.interval_s * min(1.0, self.p_correction)
            per_gpu = self.profile.prefill_thpt_per_gpu(isl)
            facts.update(p_correction=self.p_correction, prefill_tokens_s=tokens_s, prefill_thpt_per_gpu=per_gpu,
                         profile_ttft_s=self.profile.ttft_s(isl), ttft_target_s=cfg.ttft_s)
            needed += tokens_s / per_gpu / gpus
        if role in ("decode", "aggregated"):
            tokens_s = num_req * osl / self.interval_s
            itl = cfg.itl_s / self.d_correction if self.d_correction > 0 else cfg.itl_s
            per_gpu, concurrency = self.profile.best_decode(itl, isl + osl / 2)
            facts.update(d_correction=self.d_correction, corrected_itl_s=itl, decode_tokens_s=tokens_s,
                         decode_thpt_per_gpu=per_gpu, decode_concurrency=concurrency)
            needed += tokens_s / per_gpu / gpus
        return needed, facts

    def describe(self) -> dict:
        # The timeline's average is the predicted load per ready replica, in replicas' capacity.
        return {"policy": "sla_planner", "metric": "predicted load", "target": 1.0}

    def summary(self, start: int, end: int) -> dict:
        return {**super().summary(start, end), "adjustments": self.adjustments}
