"""Energy and cost in summary.json, and the sweep objectives that use them (metrics/cost.py)."""

from __future__ import annotations

import pytest

from servesim import simulate
from servesim.config import SloConfig
from servesim.errors import ServesimError
from servesim.sweep.objective import Judge
from servesim.sweep.space import SweepSpace

# One request of 16 + 4 tokens on the first of two H100 workers, 10 ms a pass: a prefill pass
# and three decode passes, 40 ms. Worker 0 is busy all 40 ms, worker 1 never.
BASE = {
    "gpu": "h100-sxm",
    "engine": {"timing": {"kind": "fixed", "pass_ms": 10.0},
               "workers": {"aggregated": {"count": 2, "scheduler": {
                   "num_gpu_blocks": 200, "max_model_len": 512, "max_num_seqs": 16, "max_num_batched_tokens": 256}}}},
    "workload": {"synthetic": {"num_requests": 1, "input_length": 16, "output_length": 4},
                 "client": {"mode": "closed_loop", "concurrency": 1}},
}


def _summary(**cost):
    return simulate({**BASE, "cost": cost}).summary


def test_energy_from_the_catalogue_power():
    s = _summary()
    # Busy worker: 0.04 s × 700 W = 28 J; idle one: 0.04 s × 80 W = 3.2 J; 31.2 J over 4 output tokens.
    assert s["energy_j"] == pytest.approx(31.2)
    assert s["mean_power_w"] == pytest.approx(780.0)
    assert s["energy_per_output_token_j"] == pytest.approx(7.8)
    assert "cost_usd" not in s   # no prices, no cost


def test_measured_power_and_prices():
    s = _summary(gpu_price_per_hour={"h100": 3.6}, gpu_power_w={"h100-sxm": {"idle_w": 100, "busy_w": 500}})
    # 0.04 s × 500 W + 0.04 s × 100 W = 24 J.
    assert s["energy_j"] == pytest.approx(24.0)
    # 2 GPUs × 0.04 s / 3600 × $3.6 = $0.00008; per M tokens: 4 output -> $20, 16 input -> $5, 20 both -> $4.
    assert s["cost_usd"] == pytest.approx(8e-5)
    assert (s["cost_per_mtok_output_usd"], s["cost_per_mtok_input_usd"], s["cost_per_mtok_total_usd"]) == \
        pytest.approx((20.0, 5.0, 4.0))
    assert s["cost_per_request_usd"] == pytest.approx(8e-5)


@pytest.mark.parametrize("cost,message", [
    ({"gpu_price_per_hour": {"b200": 6.0}}, "no price for h100-sxm"),
    ({"gpu_price_per_hour": {"h1000": 6.0}}, "cost.gpu_price_per_hour: unknown GPU 'h1000'"),
    ({"gpu_power_w": {"h100": {"idle_w": 800, "busy_w": 700}}}, "idle_w (800.0) is larger than busy_w"),
    ({"gpu_price_per_hour": {"h100": -1.0}}, "greater than or equal to 0"),
])
def test_bad_cost_blocks(cost, message):
    with pytest.raises(ServesimError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _summary(**cost)


def _space(kind: str) -> SweepSpace:
    return SweepSpace.model_validate({"parameters": {"engine.workers.aggregated.scheduler.max_num_seqs": [4, 8]},
                                      "objective": {"kind": kind}})


def test_cost_objectives_need_prices():
    with pytest.raises(ServesimError, match="objective cost_per_mtok needs GPU prices"):
        Judge.for_space(_space("cost_per_mtok"), SloConfig(), priced=False)


def _row(tid: int, cost: float, good: int, per_mtok: float) -> dict:
    return {"trial_id": tid, "status": "ok", "summary": {
        "completed": 10, "failed_requests": 0, "good_requests": good, "cost_usd": cost,
        "cost_per_mtok_output_usd": per_mtok, "gpus": 1, "request_goodput_req_s": 1.0,
        "output_throughput_tok_s": 1.0, "median_tpot_ms": 10.0, "p90_ttft_ms": 1.0, "p90_tpot_ms": 1.0}}


def test_cost_objectives_rank():
    rows = [_row(0, cost=2.0, good=10, per_mtok=3.0), _row(1, cost=1.0, good=4, per_mtok=4.0)]
    cheapest = Judge.for_space(_space("cost_per_mtok"), SloConfig())
    assert [r["trial_id"] for r in cheapest.ranked(rows)] == [0, 1]      # $3 < $4 per M tokens
    per_dollar = Judge.for_space(_space("goodput_per_dollar"), SloConfig())
    # 10 / $2 = 5 good requests per dollar against 4 / $1 = 4.
    assert [r["trial_id"] for r in per_dollar.ranked(rows)] == [0, 1]
    assert per_dollar.score(rows[1]) == pytest.approx(4.0)
