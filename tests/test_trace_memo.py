"""load_trace memoises the last plain trace read by its bytes (a sweep's trials read one file)."""

from __future__ import annotations

from servesim.workload import trace
from servesim.workload.trace import load_trace

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n{rows}"


def _write(path, lengths):
    rows = "".join(f"2023-11-16 18:15:{i:02d}.0000000,{inp},{out}\n" for i, (inp, out) in enumerate(lengths))
    path.write_text(AZURE.format(rows=rows))


def test_second_read_comes_from_the_memo_as_a_fresh_list(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    _write(path, [(100, 10), (200, 20), (300, 30)])
    reads = []
    real = trace._read_csv
    monkeypatch.setattr(trace, "_read_csv", lambda *a: reads.append(a) or real(*a))
    first, fmt = load_trace(path, "azure", 2)
    second, _ = load_trace(path, "azure", 2)
    assert len(reads) == 1   # the second came from the memo
    assert second == first and second is not first and fmt == "azure"
    assert [r.input_length for r in second] == [100, 200]
    second.append(None)   # a caller's list is its own
    assert load_trace(path, "azure", 2)[0] == first
    load_trace(path, "azure", 3)   # another limit: read again
    assert len(reads) == 2


def test_changed_bytes_are_read_again(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    _write(path, [(100, 10), (200, 20)])
    assert [r.input_length for r in load_trace(path, "azure")[0]] == [100, 200]
    _write(path, [(700, 10), (800, 20)])   # same size, same path, maybe the same mtime
    assert [r.input_length for r in load_trace(path, "azure")[0]] == [700, 800]


def test_session_traces_are_not_memoised(tmp_path):
    assert trace._memo_key(tmp_path / "x.jsonl", "mooncake-sessions", None) is None
    assert trace._memo_key(tmp_path / "missing.csv", "azure", None) is None


def test_the_summary_hash_is_the_one_the_memo_took(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    _write(path, [(100, 10), (200, 20)])
    hashed = []
    real = trace.file_sha256
    monkeypatch.setattr(trace, "file_sha256", lambda p: hashed.append(p) or real(p))
    load_trace(path, "azure")
    assert trace.trace_sha256(path) == real(path) and len(hashed) == 1   # no second read
    _write(path, [(700, 10), (800, 20)])   # changed with no load between: hashed afresh
    assert trace.trace_sha256(path) == real(path) and len(hashed) == 2
    load_trace(path, "azure")
    other = tmp_path / "u.csv"
    _write(other, [(1, 1)])
    assert trace.trace_sha256(other) == real(other)   # not the file last read: hashed now
