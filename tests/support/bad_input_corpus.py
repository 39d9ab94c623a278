"""A corpus of bad and edge inputs for the CLI and the Python API (tests/test_bad_inputs.py runs it).

Every bad input must end in exit status 2 with one line on stderr starting `error:`
that names its cause (`SAYS`), no traceback, within a time bound, and nothing written;
the few edge inputs that are valid (a UTF-8 byte-order mark, which servesim accepts
silently; huge seeds and hash ids) must run.

`python -m tests.support.bad_input_corpus [ID_FRAGMENT ...]` (from the repository root) runs the
corpus in subprocesses, with a timeout, and counts clean errors, tracebacks, hangs and
wrong results (exit 0 for a bad input, more than one line, files written).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DIR = object()          # a file spec that stands for an (empty) folder
TIME_LIMIT_S = 20       # per case; every case here takes well under a second when handled

TRACE = "".join(json.dumps({"timestamp": t, "input_length": 20, "output_length": 3}) + "\n" for t in (0, 5, 9))
MODEL = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 1000, "intermediate_size": 512, "max_position_embeddings": 4096}


def base_config(trace: str = "trace.jsonl", **dotted) -> dict:
    """A tiny fixed-pass-time run of `trace`; dotted keys replace (None deletes) fields."""
    config = {
        "engine": {"timing": {"kind": "fixed", "pass_ms": 10.0},
                   "workers": {"aggregated": {"scheduler": {"num_gpu_blocks": 1000, "max_model_len": 1024,
                                                            "max_num_seqs": 16, "max_num_batched_tokens": 512}}}},
        "workload": {"trace": trace, "format": "mooncake", "client": {"mode": "open_loop"}},
    }
    for key, value in dotted.items():
        *parents, last = key.split("__")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return config


def synthetic(**fields) -> dict:
    spec = {"num_requests": 3, "input_length": 20, "output_length": 3, **fields}
    return base_config(workload__trace=None, workload__format=None, workload__synthetic=spec)


def cfg_text(**dotted) -> str:
    return json.dumps(base_config(**dotted))


def jsonl(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@dataclass
class Case:
    id: str
    category: str
    files: dict[str, object]            # relative path -> text, bytes or DIR
    args: list[str]                     # after `servesim`; "{d}" is the case's folder
    expect: str = "error"               # "error" (exit 2, one line) or "ok" (exit 0)
    # Extra condition on the folder after the run; returns a problem or None.
    check: Callable[[Path], str | None] | None = None
    keep: set[str] = field(default_factory=set)   # paths the run may create or change


def run_case(tmp: str = "{d}/c.yaml", *extra: str) -> list[str]:
    return ["run", tmp, "-q", *extra]


def _trace_files(trace: object, name: str = "trace.jsonl", fmt: str | None = "mooncake") -> dict:
    config = base_config(trace=name) if fmt else base_config(trace=name, workload__format=None)
    if fmt:
        config["workload"]["format"] = fmt
    return {"c.yaml": json.dumps(config), name: trace}


DEEP = "a: " + "[" * 1200 + "]" * 1200 + "\n"   # past the recursion limit of PyYAML's composer
LAUGHS = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
                   + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]) + "\n"
UNHASHABLE = "? [a]\n: 1\n"


def _model_case(name: str, **fields) -> Case:
    model = {k: v for k, v in {**MODEL, **fields}.items() if v != "DELETE"}
    return Case(f"model-{name}", "model", {"c.yaml": cfg_text(model="m.json"), "m.json": json.dumps(model),
                                           "trace.jsonl": TRACE}, run_case())


def _space(data: object) -> str:
    return data if isinstance(data, str) else json.dumps(data)


def _sweep(space: object) -> Case:
    return ["sweep", "{d}/c.yaml", "--space", "{d}/s.yaml", "--out", "{d}/sweep", "--workers", "1", "-q"]


def _no_file(name: str) -> Callable[[Path], str | None]:
    return lambda d: f"{name} was written" if (d / name).exists() else None


def _intact(name: str, text: str) -> Callable[[Path], str | None]:
    return lambda d: None if (d / name).read_text() == text else f"{name} was overwritten"


def _only_new_outputs(d: Path) -> str | None:
    names = sorted(p.name for p in (d / "out").iterdir())
    return None if "old_plot.png" not in names else f"stale files left beside new results: {names}"


CASES: list[Case] = [
    # ------------------------------------------------------------------ numeric overflow
    Case("epoch-ms-scaled", "overflow", _trace_files(jsonl({"timestamp": 1.7e12, "input_length": 5,
                                                            "output_length": 2}))
         | {"c.yaml": cfg_text(workload__client={"mode": "open_loop", "time_scale": 1e9})}, run_case()),
    Case("timestamp-1e300", "overflow", _trace_files(jsonl({"timestamp": 1e300, "input_length": 5,
                                                            "output_length": 2})), run_case()),
    Case("timestamp-inf", "overflow", _trace_files('{"timestamp": 1e400, "input_length": 5, "output_length": 2}\n'),
         run_case()),
    Case("timestamp-int-huge", "overflow", _trace_files(jsonl({"timestamp": 10**30, "input_length": 5,
                                                               "output_length": 2})), run_case()),
    Case("input-length-huge", "overflow", _trace_files(jsonl({"timestamp": 0, "input_length": 10**30,
                                                              "output_length": 2})), run_case()),
    Case("output-length-huge", "overflow", _trace_files(jsonl({"timestamp": 0, "input_length": 5,
                                                               "output_length": 10**30})), run_case()),
    # Hash ids are only compared, and seeds feed numpy's SeedSequence: any size works.
    Case("hash-id-huge", "overflow", _trace_files(jsonl({"timestamp": 0, "input_length": 5, "output_length": 2,
                                                         "hash_ids": [10**30]})), run_case(), "ok"),
    Case("vidur-arrived-huge", "overflow", _trace_files("num_prefill_tokens,num_decode_tokens,arrived_at\n"
                                                        "5,2,1e300\n", "t.csv", "vidur"), run_case()),
    Case("vidur-arrived-inf", "overflow", _trace_files("num_prefill_tokens,num_decode_tokens,arrived_at\n"
                                                       "5,2,inf\n", "t.csv", "vidur"), run_case()),
    Case("azure-year-span", "overflow", _trace_files("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                                     "0001-01-01 00:00:00,5,2\n9999-12-31 23:59:59,5,2\n",
                                                     "t.csv", "azure"), run_case()),
    Case("pass-ms-huge", "overflow", {"c.yaml": cfg_text(engine__timing={"kind": "fixed", "pass_ms": 1e300}),
                                      "trace.jsonl": TRACE}, run_case()),
    Case("pass-ms-1e15", "overflow", {"c.yaml": cfg_text(engine__timing={"kind": "fixed", "pass_ms": 1e15}),
                                      "trace.jsonl": TRACE}, run_case()),
    Case("polynomial-huge", "overflow", {"c.yaml": cfg_text(engine__timing={"kind": "polynomial",
                                                                            "per_prefill_token_ms": 1e300}),
                                         "trace.jsonl": TRACE}, run_case()),
    Case("tokenization-huge", "overflow", {"c.yaml": cfg_text(engine__tokenization_ms=1e300),
                                           "trace.jsonl": TRACE}, run_case()),
    Case("poisson-rate-tiny", "overflow", {"c.yaml": cfg_text(workload__client={"mode": "poisson", "rate": 1e-300}),
                                           "trace.jsonl": TRACE}, run_case()),
    Case("bench-rate-tiny", "overflow",
         {"c.yaml": cfg_text(workload__client={"mode": "bench", "request_rate": 1e-300}), "trace.jsonl": TRACE},
         run_case()),
    Case("time-scale-huge", "overflow", {"c.yaml": cfg_text(workload__client={"mode": "open_loop",
                                                                              "time_scale": 1e300}),
                                         "trace.jsonl": TRACE}, run_case()),
    Case("synthetic-length-1e30", "overflow", {"c.yaml": json.dumps(synthetic(input_length=10**30))}, run_case()),
    Case("synthetic-range-1e30", "overflow",
         {"c.yaml": json.dumps(synthetic(input_length={"min": 1, "max": 10**30}))}, run_case()),
    Case("seed-huge", "overflow", {"c.yaml": cfg_text(seed=10**30), "trace.jsonl": TRACE}, run_case(), "ok"),
    Case("cli-seed-huge", "overflow", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--seed", str(10**30)), "ok"),
    # ------------------------------------------------------------------ files
    Case("config-is-folder", "files", {"c.yaml": DIR}, run_case()),
    Case("trace-is-folder", "files", {"c.yaml": cfg_text(), "trace.jsonl": DIR}, run_case()),
    Case("trace-is-folder-inferred", "files", {"c.yaml": cfg_text(workload__format=None), "trace.jsonl": DIR},
         run_case()),
    Case("cli-trace-is-folder", "files", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "t": DIR},
         run_case("{d}/c.yaml", "--trace", "{d}/t")),
    Case("model-is-folder", "files", {"c.yaml": cfg_text(model="m.json"), "trace.jsonl": TRACE, "m.json": DIR},
         run_case()),
    Case("passes-is-folder", "files", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "p": DIR},
         run_case("{d}/c.yaml", "--passes", "{d}/p")),
    Case("lengths-from-folder", "files",
         {"c.yaml": json.dumps(synthetic(input_length=None, output_length=None, lengths_from="l.jsonl")),
          "l.jsonl": DIR}, run_case()),
    Case("space-is-folder", "files", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "s.yaml": DIR}, _sweep(None)),
    Case("config-latin1", "files", {"c.yaml": "model: llama-3.1-8b # caf\xe9\n".encode("latin-1")}, run_case()),
    Case("trace-latin1", "files", _trace_files(b'{"timestamp": 0, "input_length": 5, "output_length": 2}\n\xe9\n'),
         run_case()),
    Case("trace-latin1-inferred", "files", _trace_files(b"\xe9\xff\n", fmt=None), run_case()),
    Case("csv-latin1", "files", _trace_files(b"num_prefill_tokens,num_decode_tokens\n5,2\n\xe9,2\n", "t.csv",
                                             "vidur"), run_case()),
    Case("model-latin1", "files", {"c.yaml": cfg_text(model="m.json"), "trace.jsonl": TRACE,
                                   "m.json": json.dumps(MODEL).encode() + b" \xe9"}, run_case()),
    Case("space-latin1", "files", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "s.yaml": b"parameters: \xe9\n"},
         _sweep(None)),
    Case("utf16-config", "files", {"c.yaml": cfg_text().encode("utf-16")}, run_case()),
    Case("csv-nul", "files", _trace_files("num_prefill_tokens,num_decode_tokens\n5,2\x00\n", "t.csv", "vidur"),
         run_case()),
    Case("csv-huge-field", "files", _trace_files("num_prefill_tokens,num_decode_tokens\n5," + "2" * 200_000 + "\n",
                                                 "t.csv", "vidur"), run_case()),
    Case("jsonl-deep", "files", _trace_files("[" * 100_000 + "]" * 100_000 + "\n"), run_case()),
    Case("trace-empty", "files", _trace_files(""), run_case()),
    Case("trace-missing", "files", {"c.yaml": cfg_text()}, run_case()),
    # A UTF-8 byte-order mark (as Windows editors write) is accepted silently.
    Case("config-bom", "files", {"c.yaml": "\ufeff" + cfg_text(), "trace.jsonl": TRACE}, run_case(), "ok"),
    Case("trace-bom", "files", _trace_files("\ufeff" + TRACE), run_case(), "ok"),
    Case("trace-bom-inferred", "files", _trace_files("\ufeff" + TRACE, fmt=None), run_case(), "ok"),
    Case("csv-bom-inferred", "files", _trace_files("\ufeffnum_prefill_tokens,num_decode_tokens\n5,2\n", "t.csv",
                                                   None), run_case(), "ok"),
    Case("model-bom", "files", {"c.yaml": cfg_text(model="m.json"), "trace.jsonl": TRACE,
                                "m.json": "\ufeff" + json.dumps(MODEL)}, run_case(), "ok"),
    Case("space-bom", "files", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                "s.yaml": "\ufeff" + json.dumps({"parameters": {"seed": [0]}})},
         _sweep(None), "ok", keep={"sweep"}),
    # ------------------------------------------------------------------ YAML structure
    Case("config-unhashable-key", "yaml", {"c.yaml": UNHASHABLE}, run_case()),
    Case("config-unhashable-nested", "yaml", {"c.yaml": "engine:\n  ? {a: 1}\n  : 2\n"}, run_case()),
    Case("config-deep", "yaml", {"c.yaml": DEEP}, run_case()),
    Case("config-deep-mapping", "yaml", {"c.yaml": "a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n"}, run_case()),
    Case("config-laughs", "yaml", {"c.yaml": LAUGHS}, run_case()),
    Case("config-laughs-in-field", "yaml", {"c.yaml": LAUGHS.replace("a8:", "seed:"), "trace.jsonl": TRACE},
         run_case()),
    Case("set-deep", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "seed=" + "[" * 1200 + "]" * 1200)),
    Case("set-unhashable", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "seed={[a]: 1}")),
    Case("config-list", "yaml", {"c.yaml": "- 1\n- 2\n"}, run_case()),
    Case("config-tagged", "yaml", {"c.yaml": "seed: !!python/object:os.system [echo]\n"}, run_case()),
    Case("space-unhashable-key", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "s.yaml": UNHASHABLE},
         _sweep(None)),
    Case("space-deep", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "s.yaml": DEEP}, _sweep(None)),
    Case("space-laughs", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                  "s.yaml": LAUGHS + "parameters: {seed: *a8}\n"}, _sweep(None)),
    Case("space-laughs-param", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                        "s.yaml": LAUGHS.replace("\n", "\n  ").replace("a0:", "parameters:\n  a0:", 1)
                                        .rstrip() + "\n"}, _sweep(None)),
    Case("space-list", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "s.yaml": "- 1\n"}, _sweep(None)),
    Case("space-huge-range", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                      "s.yaml": _space({"parameters": {"seed": {"min": 0, "max": 10**12,
                                                                                "step": 1}}})}, _sweep(None)),
    Case("space-huge-grid", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                     "s.yaml": _space({"parameters": {f"p{i}.x": list(range(30))
                                                                      for i in range(10)}})}, _sweep(None)),
    Case("space-tiny-factor", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                       "s.yaml": _space({"parameters": {"seed": {"min": 1, "max": 10**300,
                                                                                 "factor": 1.0000001}}})},
         _sweep(None)),
    Case("space-sweep-dup-key", "yaml", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                         "s.yaml": "parameters: {seed: [0]}\nparameters: {seed: [1]}\n"},
         _sweep(None)),
    # ------------------------------------------------------------------ model config.json
    _model_case("hidden-zero", hidden_size=0),
    _model_case("heads-zero", num_attention_heads=0),
    _model_case("layers-zero", num_hidden_layers=0),
    _model_case("layers-negative", num_hidden_layers=-3),
    _model_case("vocab-negative", vocab_size=-1),
    _model_case("hidden-string", hidden_size="256"),
    _model_case("hidden-float", hidden_size=256.7),
    _model_case("heads-bool", num_attention_heads=True),
    _model_case("hidden-inf", hidden_size=1e400),
    _model_case("hidden-list", hidden_size=[256]),
    _model_case("vocab-missing", vocab_size="DELETE"),
    _model_case("layers-huge-moe", num_hidden_layers=10**9, num_experts=8, num_experts_per_tok=2,
                moe_intermediate_size=64),
    _model_case("layers-huge", num_hidden_layers=10**15),
    _model_case("hidden-huge", hidden_size=10**15, num_attention_heads=4, head_dim=64),
    _model_case("context-huge", max_position_embeddings=10**30),
    _model_case("experts-huge", num_experts=10**15, num_experts_per_tok=2, moe_intermediate_size=64),
    _model_case("per-token-above-experts", num_experts=4, num_experts_per_tok=9, moe_intermediate_size=64),
    _model_case("sparse-step-zero", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                decoder_sparse_step=0),
    _model_case("full-attention-interval-zero", full_attention_interval=0),
    _model_case("quantization-list", quantization_config=["fp8"]),
    _model_case("layer-types-string", layer_types="sliding_attention"),
    _model_case("mlp-only-layers-dict", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                mlp_only_layers={"a": 1}),
    _model_case("kv-heads-above-heads", num_key_value_heads=8),
    _model_case("text-config-list", text_config=[1], hidden_size="DELETE"),
    Case("model-top-list", "model", {"c.yaml": cfg_text(model="m.json"), "trace.jsonl": TRACE, "m.json": "[1]"},
         run_case()),
    Case("model-deep-json", "model", {"c.yaml": cfg_text(model="m.json"), "trace.jsonl": TRACE,
                                      "m.json": "[" * 100_000 + "]" * 100_000}, run_case()),
    # ------------------------------------------------------------------ resources
    Case("synthetic-requests-1e12", "resources", {"c.yaml": json.dumps(synthetic(num_requests=10**12))}, run_case()),
    Case("synthetic-input-1e12", "resources",
         {"c.yaml": json.dumps(synthetic(input_length=10**12))}, run_case()),
    Case("synthetic-output-1e12", "resources",
         {"c.yaml": json.dumps(synthetic(output_length=10**12))}, run_case()),
    Case("synthetic-output-1e12-long-context", "resources",
         {"c.yaml": json.dumps(synthetic(output_length=10**12) | {})}, run_case("{d}/c.yaml", "--set",
              "engine.workers.aggregated.scheduler.max_model_len=2000000000000")),
    Case("closed-loop-1e12", "resources",
         {"c.yaml": cfg_text(workload__client={"mode": "closed_loop", "concurrency": 10**12}), "trace.jsonl": TRACE},
         run_case(), "ok"),
    Case("trace-output-1e12", "resources", _trace_files(jsonl({"timestamp": 0, "input_length": 5,
                                                               "output_length": 10**12})), run_case()),
    Case("max-requests-1e12", "resources",
         {"c.yaml": json.dumps(synthetic(num_requests=10**12) | {}),},
         run_case("{d}/c.yaml", "--set", "workload.max_requests=1000000000000")),
    Case("hash-ids-1e6", "resources", _trace_files(jsonl({"timestamp": 0, "input_length": 5, "output_length": 2,
                                                          "hash_ids": list(range(10**6 + 1))})), run_case()),
    Case("fleet-count-1e6", "resources", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.count=1000000")),
    Case("tp-3-on-32-heads", "resources", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.tp=3")),
    Case("tp-1024", "resources", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.tp=1024")),
    Case("pinned-blocks-1e15", "resources", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.scheduler.num_gpu_blocks=1000000000000000")),
    Case("405b-on-one-h100", "resources", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "model=llama-3.1-405b")),
    # ------------------------------------------------------------------ outputs
    Case("out-dot-user-files", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "notes.txt": "mine",
                                           "summary.json": "my own"},
         ["run", "c.yaml", "-q", "--out", "."], check=_intact("summary.json", "my own")),
    Case("out-user-folder", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "out/thesis.tex": "mine"},
         run_case("{d}/c.yaml", "--out", "{d}/out"), check=_intact("out/thesis.tex", "mine")),
    Case("out-is-file", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "out": "a file"},
         run_case("{d}/c.yaml", "--out", "{d}/out"), check=_intact("out", "a file")),
    Case("out-stale-plot", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "out/.servesim-output": "",
                                       "out/summary.json": "{}", "out/old_plot.png": "x"},
         run_case("{d}/c.yaml", "--out", "{d}/out"), "ok", check=_only_new_outputs, keep={"out"}),
    Case("out-holds-trace", "outputs", {"c.yaml": cfg_text(trace="out/trace.jsonl"), "out/trace.jsonl": TRACE,
                                        "out/.servesim-output": ""},
         run_case("{d}/c.yaml", "--out", "{d}/out"), check=_intact("out/trace.jsonl", TRACE)),
    Case("out-holds-config", "outputs", {"out/c.yaml": cfg_text(trace="../trace.jsonl"), "trace.jsonl": TRACE,
                                         "out/.servesim-output": ""},
         run_case("{d}/out/c.yaml", "--out", "{d}/out"), check=_intact("out/c.yaml", cfg_text(trace="../trace.jsonl"))),
    Case("passes-over-config", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--passes", "{d}/c.yaml"), check=_intact("c.yaml", cfg_text())),
    Case("passes-over-trace", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--passes", "{d}/trace.jsonl"), check=_intact("trace.jsonl", TRACE)),
    Case("passes-over-cli-trace", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "t2.jsonl": TRACE},
         run_case("{d}/c.yaml", "--trace", "{d}/t2.jsonl", "--passes", "{d}/t2.jsonl"),
         check=_intact("t2.jsonl", TRACE)),
    Case("passes-over-summary", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--out", "{d}/out", "--passes", "{d}/out/summary.json"), check=_no_file("out")),
    Case("sweep-out-user-files", "outputs", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                             "s.yaml": json.dumps({"parameters": {"seed": [0]}}),
                                             "sweep/trials.csv": "mine"},
         _sweep(None), check=_intact("sweep/trials.csv", "mine")),
    # ------------------------------------------------------------------ cost and deploy
    Case("cost-unknown-gpu", "cost", {"c.yaml": cfg_text(cost={"gpu_price_per_hour": {"h1000": 2.0}}),
                                      "trace.jsonl": TRACE}, run_case()),
    Case("cost-price-missing", "cost", {"c.yaml": cfg_text(cost={"gpu_price_per_hour": {"b200": 2.0}}),
                                        "trace.jsonl": TRACE}, run_case()),
    Case("cost-price-string", "cost", {"c.yaml": cfg_text(cost={"gpu_price_per_hour": {"h100": "2"}}),
                                       "trace.jsonl": TRACE}, run_case()),
    Case("cost-power-inverted", "cost", {"c.yaml": cfg_text(cost={"gpu_power_w": {"h100": {"idle_w": 900,
                                                                                          "busy_w": 700}}}),
                                         "trace.jsonl": TRACE}, run_case()),
    Case("deploy-stack-unknown", "deploy", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["deploy", "{d}/c.yaml", "--out", "{d}/out", "--stack", "helm"], check=_no_file("out")),
    Case("deploy-trial-on-config", "deploy", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["deploy", "{d}/c.yaml", "--out", "{d}/out", "--trial", "1"], check=_no_file("out")),
    Case("deploy-folder-not-sweep", "deploy", {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "sw": DIR},
         ["deploy", "{d}/sw", "--out", "{d}/out", "--pareto"], check=_no_file("out")),
    Case("deploy-sweep-db-garbage", "deploy", {"sw/trials.sqlite": "not a database"},
         ["deploy", "{d}/sw", "--out", "{d}/out", "--trial", "0"], check=_no_file("out")),
    Case("deploy-vllm-partial-ep", "deploy",
         {"c.yaml": cfg_text(model="deepseek-r1", gpu="h200", engine__workers={"aggregated": {"tp": 8, "ep": 4}}),
          "trace.jsonl": TRACE},
         ["deploy", "{d}/c.yaml", "--out", "{d}/out"], check=_no_file("out")),
    # ------------------------------------------------------------------ routers
    Case("router-overlap-weight-twice", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.overlap_weight=1", "--set", "router.overlap_score_weight=2")),
    Case("router-llm-d-block-0", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.policy=llm_d", "--set", "router.llm_d.block_size=0")),
    Case("router-temperature-negative", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.router_temperature=-1")),
    Case("router-kv-events-unknown", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.kv_events=sometimes")),
    Case("router-kv-events-delay-negative", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.kv_events_delay_ms=-1")),
    Case("router-dynamo-1-2-with-weight", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.dynamo_version=1.2", "--set", "router.overlap_score_weight=2")),
    Case("router-credit-without-1-2", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.overlap_score_credit=0.5")),
    Case("router-ttl-zero", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.kv_events=none", "--set", "router.router_ttl_secs=0")),
    Case("router-credit-above-1", "router", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "router.dynamo_version=1.2", "--set", "router.overlap_score_credit=2")),
    Case("role-gpu-unknown", "hardware", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.gpu=h900")),
    Case("pd-kv-dtypes-differ", "hardware", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", 'engine.workers={"prefill": {"precision": "fp8"}, "decode": {}}')),
    # ------------------------------------------------------------------ servesim serve (refused before it listens)
    Case("serve-speed-zero", "serve", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["serve", "{d}/c.yaml", "--speed", "0", "--port", "0"]),
    Case("serve-speed-inf", "serve", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["serve", "{d}/c.yaml", "--speed", "inf", "--port", "0"]),
    Case("serve-expose-bogus", "serve", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["serve", "{d}/c.yaml", "--expose", "ports", "--port", "0"]),
    Case("serve-expose-port-0", "serve", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["serve", "{d}/c.yaml", "--expose", "workers", "--port", "0"]),
    Case("serve-tokenizer-missing", "serve", {"c.yaml": cfg_text(serve={"tokenizer": "nope.json"}),
                                              "trace.jsonl": TRACE}, ["serve", "{d}/c.yaml", "--port", "0"]),
    Case("serve-tokenizer-unreadable", "serve", {"c.yaml": cfg_text(serve={"tokenizer": "tok.json"}),
                                                 "tok.json": "{not json", "trace.jsonl": TRACE},
         ["serve", "{d}/c.yaml", "--port", "0"]),
    Case("serve-disaggregated", "serve", {"c.yaml": cfg_text(engine__workers={"prefill": {}, "decode": {}}),
                                          "trace.jsonl": TRACE}, ["serve", "{d}/c.yaml", "--port", "0"]),
    Case("serve-port-out-of-range", "serve", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["serve", "{d}/c.yaml", "--port", "70000"]),
    Case("serve-format-vllm-no-out", "serve", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         ["serve", "{d}/c.yaml", "--format", "vllm", "--port", "0"]),
    Case("serve-output-length-reversed", "serve", {"c.yaml": cfg_text(serve={"output_length": {"min": 9, "max": 2}}),
                                                   "trace.jsonl": TRACE}, ["serve", "{d}/c.yaml", "--port", "0"]),
]


# What each refusal must name: the real cause, not a later symptom (a missing trace, ...).
SAYS = {
    "router-overlap-weight-twice": "overlap_score_weight or its alias overlap_weight, not both",
    "router-llm-d-block-0": "router.llm_d.block_size", "router-temperature-negative": "router.router_temperature",
    "router-kv-events-unknown": "router.kv_events", "router-kv-events-delay-negative": "router.kv_events_delay_ms",
    "router-dynamo-1-2-with-weight": "set router.prefill_load_scale instead",
    "router-ttl-zero": "router.router_ttl_secs", "router-credit-without-1-2": "belongs to Dynamo 1.2's cost", "router-credit-above-1": "router.overlap_score_credit",
    "role-gpu-unknown": "engine.workers.aggregated.gpu: unknown GPU", "pd-kv-dtypes-differ": "fp8 and decode in bf16",
    "serve-speed-zero": "--speed must be a positive finite number", "serve-speed-inf": "got inf",
    "serve-expose-bogus": "--expose must be fleet or workers", "serve-expose-port-0": "give --port P, not 0", "serve-tokenizer-missing": "nope.json does not exist",
    "serve-tokenizer-unreadable": "is not a tokenizer.json", "serve-disaggregated": "aggregated fleets only",
    "serve-port-out-of-range": "--port must be between 0 and 65535", "serve-format-vllm-no-out":
    "--format vllm writes result.json", "serve-output-length-reversed": "min (9) is larger than max (2)",
    "epoch-ms-scaled": "time_scale 1e+09", "timestamp-1e300": "timestamp must be between 0 and",
    "timestamp-inf": "got inf", "timestamp-int-huge": "timestamp must be between", "input-length-huge":
    "input_length is", "output-length-huge": "output_length is", "vidur-arrived-huge": "arrived_at must be",
    "vidur-arrived-inf": "arrived_at must be", "azure-year-span": "TIMESTAMP", "pass-ms-huge": "pass_ms is 1e+300",
    "pass-ms-1e15": "pass_ms is 1e+15", "polynomial-huge": "per_prefill_token_ms", "tokenization-huge":
    "tokenization_ms", "poisson-rate-tiny": "rate 1e-300", "bench-rate-tiny": "request_rate 1e-300",
    "time-scale-huge": "time_scale 1e+300",
    "synthetic-length-1e30": "input_length is", "synthetic-range-1e30": "input_length is",
    "config-is-folder": "is a folder", "trace-is-folder": "is a folder", "trace-is-folder-inferred": "is a folder",
    "cli-trace-is-folder": "is a folder", "model-is-folder": "is a folder", "passes-is-folder": "is a folder",
    "lengths-from-folder": "is a folder", "space-is-folder": "is a folder", "config-latin1": "not UTF-8",
    "trace-latin1": "not UTF-8", "trace-latin1-inferred": "not UTF-8", "csv-latin1": "not UTF-8",
    "model-latin1": "not UTF-8", "space-latin1": "not UTF-8", "utf16-config": "not UTF-8",
    "csv-nul": "line 2", "csv-huge-field": "field larger than field limit", "jsonl-deep": "nested too deeply",
    "trace-empty": "holds no requests", "trace-missing": "does not exist",
    "config-unhashable-key": "keys must be plain", "config-unhashable-nested": "keys must be plain",
    "config-deep": "nested more than 64", "config-deep-mapping": "nested more than 64",
    "config-laughs": "expands to more than", "config-laughs-in-field": "expands to more than",
    "set-deep": "nested more than 64", "set-unhashable": "keys must be plain", "config-list": "must be a mapping",
    "config-tagged": "could not determine a constructor", "space-unhashable-key": "keys must be plain",
    "space-deep": "nested more than 64", "space-laughs": "expands to more than",
    "space-laughs-param": "expands to more than", "space-list": "must be a mapping",
    "space-huge-range": "1,000,000,000,001 values", "space-huge-grid": "combinations",
    "space-tiny-factor": "values; servesim's limit", "space-sweep-dup-key": "duplicate key",
    "model-hidden-zero": "hidden_size must be between 1", "model-heads-zero": "num_attention_heads must be",
    "model-layers-zero": "num_hidden_layers must be", "model-layers-negative": "got -3",
    "model-vocab-negative": "vocab_size must be", "model-hidden-string": "hidden_size must be an integer",
    "model-hidden-float": "hidden_size must be an integer", "model-heads-bool": "must be an integer, got True",
    "model-hidden-inf": "hidden_size must be an integer", "model-hidden-list": "hidden_size must be an integer",
    "model-vocab-missing": "lacks vocab_size", "model-layers-huge-moe": "num_hidden_layers must be",
    "model-layers-huge": "num_hidden_layers must be", "model-hidden-huge": "hidden_size must be",
    "model-context-huge": "max_position_embeddings must be", "model-experts-huge": "num_experts must be",
    "model-per-token-above-experts": "experts per token", "model-sparse-step-zero": "decoder_sparse_step",
    "model-full-attention-interval-zero": "full_attention_interval", "model-quantization-list":
    "quantization_config must be a mapping", "model-layer-types-string": "layer_types must be a list",
    "model-mlp-only-layers-dict": "mlp_only_layers must be a list", "model-kv-heads-above-heads":
    "num_key_value_heads must be", "model-text-config-list": "text_config must be a mapping",
    "model-top-list": "not a JSON object", "model-deep-json": "nested too deeply",
    "synthetic-requests-1e12": "10,000,000 requests", "synthetic-input-1e12": "input_length is",
    "synthetic-output-1e12": "output_length is", "synthetic-output-1e12-long-context": "output_length is",
    "trace-output-1e12": "output_length is", "max-requests-1e12": "10,000,000 requests",
    "hash-ids-1e6": "hash_ids lists", "fleet-count-1e6": "100,000", "tp-3-on-32-heads": "attention heads",
    "tp-1024": "attention heads", "pinned-blocks-1e15": "num_gpu_blocks", "405b-on-one-h100": "weights alone", "out-dot-user-files": "is the current folder",
    "out-user-folder": "servesim did not write", "out-is-file": "is not a folder",
    "out-holds-trace": "an input of this run", "out-holds-config": "an input of this run",
    "passes-over-config": "is an input of this run", "passes-over-trace": "is an input of this run",
    "passes-over-cli-trace": "is an input of this run", "passes-over-summary": "writes into --out",
    "sweep-out-user-files": "servesim did not write",
    "cost-unknown-gpu": "unknown GPU 'h1000'", "cost-price-missing": "no price for h100-sxm",
    "cost-price-string": "gpu_price_per_hour", "cost-power-inverted": "idle_w (900.0) is larger",
    "deploy-stack-unknown": "--stack must be one of", "deploy-trial-on-config": "give its folder",
    "deploy-folder-not-sweep": "neither a config file nor a sweep folder",
    "deploy-sweep-db-garbage": "not a servesim sweep database", "deploy-vllm-partial-ep": "is not tp × attention_dp",
}


# --------------------------------------------------------------------------- sessions (workload.sessions)


def sessions(**fields) -> dict:
    spec = {"num_sessions": 2, "turns": 3, "input_length": 20, "output_length": 3, **fields}
    return base_config(workload__trace=None, workload__format=None, workload__sessions=spec)


def _sessions_case(name: str, config: dict) -> Case:
    return Case(f"sessions-{name}", "sessions", {"c.yaml": json.dumps(config)}, run_case())


CASES += [
    _sessions_case("and-trace", dict(sessions(), workload=dict(sessions()["workload"], trace="t.jsonl"))),
    _sessions_case("closed-loop", sessions() | {"workload": dict(sessions()["workload"],
                                                                 client={"mode": "closed_loop", "concurrency": 2})}),
    _sessions_case("in-flight-poisson", sessions(in_flight=2) | {"workload": dict(
        sessions(in_flight=2)["workload"], client={"mode": "poisson", "rate": 2.0})}),
    _sessions_case("open-loop-time-scale", sessions() | {"workload": dict(
        sessions()["workload"], client={"mode": "open_loop", "time_scale": 0.5})}),
    _sessions_case("max-requests", sessions() | {"workload": dict(sessions()["workload"], max_requests=3)}),
    _sessions_case("think-unknown", sessions(think_time={"distribution": "gamma", "shape": 2})),
    _sessions_case("think-lognormal-no-sigma", sessions(think_time={"distribution": "lognormal", "median_s": 1.0})),
    _sessions_case("think-huge", sessions(think_time={"distribution": "exponential", "mean_s": 1e300})),
    _sessions_case("think-draw-huge", sessions(think_time={"distribution": "lognormal", "median_s": 1.0,
                                                           "sigma": 1000.0})),
    _sessions_case("turns-1e12", sessions(num_sessions=10**6, turns=10**6)),
    _sessions_case("context-1e9", sessions(turns=1000, input_length=10**6)),
    _sessions_case("turns-range-reversed", sessions(turns={"min": 5, "max": 2})),
    _sessions_case("unknown-key", sessions(turn=3)),
    _sessions_case("context-cap-below-question", sessions(max_context_tokens=10)),
    _sessions_case("warmup", sessions() | {"workload": dict(sessions()["workload"], warmup_requests=2)}),
    Case("sessions-trace-text-input", "sessions",
         _trace_files(jsonl({"session_id": "a", "timestamp": 0, "text_input": "hi", "output_length": 2}),
                      fmt="mooncake-sessions"), run_case()),
    Case("sessions-trace-later-timestamp", "sessions",
         _trace_files(jsonl({"session_id": "a", "timestamp": 9, "input_length": 5, "output_length": 2},
                            {"session_id": "a", "timestamp": 3, "input_length": 9, "output_length": 2}),
                      fmt="mooncake-sessions"), run_case()),
    Case("prefix-repetition-few-requests", "sessions", {"c.yaml": json.dumps(synthetic(
        input_length=None, num_requests=2, prefix_repetition={"num_prefixes": 5, "prefix_length": 8,
                                                               "suffix_length": 4}))}, run_case()),
    Case("agentic-missing-parent", "sessions",
         _trace_files(jsonl({"request_id": "a", "timestamp": 0, "input_length": 5, "output_length": 2},
                            {"request_id": "b", "wait_for": ["c"], "input_length": 9, "output_length": 2}),
                      fmt="agentic-mooncake"), run_case()),
    Case("weka-unknown-field", "sessions", _trace_files(json.dumps(
        {"id": "a", "models": [], "block_size": 16, "hash_id_scope": "local", "requests": [
            {"t": 0, "type": "n", "model": "m", "in": 5, "out": 2, "cost": 1}]}), "t.json", "weka-trace"),
         run_case()),
    Case("weka-block-size", "sessions", _trace_files(json.dumps(
        {"id": "a", "models": [], "block_size": 64, "hash_id_scope": "local", "requests": [
            {"t": 0, "type": "n", "model": "m", "in": 5, "out": 2}]}), "t.json", "weka-trace"), run_case()),
    Case("agentic-unknown-field", "sessions",
         _trace_files(jsonl({"request_id": "a", "timestamp": 0, "input_length": 5, "output_length": 2,
                             "policy_class": "x"}), fmt="agentic-mooncake"), run_case()),
    Case("pp-2-sglang", "resources", {"c.yaml": cfg_text(engine__backend="sglang", engine__workers={"aggregated": {}}), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.pp=2")),
    Case("pp-2-trtllm", "resources", {"c.yaml": cfg_text(engine__backend="trtllm", engine__workers={"aggregated": {}}), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.pp=2")),
    Case("pp-2-async-true", "resources", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.pp=2",
                  "--set", "engine.workers.aggregated.scheduler.async_scheduling=true")),
    Case("pp-16-one-node", "resources", {"c.yaml": cfg_text(), "trace.jsonl": TRACE},
         run_case("{d}/c.yaml", "--set", "engine.workers.aggregated.pp=16")),
    Case("autoscaling-max-below-min", "config", {"c.yaml": cfg_text(engine__workers__aggregated__autoscaling={
        "metric": "in_flight", "target": 2, "min_replicas": 3, "max_replicas": 2}), "trace.jsonl": TRACE}, run_case()),
    Case("autoscaling-count-outside", "config", {"c.yaml": cfg_text(engine__workers__aggregated__count=5,
         engine__workers__aggregated__autoscaling={"metric": "in_flight", "target": 2, "max_replicas": 4}),
         "trace.jsonl": TRACE}, run_case()),
    Case("autoscaling-decode-count-outside", "config", {"c.yaml": cfg_text(engine__workers={
        "prefill": {}, "decode": {"count": 5, "autoscaling": {"metric": "in_flight", "target": 2, "max_replicas": 4}}}),
        "trace.jsonl": TRACE}, run_case()),
    Case("autoscaling-unknown-metric", "config", {"c.yaml": cfg_text(engine__workers__aggregated__autoscaling={
        "metric": "gpu_util", "target": 2, "max_replicas": 2}), "trace.jsonl": TRACE}, run_case()),
    Case("autoscaling-target-0", "config", {"c.yaml": cfg_text(engine__workers__aggregated__autoscaling={
        "metric": "in_flight", "target": 0, "max_replicas": 2}), "trace.jsonl": TRACE}, run_case()),
    Case("planner-arima", "config", {"c.yaml": cfg_text(engine__workers__aggregated__autoscaling={
        "policy": "sla_planner", "load_predictor": "arima", "max_replicas": 2}), "trace.jsonl": TRACE}, run_case()),
    Case("planner-with-hpa-target", "config", {"c.yaml": cfg_text(engine__workers__aggregated__autoscaling={
        "policy": "sla_planner", "target": 2, "max_replicas": 2}), "trace.jsonl": TRACE}, run_case()),
    Case("planner-itl-0", "config", {"c.yaml": cfg_text(engine__workers__aggregated__autoscaling={
        "policy": "sla_planner", "itl_s": 0, "max_replicas": 2}), "trace.jsonl": TRACE}, run_case()),
]
SAYS.update({
    "pp-2-sglang": "Scheduler.event_loop_pp", "pp-2-trtllm": "PyExecutor._executor_loop_pp",
    "pp-2-async-true": "cannot be combined with pp 2", "pp-16-one-node": "set gpus_per_node: 16",
    "autoscaling-max-below-min": "max_replicas (2) must be at least min_replicas (3)",
    "autoscaling-count-outside": "count (5) is the replicas at start",
    "autoscaling-decode-count-outside": "engine.workers.decode.count (5) is the replicas at start",
    "autoscaling-unknown-metric": "metric", "autoscaling-target-0": "target",
    "planner-arima": "load_predictor", "planner-with-hpa-target": "target", "planner-itl-0": "itl_s",
})
SAYS.update({
    "sessions-and-trace": "exactly one of workload.trace, workload.synthetic and workload.sessions",
    "sessions-closed-loop": "counts requests, not sessions", "sessions-in-flight-poisson": "it is poisson",
    "sessions-open-loop-time-scale": "would change nothing",
    "sessions-max-requests": "workload.max_requests limits", "sessions-think-unknown": "'distribution' must be one of",
    "sessions-think-lognormal-no-sigma": "sigma is required", "sessions-think-huge": "think_time of 1e+300 s",
    "sessions-think-draw-huge": "think_time drew", "sessions-turns-1e12": "10,000,000 per run",
    "sessions-context-1e9": "a session's last prompt", "sessions-turns-range-reversed": "min (5) is larger",
    "sessions-unknown-key": "did you mean turns",
    "sessions-warmup": "so it is refused with workload.sessions",
    "sessions-context-cap-below-question": "max_context_tokens (10) must hold the system prompt and the longest",
    "sessions-trace-text-input": "line 1: unknown field 'text_input'",
    "sessions-trace-later-timestamp": "line 2: the timestamp of this turn of session 'a' is earlier",
    "agentic-missing-parent": "line 2: wait_for names 'c'",
    "weka-unknown-field": "requests[0]: unknown field 'cost' for a request", "weka-block-size":
    "set workload.trace_block_size to 64",
    "prefix-repetition-few-requests": "must be at least prefix_repetition.num_prefixes", "agentic-unknown-field": "line 1: unknown field",
})


# --------------------------------------------------------------------------- ShareGPT lengths (workload/sharegpt.py)


def _sharegpt_case(name: str, content, **fields) -> Case:
    config = synthetic(input_length=None, output_length=None, lengths_from="s.json", **fields)
    return Case(f"sharegpt-{name}", "sharegpt", {"c.yaml": json.dumps(config), "s.json": content}, run_case())


_SHAREGPT_OK = json.dumps([{"conversations": [{"from": "human", "value": "x" * 40},
                                              {"from": "gpt", "value": "y" * 40}]}])
CASES += [
    _sharegpt_case("object", json.dumps({"conversations": []}), lengths_format="sharegpt"),
    _sharegpt_case("truncated", "[{\"conversations\": [", lengths_format="sharegpt"),
    _sharegpt_case("entry-string", json.dumps(["hello"])),
    _sharegpt_case("value-number", json.dumps([{"conversations": [{"value": 3}, {"value": "y"}]}])),
    _sharegpt_case("nothing-kept", json.dumps([{"conversations": [{"value": "hi"}, {"value": "ok"}]}])),
    _sharegpt_case("tokenizer-missing", _SHAREGPT_OK, lengths_tokenizer="nope.json"),
    _sharegpt_case("tokenizer-garbage", _SHAREGPT_OK, lengths_tokenizer="s.json"),
    Case("sharegpt-tokenizer-alone", "sharegpt", {"c.yaml": json.dumps(synthetic(lengths_tokenizer="t.json"))},
         run_case()),
]
SAYS.update({
    "sharegpt-object": "not a ShareGPT file: it holds a JSON dict", "sharegpt-truncated": "is not a ShareGPT JSON file",
    "sharegpt-entry-string": "entry 0 is not a JSON object", "sharegpt-value-number": "entry 0: message 0 needs",
    "sharegpt-nothing-kept": "holds no conversation vLLM's ShareGPT filters keep",
    "sharegpt-tokenizer-missing": "lengths_tokenizer: ", "sharegpt-tokenizer-garbage": "is not a tokenizer.json",
    "sharegpt-tokenizer-alone": "lengths_tokenizer counts the text of a ShareGPT lengths_from file",
})


# --------------------------------------------------------------------------- the Python API


API_CASES = {
    "seed-string": {"seed": "1"},
    "seed-bool": {"seed": True},
    "seed-float": {"seed": 1.5},
    "seed-negative": {"seed": -1},
    "overrides-short-pair": {"overrides": [("a",)]},
    "overrides-string": {"overrides": "seed=1"},
    "overrides-key-int": {"overrides": [(1, 2)]},
    "overrides-empty-key": {"overrides": [("", 1)]},
    "overrides-not-mapping": {"overrides": [("seed.x", 1)]},
    "config-int": {"config": 42},
    "config-bytes": {"config": b"seed: 1"},
    "config-missing-file": {"config": "/nonexistent/c.yaml"},
    "trace-int": {"trace": 42},
    "pass-log-string": {"pass_log": "passes.jsonl"},
    "progress-not-callable": {"progress": 5},
}


# --------------------------------------------------------------------------- running a case


def materialize(case: Case, folder: Path) -> None:
    for rel, content in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is DIR:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def judge(case: Case, folder: Path, before: dict, rc: int | None, stderr: str) -> tuple[str, str]:
    """('clean' | 'traceback' | 'hang' | 'wrong', detail)."""
    if rc is None:
        return "hang", f"no answer within {TIME_LIMIT_S} s"
    if "Traceback" in stderr or rc not in (0, 2):
        return "traceback", stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {rc}"
    problem = case.check(folder) if case.check else None
    if case.expect == "error":
        lines = stderr.strip().splitlines()
        if rc != 2:
            return "wrong", "exit 0 for bad input"
        if len(lines) != 1 or not lines[0].startswith("error: "):
            return "wrong", f"stderr is not one error line: {stderr!r}"
        after = snapshot(folder)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed:
            return "wrong", f"wrote {changed}"
    elif rc != 0:
        return "wrong", stderr.strip()
    if problem:
        return "wrong", problem
    return "clean", ""


def expand(args: list[str], folder: Path) -> list[str]:
    return [a.replace("{d}", str(folder)) for a in args]


class _Timeout(Exception):
    pass


def run_in_process(args: list[str], cwd: Path, capsys) -> tuple[int | None, str]:
    """The CLI's `main()` in this process, with a SIGALRM time bound."""
    from servesim import cli

    def on_alarm(signum, frame):
        raise _Timeout

    old_cwd, old_argv = os.getcwd(), sys.argv
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    rc: int | None = 0
    try:
        os.chdir(cwd)
        sys.argv = ["servesim", *args]
        capsys.readouterr()
        try:
            cli.main()
        except SystemExit as exit_:
            rc = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except _Timeout:
            rc = None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        os.chdir(old_cwd)
        sys.argv = old_argv
    return rc, capsys.readouterr().err


# --------------------------------------------------------------------------- measuring in subprocesses


def measure(cases: list[Case]) -> dict[str, list[str]]:
    import tempfile

    verdicts: dict[str, list[str]] = {"clean": [], "traceback": [], "hang": [], "wrong": []}
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            materialize(case, folder)
            before = snapshot(folder)
            try:
                proc = subprocess.run([sys.executable, "-m", "servesim", *expand(case.args, folder)], cwd=folder,
                                      capture_output=True, text=True, timeout=TIME_LIMIT_S)
                rc, stderr = proc.returncode, proc.stderr
            except subprocess.TimeoutExpired:
                rc, stderr = None, ""
            verdict, detail = judge(case, folder, before, rc, stderr)
        verdicts[verdict].append(case.id)
        print(f"{verdict:9} {case.category:9} {case.id}: {detail}"[:220], flush=True)
    return verdicts


def measure_api() -> dict[str, list[str]]:
    import tempfile

    verdicts: dict[str, list[str]] = {"clean": [], "traceback": [], "hang": [], "wrong": []}
    for name, kwargs in API_CASES.items():
        code = ("import json, sys, servesim\nfrom servesim.errors import ServesimError\n"
                f"from tests.support.bad_input_corpus import base_config, API_CASES\n"
                f"kw = {{'config': base_config(), **API_CASES[{name!r}]}}\n"
                "try:\n    servesim.simulate(**kw)\nexcept ServesimError as e:\n"
                "    print('error:', e, file=sys.stderr); sys.exit(2)\n")
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "trace.jsonl").write_text(TRACE)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (os.environ.get("PYTHONPATH"), str(Path(__file__).resolve().parents[2])) if p)}
            try:
                proc = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                                      timeout=TIME_LIMIT_S, env=env)
                rc, err = proc.returncode, proc.stderr
            except subprocess.TimeoutExpired:
                rc, err = None, ""
        if rc is None:
            verdict = "hang"
        elif "Traceback" in err or rc not in (0, 2):
            verdict = "traceback"
        elif rc == 0 or "--set" in err:
            verdict = "wrong"
        else:
            verdict = "clean"
        verdicts[verdict].append(f"api-{name}")
        print(f"{verdict:9} api       {name}: {err.strip().splitlines()[-1] if err.strip() else ''}"[:220],
              flush=True)
    return verdicts


if __name__ == "__main__":
    chosen = [c for c in CASES if len(sys.argv) < 2 or any(a in c.id for a in sys.argv[1:])]
    totals = measure(chosen)
    for verdict, ids in measure_api().items():
        totals[verdict] += ids
    print({k: len(v) for k, v in totals.items()})
