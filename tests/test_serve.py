"""`servesim serve` (src/servesim/serve/): the openai client against a loopback server, usage
counts, error bodies, abort on disconnect, /metrics against the simulation's state, and the
run files written at SIGINT/SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servesim.serve.server import ServeOptions, build
from tests.support.serve_server import MS, ONE_SLOT, running_server, serve_config, wait_for

PROMPT = list(range(100))   # 100 prompt tokens, counted exactly
MODEL = "meta-llama/Llama-3.1-8B"


def _client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)


def test_completion_by_hand_with_the_openai_client():
    # 100 prompt tokens, 3 outputs (ignore_eos), 10 ms passes, no API-server time: tokens at 10,
    # 20 and 30 simulated ms after arrival; TTFT 10 ms, E2E 30 ms in the server's records.
    with running_server(serve_config()) as (live, url):
        reply = _client(url).completions.create(model=MODEL, prompt=PROMPT, max_tokens=3,
                                                extra_body={"ignore_eos": True})
        wait_for(lambda: len(live.collector.records) == 1, "the record")
    assert reply.choices[0].text == " tok tok tok" and reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (100, 3, 103)
    (record,) = list(live.collector.records)
    assert (record.input_length, record.output_length, record.ttft_ns, record.e2e_ns) == (100, 3, 10 * MS, 30 * MS)
    assert reply.id == "cmpl-0"


def test_chat_stream_with_usage_one_chunk_per_token():
    # Chat: "<|user|>\nhello there\n<|assistant|>\n" is 35 characters: 9 tokens at 4 per token.
    with running_server(serve_config()) as (_, url):
        chunks = list(_client(url).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello there"}], max_tokens=4, stream=True,
            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert texts == [" tok"] * 4 and chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (9, 4)


@pytest.mark.parametrize("body, tokens, reason", [
    ({}, 3, "stop"),                                   # drawn from serve.output_length: 3..3
    ({"max_tokens": 5}, 3, "stop"),                    # EOS (3) before max_tokens
    ({"max_tokens": 2}, 2, "length"),                  # max_tokens before EOS
    ({"min_tokens": 5}, 5, "stop"),                    # EOS held back to min_tokens
    ({"max_tokens": 4, "ignore_eos": True}, 4, "length"),
])
def test_output_length_from_eos_max_and_min_tokens(body, tokens, reason):
    with running_server(serve_config(serve={"output_length": {"min": 3, "max": 3}})) as (_, url):
        reply = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "x" * 40, **body}, timeout=30)
    data = reply.json()
    assert data["usage"] == {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
    assert data["choices"][0]["finish_reason"] == reason


def test_error_bodies():
    # max_model_len 256: a prompt of 256 tokens leaves no room for an output; one of 200 has 56.
    cfg = serve_config(scheduler={**ONE_SLOT, "max_model_len": 256})
    with running_server(cfg, api_key="k") as (_, url):
        client = _client(url, "k")
        with pytest.raises(openai.BadRequestError) as err:
            client.completions.create(model=MODEL, prompt=[1] * 256, max_tokens=1)
        assert err.value.body["message"].startswith("This model's maximum context length is 256 tokens. "
                                                    "However, your request has 256 input tokens.")
        assert (err.value.body["type"], err.value.body["code"]) == ("BadRequestError", 400)
        with pytest.raises(openai.BadRequestError, match=r"too large: 57\. .*\(57 > 256 - 200\)"):
            client.completions.create(model=MODEL, prompt=[1] * 200, max_tokens=57)
        client.completions.create(model=MODEL, prompt=[1] * 200, max_tokens=56)   # the boundary fits
        with pytest.raises(openai.BadRequestError, match="n and best_of must be 1"):
            client.completions.create(model=MODEL, prompt="hi", n=2)
        with pytest.raises(openai.BadRequestError, match="does not produce log-probabilities"):
            client.completions.create(model=MODEL, prompt="hi", logprobs=2)
        with pytest.raises(openai.NotFoundError, match="The model `other` does not exist"):
            client.completions.create(model="other", prompt="hi")
        with pytest.raises(openai.AuthenticationError):
            _client(url, "wrong").models.list()
        bad = httpx.post(f"{url}/v1/completions", content=b"{", headers={"Authorization": "Bearer k"})
        assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("the request body is not JSON")
        assert httpx.get(f"{url}/health").status_code == 200   # outside /v1: no key needed


def test_models_version_tokenize_detokenize():
    with running_server(serve_config(), served_model_name=["a", "b"]) as (live, url):
        models = _client(url).models.list().data
        version = httpx.get(f"{url}/version").json()
        tokens = httpx.post(f"{url}/tokenize", json={"prompt": "x" * 9}).json()
        text = httpx.post(f"{url}/detokenize", json={"tokens": [5, 6]}).json()
    assert [m.id for m in models] == ["a", "b"] and {m.root for m in models} == {MODEL}
    assert version["version"] == live.spec.engine_version
    assert (tokens["count"], tokens["max_model_len"], len(tokens["tokens"])) == (3, 131072, 3)   # ceil(9 / 4)
    assert text == {"prompt": " tok tok"}


def test_a_disconnected_stream_is_aborted_and_frees_its_blocks():
    with running_server(serve_config()) as (live, url):
        with httpx.stream("POST", f"{url}/v1/completions", timeout=30,
                          json={"prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True, "stream": True}) as resp:
            got = 0
            for line in resp.iter_lines():
                got += line.startswith("data: ")
                if got == 3:
                    break   # and close the connection, 3 tokens in
        wait_for(lambda: [r.request_id for r in live.sim.aborted] == [0], "the abort")
        wait_for(lambda: live.sim.snapshot()[0].kv_blocks_used == 0, "the blocks freed")
    (aborted,) = live.sim.aborted
    assert 3 <= aborted.num_output < 1000 and len(live.collector.records) == 0


def test_a_stream_cut_before_its_first_byte_is_aborted_when_its_pass_ends():
    """The client leaves once the headers are in, before any token. The prefill pass already
    running (200 ms) finishes, as vLLM's engine core reads aborts between steps: the request
    ends with that pass's one token and frees its blocks; no record is written."""
    with running_server(serve_config(pass_ms=200.0)) as (live, url):
        with httpx.stream("POST", f"{url}/v1/completions", timeout=30,
                          json={"prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True, "stream": True}) as resp:
            assert resp.status_code == 200   # and leave without reading a line
        wait_for(lambda: len(live.sim.aborted) == 1, "the abort")
        wait_for(lambda: live.sim.snapshot()[0].kv_blocks_used == 0, "the blocks freed")
    (aborted,) = live.sim.aborted
    assert aborted.num_output == 1 and len(live.collector.records) == 0


def test_a_non_streaming_client_that_goes_away_aborts_too():
    with running_server(serve_config()) as (live, url):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True},
                       timeout=0.3)
        wait_for(lambda: len(live.sim.aborted) == 1, "the abort")
        wait_for(lambda: live.sim.snapshot()[0].kv_blocks_used == 0, "the blocks freed")


def _samples(text: bytes) -> dict:
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in ("model_name", "engine")}
            out[(sample.name, tuple(sorted(labels.items())))] = sample.value
    return out


def test_metrics_equal_the_simulation_state():
    # A manual clock. Two requests of 100 prompt tokens (the same ids) and 3 outputs at 0 ms; one
    # slot. At 25 ms: request 0 runs (tokens at 10, 20 ms; 7 KV blocks of 16 tokens for its
    # 101 tokens), request 1 waits. At 100 ms both are done: request 1 prefilled 30-40 ms (TTFT 40),
    # tokens at 40, 50, 60 ms.
    clock = [0]
    live, _ = build(ServeOptions(serve_config(), speed=1.0), clock=lambda: clock[0])
    for _ in range(2):
        live.submit(PROMPT, 3, "length", "x")
    clock[0] = 25 * MS
    live.advance()
    m = _samples(live.metrics.render(live.sim))
    (snap,) = live.sim.snapshot()
    usable = live.sim.roles["aggregated"].workers[0].scheduler.kv.num_usable
    assert (snap.running, snap.waiting, snap.kv_blocks_used) == (1, 1, 7)
    assert m[("vllm:num_requests_running", ())] == 1 and m[("vllm:num_requests_waiting", ())] == 1
    assert m[("vllm:kv_cache_usage_perc", ())] == 7 / usable
    assert m[("vllm:prompt_tokens_total", ())] == 100 and m[("vllm:generation_tokens_total", ())] == 2
    assert m[("servesim:simulated_time_seconds", ())] == live.sim.now / 1e9
    clock[0] = 100 * MS
    live.advance()
    m = _samples(live.metrics.render(live.sim))
    records = list(live.collector.records)
    assert m[("vllm:num_requests_running", ())] == 0 and m[("vllm:kv_cache_usage_perc", ())] == 0
    assert m[("vllm:prompt_tokens_total", ())] == 200 and m[("vllm:generation_tokens_total", ())] == 6
    assert m[("vllm:request_success_total", (("finished_reason", "length"),))] == 2
    assert m[("vllm:time_to_first_token_seconds_count", ())] == 2
    assert m[("vllm:time_to_first_token_seconds_sum", ())] == pytest.approx(0.010 + 0.040)
    assert m[("vllm:inter_token_latency_seconds_count", ())] == 4      # 2 gaps of 10 ms each
    assert m[("vllm:inter_token_latency_seconds_sum", ())] == pytest.approx(0.040)
    assert m[("vllm:e2e_request_latency_seconds_sum", ())] == pytest.approx(0.030 + 0.060)
    assert m[("vllm:request_queue_time_seconds_sum", ())] == pytest.approx(0.030)   # request 1: 0-30 ms
    assert m[("vllm:prefix_cache_queries_total", ())] == 200
    assert m[("vllm:prefix_cache_hits_total", ())] == sum(r.cached_tokens for r in records) > 0
    assert m[("vllm:time_to_first_token_seconds_bucket", (("le", "0.01"),))] == 1
    assert m[("vllm:time_to_first_token_seconds_bucket", (("le", "0.04"),))] == 2
    assert m[("servesim:lag_max_seconds", ())] >= 0


def test_metrics_over_http_has_vllms_names():
    with running_server(serve_config()) as (_, url):
        text = httpx.get(f"{url}/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds",
                 "vllm:inter_token_latency_seconds", "vllm:request_queue_time_seconds",
                 "vllm:e2e_request_latency_seconds", "vllm:prefix_cache_queries_total",
                 "vllm:prefix_cache_hits_total", "servesim:lag_seconds"):
        assert f"\n{name}" in text, name
    assert "_created" not in text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_stop_writes_the_run_files_of_what_was_served(tmp_path, how):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(serve_config()))
    port = _free_port()
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "servesim", "serve", str(config), "--port", str(port),
                             "--out", str(out), "--format", "vllm"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(url), "the server's start")
        for n in (2, 3):
            httpx.post(f"{url}/v1/completions", json={"prompt": PROMPT, "max_tokens": n, "ignore_eos": True},
                       timeout=30)
        proc.send_signal(how)
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    stderr = proc.stderr.read()
    assert rc == 0, stderr
    assert sorted(p.name for p in out.iterdir()) == [".servesim-output", "config.resolved.yaml", "requests.csv",
                                                      "result.json", "summary.json", "workers.csv"]
    rows = (out / "requests.csv").read_text().splitlines()[1:]
    assert [r.split(",")[4:6] for r in rows] == [["100", "2"], ["100", "3"]]
    result = json.loads((out / "result.json").read_text())
    assert (result["completed"], result["total_input_tokens"], result["total_output_tokens"]) == (2, 200, 5)
    assert json.loads((out / "summary.json").read_text())["trace_format"] == "served"
    assert [r.split(",")[20] for r in rows] == ["cmpl-0", "cmpl-1"]   # trace_request_id: the response ids


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_local_tokenizer_counts_prompts_and_output_text(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3, "<|user|>": 4, "<|assistant|>": 5}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    cfg = serve_config(serve={"tokenizer": str(tmp_path)})
    with running_server(cfg) as (_, url):
        reply = _client(url).completions.create(model=MODEL, prompt="the cat sat on the mat", max_tokens=4,
                                                extra_body={"ignore_eos": True})
        chat = _client(url).chat.completions.create(model=MODEL, max_tokens=1,
                                                    messages=[{"role": "user", "content": "the cat"}])
        tokens = httpx.post(f"{url}/tokenize", json={"prompt": "the cat sat"}).json()["tokens"]
    assert reply.usage.prompt_tokens == 6                       # six words, "on" and "mat" unknown
    assert len(tokenizer.encode(reply.choices[0].text).ids) == reply.usage.completion_tokens == 4
    assert chat.usage.prompt_tokens == 4                        # <|user|> the cat <|assistant|>
    assert tokens == [1, 2, 3]


def test_serve_without_the_extra_says_how_to_install_it(monkeypatch, capsys):
    from servesim.cli import main

    monkeypatch.setitem(sys.modules, "uvicorn", None)   # as if the serve extra were not installed
    monkeypatch.delitem(sys.modules, "servesim.serve.server")
    monkeypatch.setattr(sys, "argv", ["servesim", "serve"])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err == "error: servesim serve needs the serve extra (uvicorn is missing): pip install 'servesim[serve]'\n"


def _fenced_after(lines: list[str], start: int) -> str:
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    last = next(i for i in range(first + 1, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[first + 1:last]) + "\n"


def test_the_docs_client_example_shows_what_it_prints(tmp_path):
    lines = (Path(__file__).resolve().parents[1] / "docs" / "serve.md").read_text().split("\n")
    script = _fenced_after(lines, lines.index("# client.py") - 1)
    shown = _fenced_after(lines, lines.index("<!-- serve-client-output -->"))
    (tmp_path / "client.py").write_text(script)
    with running_server(None) as (_, url):
        printed = subprocess.run([sys.executable, str(tmp_path / "client.py"), f"{url}/v1"], capture_output=True,
                                 text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == shown


def test_a_late_delivery_is_lag_and_warns_once(capsys):
    # A manual clock that jumps from 0 to 100 ms: tokens due at 10, 20, 30 ms are handed over at
    # 100 ms, 90, 80 and 70 ms late; past lag_warn_ms (50) one warning names the first.
    clock = [0]
    live, _ = build(ServeOptions(serve_config(serve={"lag_warn_ms": 50})), clock=lambda: clock[0])
    stream = live.submit(PROMPT, 3, "length", "x")
    clock[0] = 100 * MS
    live.advance()
    assert stream.delivered == 3 and (live.lag_ns, live.max_lag_ns) == (70 * MS, 90 * MS)
    err = capsys.readouterr().err
    assert err == ("warning: the simulation runs 90.0 ms (simulated) behind the clock, past serve.lag_warn_ms "
                   "(50): lower --speed or the load\n")
    m = _samples(live.metrics.render(live.sim))
    assert m[("servesim:lag_max_seconds", ())] == pytest.approx(0.09) and m[("servesim:lag_seconds_count", ())] == 3


def test_a_fleet_behind_one_port_labels_each_engine():
    # Two workers, round robin: request 0 to engine 0, request 1 to engine 1, each running alone.
    clock = [0]
    cfg = serve_config()
    cfg["engine"]["workers"]["aggregated"]["count"] = 2
    live, _ = build(ServeOptions(cfg), clock=lambda: clock[0])
    live.submit(PROMPT, 3, "length", "a")
    live.submit(PROMPT, 5, "length", "b")
    clock[0] = 35 * MS
    live.advance()
    text = live.metrics.render(live.sim).decode()
    assert 'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.0' in text
    assert 'vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B"} 1.0' in text
    assert 'vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B"} 3.0' in text
    assert 'vllm:generation_tokens_total{engine="1",model_name="meta-llama/Llama-3.1-8B"} 3.0' in text


def test_expose_workers_serves_each_worker_on_its_own_port(tmp_path):
    # Two workers on ports P and P+1: each port's request runs on its own one-worker fleet, and
    # --out holds one folder per worker.
    cfg = serve_config()
    cfg["engine"]["workers"]["aggregated"]["count"] = 2
    (tmp_path / "c.yaml").write_text(json.dumps(cfg))
    with socket.socket() as a, socket.socket() as b:   # two free ports in a row, by trying
        a.bind(("127.0.0.1", 0))
        port = a.getsockname()[1]
        try:
            b.bind(("127.0.0.1", port + 1))
        except OSError:
            pytest.skip("no two consecutive free ports")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "servesim", "serve", str(tmp_path / "c.yaml"), "--port", str(port),
                             "--expose", "workers", "--out", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        urls = [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        for url in urls:
            wait_for(lambda: _healthy(url), f"the server on {url}")
        for url, n in zip(urls, (2, 3)):
            httpx.post(f"{url}/v1/completions", json={"prompt": PROMPT, "max_tokens": n, "ignore_eos": True},
                       timeout=30)
        generated = [_samples(httpx.get(f"{url}/metrics").content)[("vllm:generation_tokens_total", ())]
                     for url in urls]
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    assert rc == 0, proc.stderr.read()
    assert generated == [2, 3]
    for worker, n in (("worker-0", "2"), ("worker-1", "3")):
        rows = (out / worker / "requests.csv").read_text().splitlines()[1:]
        assert [r.split(",")[5] for r in rows] == [n]
