"""/metrics: vLLM's Prometheus metric names and buckets over the live simulation's state.

Names, label names (model_name, engine) and buckets follow vLLM's v1 PrometheusStatLogger
(vllm/v1/metrics/loggers.py; docs/modeling/serve.md). Gauges are read from the simulation's
snapshot at scrape time; counters and histograms are fed as the simulation delivers and
finishes requests, at simulated times. `servesim:*` metrics are the server's own.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

from servesim.engine.request import Request

NS = 1e-9
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_GAP_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
LAG_BUCKETS = (0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length")


def buckets_1_2_5(limit: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `limit` (vLLM's token-count buckets)."""
    out, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > limit:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


class ServeMetrics:
    """One registry per server; engine label = the worker's index in the fleet."""

    def __init__(self, model_name: str, workers: list[str], max_model_len: int) -> None:
        disable_created_metrics()   # no `_created` series beside each counter, as vLLM's /metrics
        self.registry = registry = CollectorRegistry()
        self.model_name = model_name
        self.engine_of = {name: str(i) for i, name in enumerate(workers)}

        def gauge(name, doc):
            return Gauge(name, doc, LABELS, registry=registry)

        def counter(name, doc):
            return Counter(name, doc, LABELS, registry=registry)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, LABELS, buckets=buckets, registry=registry)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemptions from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               LABELS + ("finished_reason",), registry=registry)
        token_buckets = buckets_1_2_5(max_model_len)
        self.prompt_hist = histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                     token_buckets)
        self.generation_hist = histogram("vllm:request_generation_tokens", "Number of generation tokens "
                                         "processed.", token_buckets)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             TOKEN_GAP_BUCKETS)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token "
                              "per request in seconds.", TOKEN_GAP_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             REQUEST_LATENCY_BUCKETS)
        self.queue = histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase "
                               "for request.", REQUEST_LATENCY_BUCKETS)
        self.inference = histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING "
                                   "phase for request.", REQUEST_LATENCY_BUCKETS)
        self.prefill = histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase "
                                 "for request.", REQUEST_LATENCY_BUCKETS)
        self.decode = histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase "
                                "for request.", REQUEST_LATENCY_BUCKETS)
        self.lag = Histogram("servesim:lag_seconds", "How late (simulated seconds) each delivery reached its "
                             "client after its simulated time.", buckets=LAG_BUCKETS, registry=registry)
        self.lag_max = Gauge("servesim:lag_max_seconds", "The largest delivery lag so far (simulated seconds).",
                             registry=registry)
        self.sim_time = Gauge("servesim:simulated_time_seconds", "The simulation's clock.", registry=registry)
        self._lag_max = 0
        # Every engine's series from the start, at zero, as vLLM makes them per engine up front.
        for metric in (self.running, self.waiting, self.kv_usage, self.prefix_queries, self.prefix_hits,
                       self.preemptions, self.prompt_tokens, self.generation_tokens, self.prompt_hist,
                       self.generation_hist, self.ttft, self.itl, self.tpot, self.e2e, self.queue, self.inference,
                       self.prefill, self.decode):
            for engine in self.engine_of.values():
                metric.labels(model_name, engine)
        for engine in self.engine_of.values():
            for reason in FINISH_REASONS:
                self.success.labels(model_name, engine, reason)

    def _labels(self, metric, worker: str = ""):
        return metric.labels(self.model_name, self.engine_of.get(worker, "0"))

    # ------------------------------------------------------------------ fed by the simulation

    def on_prefilled(self, prompt_tokens: int, worker: str = "") -> None:
        self._labels(self.prompt_tokens, worker).inc(prompt_tokens)

    def on_generated(self, tokens: int, worker: str = "") -> None:
        self._labels(self.generation_tokens, worker).inc(tokens)

    def on_finished(self, request: Request) -> None:
        """A finished request's histograms, as vLLM observes them at its finish."""
        worker = request.worker
        lab = lambda metric: self._labels(metric, worker)   # noqa: E731
        reason = "length" if request.num_output >= request.requested_output else "stop"
        self.success.labels(self.model_name, self.engine_of.get(worker, "0"), reason).inc()
        lab(self.prefix_queries).inc(request.prompt_len)
        lab(self.prefix_hits).inc(request.cached_tokens or 0)
        lab(self.preemptions).inc(request.num_preemptions)
        lab(self.prompt_hist).observe(request.prompt_len)
        lab(self.generation_hist).observe(request.num_output)
        first, finish = request.first_token_ns, request.finish_ns
        lab(self.ttft).observe((first - request.arrival_ns) * NS)
        lab(self.e2e).observe((finish - request.arrival_ns) * NS)
        if request.num_output > 1:
            lab(self.tpot).observe((finish - first) / (request.num_output - 1) * NS)
        scheduled = request.first_scheduled_ns if request.first_scheduled_ns is not None else first
        lab(self.queue).observe((scheduled - request.engine_arrival_ns) * NS)
        lab(self.inference).observe((finish - scheduled) * NS)
        lab(self.prefill).observe((first - scheduled) * NS)
        lab(self.decode).observe((finish - first) * NS)

    def on_token_gap(self, gap_ns: int, worker: str = "") -> None:
        self._labels(self.itl, worker).observe(gap_ns * NS)

    def on_lag(self, lag_ns: int) -> None:
        self.lag.observe(max(lag_ns, 0) * NS)
        if lag_ns > self._lag_max:
            self._lag_max = lag_ns
            self.lag_max.set(lag_ns * NS)

    # ------------------------------------------------------------------ read at scrape time

    def render(self, sim) -> bytes:
        """The exposition text, with the gauges set from `sim`'s snapshot now."""
        usable = {worker.name: max(worker.scheduler.kv.num_usable, 1)
                  for role in sim.roles.values() for worker in role.workers}
        for snap in sim.snapshot():
            self._labels(self.running, snap.name).set(snap.running)
            self._labels(self.waiting, snap.name).set(snap.waiting)
            self._labels(self.kv_usage, snap.name).set(snap.kv_blocks_used / usable[snap.name])
        self.sim_time.set(sim.now * NS)
        return generate_latest(self.registry)
