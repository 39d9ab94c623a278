"""Writes aiperf/profile_export_aiperf.json and aiperf/profile_export.jsonl with aiperf's own models.

    python -m venv /tmp/aiperf && /tmp/aiperf/bin/pip install aiperf==0.13.0
    /tmp/aiperf/bin/python tests/data/results/make_aiperf_fixtures.py

Not part of the test suite (aiperf is not a servesim dependency). The figures are
make_fixtures.py's four requests; the files are serialised as aiperf 0.13.0 writes them:
the summary is a `JsonExportData` (its `input_config` a validated `BenchmarkConfig`) dumped as
exporters/metrics_json_exporter.py does (model_dump mode json, exclude_unset, exclude_none,
indented), each record a `MetricRecordInfo` dumped as common/mixins/buffered_jsonl_writer_mixin.py
does (exclude_none). Running the whole tool needs a live endpoint, so the metric values are
ours, not measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
from aiperf.common.models.export_models import JsonExportData
from aiperf.common.models.record_models import MetricRecordInfo
from aiperf.config.config import BenchmarkConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_fixtures as fx  # noqa: E402


def main() -> None:
    config = BenchmarkConfig.model_validate({
        "models": "meta-llama/Llama-3.1-8B-Instruct", "endpoint": {"urls": ["http://localhost:8000"]},
        "datasets": [{"name": "default", "type": "synthetic", "entries": 4, "prompts": {"isl": 200, "osl": 3}}],
        "phases": [{"name": "profiling", "type": "concurrency", "concurrency": 2, "requests": 4}]})
    summary = fx.aiperf_summary()
    summary.pop("input_config")
    export = JsonExportData.model_validate({**summary, "input_config": config})
    payload = export.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    (HERE / "aiperf").mkdir(exist_ok=True)
    (HERE / "aiperf" / "profile_export_aiperf.json").write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    lines = [orjson.dumps(MetricRecordInfo.model_validate(row).model_dump(exclude_none=True, mode="json"))
             for row in fx.aiperf_records()]
    (HERE / "aiperf" / "profile_export.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    json.loads((HERE / "aiperf" / "profile_export_aiperf.json").read_text())   # readable back


if __name__ == "__main__":
    main()
