"""The `bench` client: `vllm bench serve`'s arrivals (vLLM 0.32 benchmarks/serve.py), by hand."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import servesim
from servesim.config import BenchClient
from servesim.yaml_io import load_yaml
from servesim.errors import ServesimError
from servesim.workload.bench_client import bench_arrivals, request_rate_at
from servesim.workload.clients import ClosedLoop, GatedSchedule, ScheduledClient, make_client
from servesim.workload.trace import TraceRequest


def _requests(n: int) -> list[TraceRequest]:
    return [TraceRequest(request_id=i, arrival_ns=None, input_length=8, output_length=2) for i in range(n)]


def _client(**fields) -> BenchClient:
    return BenchClient.model_validate({"mode": "bench", **fields})


def _times(n: int, seed: int = 0, **fields) -> list[int]:
    return [t for t, _ in bench_arrivals(_client(**fields), _requests(n), n, seed)]


def test_even_gaps_when_burstiness_is_inf():
    # gaps 1/4 s each; the first request waits its gap too: 0.25, 0.5, 0.75, 1.0 s
    assert _times(4, request_rate=4.0, burstiness="inf") == [250_000_000, 500_000_000, 750_000_000, 1_000_000_000]


def test_rate_inf_sends_everything_at_once():
    assert _times(5, request_rate="inf") == [0] * 5
    assert _times(3) == [0] * 3   # vLLM's default request_rate is inf


def test_linear_ramp_up_by_hand():
    # progress i/(5-1): rates 1, 2, 3, 4, 5 requests/s; with even gaps 1, 1/2, 1/3, 1/4, 1/5 s,
    # sent at 1, 1.5, 1.8333.., 2.0833.., 2.2833.. s (no rescaling with a ramp-up).
    cfg = _client(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=5, burstiness="inf")
    assert [request_rate_at(cfg, i, 5) for i in range(5)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    times = [t for t, _ in bench_arrivals(cfg, _requests(5), 5, 0)]
    assert times == [1_000_000_000, 1_500_000_000, 1_833_333_333, 2_083_333_333, 2_283_333_333]


def test_exponential_ramp_up_by_hand():
    # rate = 1·16^(i/4): 1, 2, 4, 8, 16 requests/s
    cfg = _client(ramp_up_strategy="exponential", ramp_up_start_rps=1, ramp_up_end_rps=16)
    assert [request_rate_at(cfg, i, 5) for i in range(5)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert request_rate_at(cfg, 0, 1) == 1.0   # one request: progress 0 / max(0, 1)


def test_gamma_gaps_are_rescaled_to_n_over_rate():
    # Without a ramp-up vLLM scales the times so the last one is at N / rate = 1000 / 10 = 100 s,
    # so the mean gap (counting the first from 0) is 1/rate exactly.
    for burstiness in (0.25, 1.0, 4.0):
        times = _times(1000, request_rate=10.0, burstiness=burstiness)
        assert times[-1] == 100_000_000_000
        assert times == sorted(times) and times[0] > 0


def test_burstiness_sets_the_spread_of_the_gaps():
    # Gamma(k, θ) gaps have a coefficient of variation 1/√k: 2 at k = 0.25, 1 at k = 1
    # (Poisson: exponential gaps, P(gap > mean) = e^-1), 0.5 at k = 4. Seeded (seed 3), so the draws
    # are fixed: measured CVs 1.982, 1.011, 0.497 (within 1.1%; rel 0.06 leaves room), and
    # P(gap > mean) 0.36645 against e^-1 = 0.36788, whose standard error is sqrt(p(1-p)/20000) = 0.0034,
    # so abs 0.015 is about 4.4 of them.
    for burstiness, cv in ((0.25, 2.0), (1.0, 1.0), (4.0, 0.5)):
        gaps = np.diff([0, *_times(20000, seed=3, request_rate=10.0, burstiness=burstiness)]) / 1e9
        assert gaps.mean() == pytest.approx(0.1, rel=1e-9)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)
    gaps = np.diff([0, *_times(20000, seed=3, request_rate=10.0)]) / 1e9
    assert (gaps > 0.1).mean() == pytest.approx(np.exp(-1), abs=0.015)


def test_same_seed_same_times_other_seed_other_times():
    assert _times(50, seed=7, request_rate=5.0) == _times(50, seed=7, request_rate=5.0)
    assert _times(50, seed=7, request_rate=5.0) != _times(50, seed=8, request_rate=5.0)


def test_lazy_requests_give_the_times_of_the_list():
    cfg = _client(request_rate=5.0, burstiness=2.0)
    listed = [t for t, _ in bench_arrivals(cfg, _requests(300), 300, 1)]
    lazy = [t for t, _ in make_client(cfg, iter(_requests(300)), 1, total=300).initial()]
    assert listed == lazy


def test_client_kinds():
    assert isinstance(make_client(_client(request_rate=2.0), _requests(3), 0), ScheduledClient)
    assert isinstance(make_client(_client(max_concurrency=2), _requests(3), 0), ClosedLoop)
    assert isinstance(make_client(_client(request_rate=2.0, max_concurrency=2), _requests(3), 0), GatedSchedule)


def test_semaphore_holds_arrivals_until_a_slot_frees():
    gate = GatedSchedule(iter(()), limit=2)
    a, b, c, d = _requests(4)
    assert gate.admit(0, a) and gate.admit(1, b)
    assert not gate.admit(2, c) and not gate.admit(3, d)
    assert gate.on_complete(10) is c      # first come, first served, as asyncio's semaphore
    assert gate.on_complete(11) is d
    assert gate.on_complete(12) is None   # nobody waiting: the slot is free again
    assert gate.admit(13, a)


@pytest.mark.parametrize("fields, words", [
    ({"request_rate": 0}, "greater than 0"),
    ({"request_rate": "fast"}, "request_rate"),
    ({"burstiness": -1.0}, "burstiness"),
    ({"max_concurrency": 0}, "max_concurrency"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1}, "both ramp_up_start_rps and ramp_up_end_rps"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 5, "ramp_up_end_rps": 1}, "must not exceed"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 2, "request_rate": 3.0},
     "leave request_rate unset"),
    ({"ramp_up_start_rps": 1, "ramp_up_end_rps": 2}, "need ramp_up_strategy"),
    ({"ramp_up_strategy": "exponential", "ramp_up_start_rps": 0, "ramp_up_end_rps": 2}, "greater than 0"),
])
def test_bad_bench_clients_are_one_sentence(fields, words):
    cfg = {"workload": {"synthetic": {"num_requests": 2, "input_length": 8, "output_length": 2},
                        "client": {"mode": "bench", **fields}}}
    with pytest.raises(ServesimError, match=words) as info:
        servesim.simulate(cfg)
    assert "\n" not in str(info.value)


def test_inf_spellings_and_the_resolved_config():
    # YAML's .inf and the string "inf" both mean float("inf"); the resolved config says "inf".
    assert _client(request_rate=float("inf")).request_rate == "inf"
    assert _client(burstiness=float("inf")).burstiness == "inf"
    assert _client(request_rate="inf").request_rate == "inf" and _client(burstiness="inf").burstiness == "inf"
    assert _client(**load_yaml("request_rate: .inf", "test")).request_rate == "inf"


def test_far_arrivals_are_an_error():
    with pytest.raises(ServesimError, match="integer-nanosecond"):
        _times(10, request_rate=1e-12)


# --------------------------------------------------------------------------- whole runs


def _run(client: dict, n: int = 24):
    cfg = {"engine": {"timing": {"kind": "fixed", "pass_ms": 10.0},
                      "workers": {"aggregated": {"scheduler": {"num_gpu_blocks": 2000, "max_model_len": 4096}}}},
           "workload": {"synthetic": {"num_requests": n, "input_length": {"min": 50, "max": 400},
                                      "output_length": {"min": 1, "max": 40}}, "client": client}}
    return servesim.simulate(cfg, seed=5)


def _comparable(result) -> tuple[str, str]:
    """summary.json less the config echo (the hash, the client) and wall time, and requests.csv."""
    summary = {k: v for k, v in result.summary.items() if k not in ("config_hash", "wall_time_ms")}
    summary["simulated"] = {k: v for k, v in summary.get("simulated", {}).items() if k != "client"}
    rows = io.StringIO()
    result.requests.write_csv(rows)
    return json.dumps(summary, sort_keys=True), rows.getvalue()


def test_closed_loop_and_rate_inf_with_max_concurrency_are_the_same_run():
    closed = _run({"mode": "closed_loop", "concurrency": 3})
    bench = _run({"mode": "bench", "request_rate": "inf", "max_concurrency": 3})
    assert _comparable(closed) == _comparable(bench)


def test_max_concurrency_caps_requests_in_flight():
    # 24 requests at 1000/s: all due within 24 ms, far faster than they finish.
    result = _run({"mode": "bench", "request_rate": 1000.0, "max_concurrency": 2})
    assert result.summary["completed"] == 24
    assert result.summary["peak_batch_requests"] == 2
    open_rate = _run({"mode": "bench", "request_rate": 1000.0})
    assert open_rate.summary["peak_batch_requests"] > 2
