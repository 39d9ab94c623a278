"""requests.csv: the text of a hand-checked row, and the chunked writer against its own records."""

from __future__ import annotations

import csv
import io

import pytest


def _csv(result, **kwargs) -> str:
    fh = io.StringIO()
    result.requests.write_csv(fh, **kwargs)
    return fh.getvalue()


def test_row_text_by_hand(run):
    # Fixed 10 ms passes, sync scheduling. Request 0 arrives at 0, prefills in [0, 10) (first
    # token at 10), decodes its 2nd and 3rd tokens at 20 and 30: TTFT 10, E2E 30, TPOT (30-10)/2 = 10.
    # Request 1 arrives at 2.5 ms, waits for the pass ending at 10, prefills in [10, 20) and
    # decodes at 30: TTFT 17.5, E2E 27.5, TPOT (30-20)/1 = 10.
    r = run([{"timestamp": 0.0, "input_length": 100, "output_length": 3},
             {"timestamp": 2.5, "input_length": 50, "output_length": 2}], async_scheduling=False)
    lines = _csv(r.result).splitlines()
    # TTFT parts (fixed timing: no request path): request 0 path 0, queue 0, prefill 10;
    # request 1 waits 10 - 2.5 = 7.5 for its first pass, then prefills 10; no transfer.
    assert lines[1] == "0,0,10,30,100,3,0,0,aggregated-0,10,30,10,0,3,ok,,,,0,0,,,0,0,10,"
    assert lines[2] == "1,2.5,20,30,50,2,0,0,aggregated-0,17.5,27.5,10,10,2,ok,,,,0,0,,,0,7.5,10,"


def test_chunks_write_the_same_rows_as_the_records(run):
    rows = [{"timestamp": 0.37 * i, "input_length": 1 + 13 * i % 90, "output_length": 1 + 7 * i % 11}
            for i in range(40)]
    r = run(rows, max_num_seqs=4, num_gpu_blocks=12, max_model_len=128)  # 11 blocks: preemptions
    whole = _csv(r.result)
    for chunk in (1, 7, 40, 41):
        assert _csv(r.result, chunk=chunk) == whole
    parsed = list(csv.DictReader(io.StringIO(whole)))
    assert len(parsed) == 40
    for row, record in zip(parsed, r.result.requests):
        assert int(row["request_id"]) == record.request_id
        assert float(row["ttft_ms"]) * 1e6 == record.ttft_ns
        assert float(row["e2e_ms"]) * 1e6 == record.e2e_ns
        assert (row["tpot_ms"] == "") == (record.tpot_ns is None)
        if record.tpot_ns is not None:
            # Written with 6 decimals of ms: rounded to the nanosecond.
            assert abs(float(row["tpot_ms"]) * 1e6 - record.tpot_ns) <= 0.5 + 1e-6
        assert int(row["preemptions"]) == record.preemptions and row["status"] == record.status


def test_histogram_add_many_counts_like_one_add_per_value():
    from servesim.metrics.histogram import LogHistogram

    # Bucket i holds (γ^(i-1), γ^i] with γ = 1.005/0.995 ≈ 1.01005: 99, 100 and 101 fall in
    # buckets 460, 461 and 462 (ln 100 / ln γ = 460.5), 5,000,000 and 5,000,001 share 1543.
    # Unsorted values, repeats, zeros and a weight of 3 exercise every branch.
    values = [0, 101, 100, 100, 250, 0, 101, 99, 5_000_000, 5_000_001]
    one_by_one, bulk = LogHistogram(), LogHistogram()
    for value in values:
        one_by_one.add(value, 3)
    bulk.add_many(values, 3)
    assert (bulk.counts, bulk.count, bulk.total, bulk.zeros) == (
        one_by_one.counts, one_by_one.count, one_by_one.total, one_by_one.zeros)
    assert bulk.zeros == 6 and bulk.count == 30


@pytest.mark.parametrize("short", [0, 16, 1000])
def test_histogram_add_many_short_and_bisected_paths_agree(monkeypatch, short):
    # add_many buckets up to _SHORT values one at a time, longer lists by bisection: with the
    # threshold moved either way both paths give add's counts, in add's key order.
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from servesim.metrics import histogram
    from servesim.metrics.histogram import LogHistogram

    monkeypatch.setattr(histogram, "_SHORT", short)

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.integers(0, 10**9), max_size=40), st.integers(0, 4))
    def check(values, weight):
        one_by_one, bulk = LogHistogram(), LogHistogram()
        for value in sorted(values):
            one_by_one.add(value, weight)
        bulk.add_many(values, weight)
        assert list(bulk.counts.items()) == list(one_by_one.counts.items())
        assert (bulk.count, bulk.total, bulk.total_sq, bulk.zeros) == (
            one_by_one.count, one_by_one.total, one_by_one.total_sq, one_by_one.zeros)

    check()


def test_more_worker_names_than_the_code_columns_hold_is_an_error():
    # Worker codes are read back as uint16: the 65,537th name would wrap to code 0.
    from servesim.errors import ServesimError
    from servesim.metrics.records import RequestTable

    table = RequestTable()
    for index in range(0x10000):
        assert table._name_index(f"w{index}") == index
    assert table._name_index("w65535") == 0xFFFF   # a name already known is no new code
    with pytest.raises(ServesimError, match="more than 65,536 workers"):
        table._name_index("one-too-many")


def test_tpot_cells_in_bulk_are_the_per_cell_division():
    # The bulk division must write what `_ms(span / (output - 1))` writes for each cell: spans
    # that are whole, fractional and repeating, undefined cells (blank), and spans past 2**53 ns
    # (divided one by one: doubles no longer hold such ints exactly).
    import numpy as np

    from servesim.metrics.records import RequestTable, _ms

    rng = np.random.default_rng(7)
    spans = [*rng.integers(0, 10**13, 500).tolist(), 20_000_000, 10_000_000, 1, 7, 0, 2**53 - 1]
    outputs = [*rng.integers(0, 5_000, 500).tolist(), 3, 2, 3, 4, 2, 3]
    for extra in ([], [(2**53 + 1, 3)]):
        span = np.array(spans + [s for s, _ in extra], dtype=np.int64)
        output = np.array(outputs + [o for _, o in extra], dtype=np.int64)
        defined = output >= 2
        cells = RequestTable._tpot_cells(span, output, defined)
        assert cells == [_ms(s / (o - 1)) if o >= 2 else "" for s, o in zip(span.tolist(), output.tolist())]
    assert RequestTable._tpot_cells(np.array([20_000_000]), np.array([3]), np.array([True])) == ["10"]
