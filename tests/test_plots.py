"""Figures of one run: the files exist, are PNGs, and plot exactly the run's own data."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import servesim
from servesim.metrics import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SMALL = {
    "engine": {"timing": {"kind": "fixed", "pass_ms": 10.0},
               "workers": {"aggregated": {"count": 2, "scheduler": {
                   "num_gpu_blocks": 400, "max_model_len": 512, "max_num_seqs": 8, "max_num_batched_tokens": 256}}}},
    "workload": {"synthetic": {"num_requests": 60, "input_length": {"min": 10, "max": 200},
                               "output_length": {"min": 1, "max": 40}},
                 "client": {"mode": "poisson", "rate": 40.0}},
    "slo": {"ttft_ms": 100, "tpot_ms": 12},
}


@pytest.fixture(scope="module")
def result():
    return servesim.simulate(SMALL)


def test_run_plots_are_pngs_of_the_records(result, tmp_path):
    names = plots.run_plot_names(result)
    assert names == ["ttft_cdf.png", "tpot_cdf.png", "timeline_aggregated-0.png", "timeline_aggregated-1.png"]
    data = plots.plot_run(result, {name: tmp_path / name for name in names})
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC

    records = [r for r in result.requests if r.completed]
    ttft = sorted(r.ttft_ns / 1e6 for r in records)
    tpot = sorted(r.tpot_ns / 1e6 for r in records if r.output_length > 1)
    assert data["ttft_cdf.png"]["x_ms"].tolist() == pytest.approx(ttft, rel=0, abs=1e-9)
    assert data["tpot_cdf.png"]["x_ms"].tolist() == pytest.approx(tpot, rel=0, abs=1e-9)
    assert data["ttft_cdf.png"]["fraction"][-1] == 1.0
    # The percentiles drawn are the summary's.
    assert np.percentile(data["ttft_cdf.png"]["x_ms"], 90) == pytest.approx(result.summary["p90_ttft_ms"])

    for worker in ("aggregated-0", "aggregated-1"):
        series = data[f"timeline_{worker}.png"]
        timeline = result.timelines[worker]
        assert series["time_s"].tolist() == [t / 1e3 for t in timeline["time_ms"]]
        assert series["running"].tolist() == timeline["running"]
        assert series["waiting"].tolist() == timeline["waiting"]
        assert series["kv_percent"].tolist() == [100 * u for u in timeline["kv_utilization"]]
        # The throughput curves integrate to the worker's totals: its requests' outputs, its tokens.
        widths = np.diff(series["window_edges_s"])
        delivered = sum(r.output_length for r in records if r.worker == worker)
        assert float((series["output_tok_s"] * widths).sum()) == pytest.approx(delivered)
        assert float((series["computed_tok_s"] * widths).sum()) == pytest.approx(timeline["tokens"][-1])
        assert series["window_edges_s"][-1] * 1e3 == max(r.finish_ns for r in records if r.worker == worker) / 1e6
    # Passes and tokens add up to the run's totals.
    assert sum(t["passes"][-1] for t in result.timelines.values()) == result.summary["passes"]


def test_timeline_is_thinned_but_keeps_the_last_pass():
    config = {**SMALL, "workload": {**SMALL["workload"], "synthetic": {**SMALL["workload"]["synthetic"],
                                                                          "num_requests": 600}}}
    result = servesim.simulate(config)
    for timeline in result.timelines.values():
        assert len(timeline["time_ms"]) < 2 * 256 + 1
        assert timeline["time_ms"] == sorted(timeline["time_ms"])
        assert timeline["waiting"][-1] == 0
    worker_passes = {w["worker"]: w["passes"] for w in result.summary["workers"]}
    assert {name: t["passes"][-1] for name, t in result.timelines.items()} == worker_passes


def test_output_throughput_spreads_each_request_from_first_token_to_finish():
    requests = {"first_ms": np.array([0.0, 10.0]), "finish_ms": np.array([20.0, 10.0]),
                "output_length": np.array([5.0, 1.0])}
    # Request 0: 1 token at 0 ms, 4 more evenly to 20 ms; request 1: its one token at 10 ms.
    assert plots.output_tokens_by(np.array([0.0, 5.0, 10.0, 20.0]), requests).tolist() == [1.0, 2.0, 4.0, 6.0]


def test_a_prefill_workers_panel_shows_prompt_tokens_computed(tmp_path):
    config = {**SMALL, "engine": {**SMALL["engine"], "workers": {
        role: {"scheduler": SMALL["engine"]["workers"]["aggregated"]["scheduler"]} for role in ("prefill", "decode")}}}
    result = servesim.simulate(config)
    data = plots.plot_run(result, {name: tmp_path / name for name in plots.run_plot_names(result)})
    assert data["timeline_prefill-0.png"]["output_tok_s"] is None
    assert data["timeline_decode-0.png"]["output_tok_s"] is not None
    assert (tmp_path / "timeline_prefill-0.png").read_bytes()[:8] == PNG_MAGIC


def test_cdf_of_a_hand_made_list():
    x, y = plots.cdf(np.array([3.0, 1.0, 2.0, 2.0]))
    assert x.tolist() == [1.0, 2.0, 2.0, 3.0]
    assert y.tolist() == [0.25, 0.5, 0.75, 1.0]


def test_cli_run_plots(tmp_path):
    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(SMALL))
    proc = subprocess.run([sys.executable, "-m", "servesim", "run", str(config), "--plots", "-q"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --plots") and "Traceback" not in proc.stderr
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "servesim", "run", str(config), "--plots", "--out", str(out),
                           "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert {"ttft_cdf.png", "tpot_cdf.png", "timeline_aggregated-0.png"} <= {p.name for p in out.iterdir()}
    assert not list(out.glob(".*.tmp"))
