"""Bad inputs of `servesim validate` (and calibrate), judged as tests/test_bad_inputs.py judges the corpus."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.bad_input_corpus import TRACE, Case, cfg_text

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"
VLLM = json.loads((RESULTS / "vllm_summary.json").read_text())


def _without(*keys: str) -> str:
    return json.dumps({k: v for k, v in VLLM.items() if k not in keys})


def _validate(result: str = "{d}/r.json", *extra: str) -> list[str]:
    return ["validate", result, "--config", "{d}/c.yaml", "-q", *extra]


def _files(result: object) -> dict:
    return {"c.yaml": cfg_text(), "trace.jsonl": TRACE, "r.json": result}


VALIDATE_CASES = [
    Case("validate-no-completed", "validate", _files(_without("completed")), _validate()),
    Case("validate-no-num-prompts", "validate", _files(_without("num_prompts")), _validate()),
    Case("validate-servesim-summary", "validate", _files(json.dumps({"servesim_version": "0", "completed": 1})),
         _validate()),
    Case("validate-csv", "validate", _files("a,b\n1,2\n"), _validate()),
    Case("validate-missing-file", "validate", _files("{}"), _validate("{d}/nope.json")),
    Case("validate-folder", "validate", _files("{}"), _validate("{d}")),
    Case("validate-bad-fail-above", "validate", _files(json.dumps(VLLM)), _validate("{d}/r.json", "--fail-above",
                                                                                    "-5")),
    Case("validate-out-holds-result", "validate", {"c.yaml": cfg_text(), "trace.jsonl": TRACE,
                                                   "out/r.json": json.dumps(VLLM), "out/.servesim-output": ""},
         _validate("{d}/out/r.json", "--out", "{d}/out")),
    Case("validate-string-count", "validate", _files(json.dumps({**VLLM, "completed": "3"})), _validate()),
    Case("calibrate-unconstrained", "calibrate", {**_files(json.dumps(VLLM)),
                                                  "c.yaml": cfg_text(engine__timing={"kind": "roofline"})},
         ["calibrate", "{d}/r.json", "--config", "{d}/c.yaml", "--out", "{d}/p.yaml", "--params", "gemm_efficiency"]),
    Case("calibrate-fixed-timing", "calibrate", _files(json.dumps(VLLM)),
         ["calibrate", "{d}/r.json", "--config", "{d}/c.yaml", "--out", "{d}/p.yaml"]),
    Case("calibrate-out-is-result", "calibrate", {**_files(json.dumps(VLLM)), "r.yaml": json.dumps(VLLM)},
         ["calibrate", "{d}/r.yaml", "--config", "{d}/c.yaml", "--out", "{d}/r.yaml"]),
    Case("profile-file-and-profile", "calibrate",
         {"c.yaml": cfg_text(engine__timing={"kind": "roofline", "profile": "h100-sxm/vllm",
                                             "profile_file": "p.yaml"}), "trace.jsonl": TRACE},
         ["run", "{d}/c.yaml", "-q"]),
]

VALIDATE_SAYS = {
    "validate-no-completed": "has no 'completed'", "validate-no-num-prompts": "has no 'num_prompts'",
    "validate-servesim-summary": "servesim's own summary.json", "validate-csv": "is not JSON",
    "validate-missing-file": "nope.json does not exist", "validate-folder": "is a folder",
    "validate-bad-fail-above": "--fail-above must be", "validate-out-holds-result": "r.json",
    "validate-string-count": "completed must be a number",
    "calibrate-unconstrained": "cannot constrain gemm_efficiency", "calibrate-fixed-timing":
    "calibrate fits the roofline step-time model", "calibrate-out-is-result": "is one of the result files",
    "profile-file-and-profile": "give profile (a shipped fit) or profile_file",
}
