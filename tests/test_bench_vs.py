"""`servesim bench --vs aisimulate`: the counterpart configs, the interleaving and the ratios, with a
stand-in for AISimulate's CLI (the real one is never run in CI)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from servesim import bench, bench_vs
from servesim.errors import ServesimError


def _row(key: str) -> bench.Workload:
    return next(w for w in bench.workloads(Path("/traces")) if w.key == key)


def _aisim(key: str) -> dict | None:
    w = _row(key)
    return bench_vs.aisimulate_config(w, bench.config_for(w, "fixed"))


def test_sglang_and_trtllm_rows_take_servesims_default_pools_in_their_block_sizes():
    sglang = _aisim("2s")["engine"]
    assert (sglang["backend"], sglang["mode"], sglang["hardware"]) == ("sglang", "aggregated", "h100_sxm")
    worker = sglang["workers"]["aggregated"]
    # SGLang's one-token pages; the pool servesim resolves for 8B on an H100 (docs/performance.md).
    assert worker["kv_cache"]["block_size"] == 1 and worker["kv_cache"]["capacity"]["blocks"] == 418577
    assert worker["scheduler"] == {"max_sequences": 1024, "max_batched_tokens": 8192}   # chunked_prefill_size
    trtllm = _aisim("2t")["engine"]["workers"]["aggregated"]
    # 32-token blocks: 460,736 tokens of max_tokens, 14,398 blocks (+1 as servesim counts the pool).
    assert trtllm["kv_cache"]["block_size"] == 32 and trtllm["kv_cache"]["capacity"]["blocks"] == 14399
    assert trtllm["timing"] == {"type": "fixed", "prefill_ms": 0.0, "decode_ms": 10.0}


def test_the_pd_row_is_disaggregated_with_prefill_passes_charged_as_prefill():
    cfg = _aisim("5d")
    engine = cfg["engine"]
    assert engine["mode"] == "disaggregated" and set(engine["workers"]) == {"prefill", "decode"}
    assert engine["kv_transfer"] == {"bandwidth_gb_per_second": 50.0, "timing_mode": "full_prompt"}
    prefill, decode = engine["workers"]["prefill"], engine["workers"]["decode"]
    assert prefill["parallelism"]["replicas"] == decode["parallelism"]["replicas"] == 4
    # AISimulate would give a prefill-only pass 0 ms under 0 / 10; servesim gives every pass 10 ms.
    assert prefill["timing"]["prefill_ms"] == 10.0 and prefill["timing"]["decode_ms"] == 0.0
    assert decode["timing"]["prefill_ms"] == 0.0 and decode["timing"]["decode_ms"] == 10.0
    assert prefill["scheduler"]["max_sequences"] == 1024   # not AISimulate's prefill default of 1
    assert cfg["traffic"]["source"]["paths"] == ["/traces/mooncake/conversation_trace.jsonl"]


@pytest.mark.parametrize("key", ["5r", "6", "7"])
def test_rows_without_a_counterpart(key):
    assert _aisim(key) is None


def _fake_aisimulate(tmp_path: Path, log: Path, own_ms: float, status: int = 0) -> Path:
    """A stand-in `aisimulate` beside a `python`: logs its call, writes prediction.json."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "aisimulate"
    script.write_text(f"""#!{sys.executable}
import json, pathlib, sys
args = sys.argv[1:]
out = pathlib.Path(args[args.index("--output-dir") + 1])
out.mkdir(parents=True, exist_ok=True)
with open({str(log)!r}, "a") as fh:
    fh.write("aisimulate\\n")
(out / "prediction.json").write_text(json.dumps({{"wall_time_ms": {own_ms}}}))
if {status}:
    sys.stderr.write("boom: bad engine\\n")
sys.exit({status})
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir / "python"


def test_pairs_alternate_the_tools_and_ratios_are_per_pair(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    python = _fake_aisimulate(tmp_path, log, own_ms=400.0)
    walls = iter([1.0, 2.0, 4.0])

    def fake_servesim(config_path, out_dir):
        with open(log, "a") as fh:
            fh.write("servesim\n")
        return bench_vs.ProcessTimes(next(walls), 0.5, 100.0)

    monkeypatch.setattr(bench_vs, "run_servesim", fake_servesim)
    w = _row("2a")
    result = bench_vs.measure_pairs(w, bench.config_for(w, "fixed"), python, 3)
    assert log.read_text().split() == ["servesim", "aisimulate"] * 3
    assert [p.own_ms for p in result.aisimulate] == [400.0] * 3
    # Own clocks: 400 / 100 ms in every pair.
    assert result.ratios("own_ms") == [4.0, 4.0, 4.0]
    theirs = [p.wall_s for p in result.aisimulate]
    assert result.ratios("wall_s") == [theirs[0] / 1.0, theirs[1] / 2.0, theirs[2] / 4.0]
    row = bench_vs.format_pairs(w, result)
    assert row.startswith("| 2a | closed loop c256, 1024/1024, 8,000 requests | 3 | 2.00 |")
    # Own clocks as medians in ms (100 and 400 in every pair), then their ratio.
    assert row.endswith("| 100 | 400 | 4.00x (4.00–4.00) |")


def test_spread_is_the_median_and_range():
    assert bench_vs.spread([3.0, 1.0, 2.0]) == "2.00x (1.00–3.00)"
    assert bench_vs.spread([]) == ""


def test_a_failing_aisimulate_is_one_sentence(tmp_path, monkeypatch):
    python = _fake_aisimulate(tmp_path, tmp_path / "calls.log", own_ms=1.0, status=3)
    monkeypatch.setattr(bench_vs, "run_servesim", lambda c, o: bench_vs.ProcessTimes(1.0, 1.0, 1.0))
    w = _row("2a")
    with pytest.raises(ServesimError, match="aisimulate predict exited 3: boom: bad engine"):
        bench_vs.measure_pairs(w, bench.config_for(w, "fixed"), python, 1)


def test_the_suite_prints_the_vs_table_and_names_rows_without_counterparts(tmp_path, monkeypatch, capsys):
    python = _fake_aisimulate(tmp_path, tmp_path / "calls.log", own_ms=50.0)
    monkeypatch.setattr(bench_vs, "run_servesim", lambda c, o: bench_vs.ProcessTimes(1.0, 1.0, 10.0))
    assert bench.run_suite("2a,7", "fixed", 1, None, ("aisimulate", str(python))) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[:2] == bench_vs.VS_HEADER.split("\n")
    assert len(lines) == 3 and lines[2].startswith("| 2a |") and lines[2].endswith("| 5.00x (5.00–5.00) |")
    assert "note: row 7 has no AISimulate counterpart" in err
