"""Trace loading: formats, inference, and errors that name the file and line."""

import pytest

from servesim.errors import ServesimError
from servesim.workload.trace import infer_format, load_trace

SHARED = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "traces"


def test_azure_timestamps_are_exact_and_relative(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    reqs, fmt = load_trace(p)
    assert fmt == "azure"
    # 50.9951690 - 46.6805900 = 4.3145790 s, to the 100 ns of the text.
    assert [r.arrival_ns for r in reqs] == [0, 4_314_579_000]
    assert [(r.input_length, r.output_length) for r in reqs] == [(374, 44), (396, 109)]


def test_mooncake_and_servesim_jsonl(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 27, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}\n'
                 '{"timestamp": 27.5, "input_length": 5, "output_length": 1}\n')
    reqs, fmt = load_trace(p)
    assert fmt == "mooncake"
    assert reqs[0].arrival_ns == 27_000_000 and reqs[1].arrival_ns == 27_500_000
    assert reqs[0].hash_ids == (1, 2)
    q = tmp_path / "s.jsonl"
    q.write_text('{"timestamp": 0, "input_length": 3, "output_length": 1, "session_id": "a"}\n')
    assert infer_format(q) == "servesim-jsonl"


def test_vidur_with_and_without_arrivals(tmp_path):
    p = tmp_path / "v.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.314579,396,109\n")
    reqs, fmt = load_trace(p)
    assert fmt == "vidur" and reqs[1].arrival_ns == 4_314_579_000
    q = tmp_path / "lengths.csv"
    q.write_text("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n3772,54,3826,69.8\n")
    reqs, _ = load_trace(q)
    assert reqs[0].arrival_ns is None


@pytest.mark.parametrize("line,fragment", [
    ('{"timestamp": 0, "input_length": 0, "output_length": 1}', "input_length must be at least 1"),
    ('{"timestamp": 0, "input_length": 4, "output_length": "2"}', "output_length must be an integer"),
    ('{"timestamp": -1, "input_length": 4, "output_length": 2}', "timestamp must be a non-negative"),
    ('{"timestamp": 0, "input_length": 4}', "output_length must be an integer"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "extra": 1}', "unknown field 'extra'"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1, "a"]}', "hash_ids must be a list"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1, true]}', "hash_ids must be a list"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1, 2.0]}', "hash_ids must be a list"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": 7}', "hash_ids must be a list"),
    ('{"timestamp": 0, "input_length": 4, ', "invalid JSON"),
])
def test_bad_jsonl_line_names_file_and_line(tmp_path, line, fragment):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n' + line + "\n")
    with pytest.raises(ServesimError) as info:
        load_trace(p, "mooncake")
    assert f"{p} line 2" in str(info.value)
    assert fragment in str(info.value)


def test_bad_csv_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
                 "2023-11-16 18:15:47.00,x,44\n")
    with pytest.raises(ServesimError, match=r"bad.csv line 3: ContextTokens must be an integer"):
        load_trace(p)


def test_missing_and_unknown_format(tmp_path):
    with pytest.raises(ServesimError, match="does not exist"):
        load_trace(tmp_path / "nope.jsonl")
    p = tmp_path / "weird.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ServesimError, match="cannot tell the format"):
        load_trace(p)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/traces is not beside the project")
def test_real_traces_load():
    reqs, fmt = load_trace(SHARED / "mooncake" / "conversation_trace.jsonl")
    assert fmt == "mooncake" and len(reqs) == 12031
    reqs, fmt = load_trace(SHARED / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv", limit=2000)
    assert fmt == "azure" and len(reqs) == 2000
    assert max(r.input_length + r.output_length for r in reqs) == 7979


def test_embedded_slice_matches_the_source():
    from importlib import resources

    slice_path = resources.files("servesim").joinpath("data", "azure_conv_2000.csv")
    shipped = slice_path.read_text().splitlines()
    assert len(shipped) == 2001
    source = SHARED / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    if source.exists():
        assert shipped == source.read_text().splitlines()[:2001]
