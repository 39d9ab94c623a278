"""Figures of one run: the files exist, are PNGs, and plot exactly the run's own data."""

from __future__ import annotations


import numpy as np
import pytest

import servesim
from servesim.metrics import plots
from tests.support.cli import servesim_cli

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
    proc = servesim_cli("run", config, "--plots", "-q", timeout=None)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --plots") and "Traceback" not in proc.stderr
    out = tmp_path / "out"
    proc = servesim_cli("run", config, "--plots", "--out", out, "-q", timeout=None)
    assert proc.returncode == 0, proc.stderr
    assert {"ttft_cdf.png", "tpot_cdf.png", "timeline_aggregated-0.png"} <= {p.name for p in out.iterdir()}
    assert not list(out.glob(".*.tmp"))


# --------------------------------------------------------------------------- axes from the data, labels clear of points


@pytest.mark.parametrize("values, expected", [
    # 1..100: from 0 (the data reach below half their top) to 100 + 5% of the 99-wide span.
    (np.arange(1, 101), (0.0, 104.95, False)),
    # 1..200 and one outlier at 5000: p99.5 is sorted[0.995 * 200] = 200 and 5000 > 2 * 200, so the
    # axis stops at 200 + 5% of 199; 200 / 1 is not over 200x, so linear.
    (np.concatenate([np.arange(1, 201), [5000]]), (0.0, 209.95, False)),
    # 1, 10, 1000: p99.5 = 10 + 0.99 * 990 = 990.1, 1000 stays; 1000x: log, 1 / 1.25 to 1000 * 1.25.
    (np.array([1.0, 10.0, 1000.0]), (0.8, 1250.0, True)),
    # A narrow band far from 0: a 5% margin around it.
    (np.array([100.0, 101.0, 102.0]), (99.9, 102.1, False)),
])
def test_cdf_x_axis_comes_from_the_data(values, expected):
    low, high, log = plots.cdf_x_axis(np.sort(values.astype(float)))
    assert (low, high, log) == (pytest.approx(expected[0]), pytest.approx(expected[1]), expected[2])


def test_an_slo_beyond_the_data_does_not_stretch_the_axis(tmp_path):
    values = np.arange(1, 101, dtype=float)
    far = plots.plot_cdf(values, tmp_path / "far.png", "TTFT", slo_ms=2000.0)
    assert far["xlim"] == (0.0, pytest.approx(104.95)) and far["slo_on_axis"] is False
    near = plots.plot_cdf(values, tmp_path / "near.png", "TTFT", slo_ms=50.0)
    assert near["xlim"] == far["xlim"] and near["slo_on_axis"] is True
    for name in ("far.png", "near.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


def _pareto_points(spread: float):
    """Eight trials meeting the SLOs within `spread` tok/s/user of each other, and rivals."""
    ok = [{"trial_id": 310 + i, "x": 27.8 + spread * (i % 4) / 3, "y": 298.7, "ok": True,
           "label": "2× agg TP4, 8 GPUs"} for i in range(8)]
    rivals = [(330, 29.4, 303.4, "1× agg TP8, 8 GPUs"), (332, 30.3, 303.4, "1× agg TP8, 8 GPUs"),
              (328, 38.2, 273.3, "1× agg TP8, 8 GPUs"), (321, 47.8, 299.4, "1× P TP4 + 1× D TP4, 8 GPUs"),
              (326, 52.1, 199.3, "1× P TP4 + 2× D TP4, 12 GPUs")]
    return ok + [{"trial_id": t, "x": x, "y": y, "ok": False, "label": label} for t, x, y, label in rivals]


@pytest.mark.parametrize("spread, zoomed", [(0.45, True), (12.0, False)])
def test_pareto_labels_cover_no_point_and_huddled_winners_are_magnified(tmp_path, spread, zoomed):
    points = _pareto_points(spread)
    data = plots.plot_pareto(points, [330, 332, 321, 326], tmp_path / "p.png", "t", min_interactivity=20.0,
                             best=310)
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC
    assert data["zoomed"] is zoomed
    texts = [text for text, _ in data["labels"]]
    assert texts == ["recommended: 2× agg TP4, 8 GPUs", "1× agg TP8, 8 GPUs", "1× P TP4 + 1× D TP4, 8 GPUs",
                     "1× P TP4 + 2× D TP4, 12 GPUs"]
    boxes = [box for _, box in data["labels"]]
    for i, box in enumerate(boxes):
        assert all(box.overlap(o) == 0 for o in data["obstacles"]), texts[i]
        assert all(box.overlap(other) == 0 for other in boxes[i + 1:]), texts[i]


def test_axis_range_starts_at_zero_only_when_the_data_come_near_it():
    assert plots._axis_range([10.0, 100.0]) == (0.0, pytest.approx(112.0))
    # 199..304: a 12% margin of the 105 span on each side.
    assert plots._axis_range([199.0, 304.0]) == (pytest.approx(186.4), pytest.approx(316.6))
