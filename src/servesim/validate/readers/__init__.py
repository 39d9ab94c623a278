"""Result files of the benchmark tools users already run, each read into `MeasuredRun`s.

One module per tool (docs/modeling/result_files.md names the upstream file and version each
follows). `read_results(path)` recognises the tool from the file's own keys, not its name, so
a file of another tool is named as what it is; servesim's own summary.json is recognised and
pointed at the result.json that `--format vllm` writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from servesim.errors import ServesimError
from servesim.validate.measured import MeasuredRun, check_run, fill_missing_stats
from servesim.validate.readers import aiperf, genai_perf, guidellm, sglang, vllm


def _load_json_lines(path: Path, text: str) -> list:
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                raise ServesimError(f"{path} line {number} is not JSON (a result file is JSON or JSON "
                                    "lines)") from None
    return lines


def _parse(path: Path) -> tuple[object, list | None]:
    """(the whole file as JSON, or None; its JSON lines when it is not one document)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ServesimError(f"result file {path} does not exist") from None
    except IsADirectoryError:
        raise ServesimError(f"result file {path} is a folder, not a file") from None
    except UnicodeDecodeError:
        raise ServesimError(f"result file {path} is not UTF-8 text") from None
    except OSError as err:
        raise ServesimError(f"cannot read result file {path}: {err.strerror or err}") from None
    if not text.strip():
        raise ServesimError(f"result file {path} is empty")
    try:
        return json.loads(text), None
    except json.JSONDecodeError:
        pass
    if path.suffix == ".csv" or text.lstrip()[:1] not in ("{", "["):
        raise ServesimError(f"{path} is not JSON: servesim validate reads the JSON result files of vllm bench "
                            "serve, SGLang bench_serving, aiperf, genai-perf and guidellm")
    return None, _load_json_lines(path, text)


# (kind, recogniser) in the order they are tried; each kind's reader is in _READERS / _LINE_READERS.
_KINDS = (("vllm bench serve", vllm.looks_like), ("SGLang bench_serving", sglang.looks_like),
          ("aiperf", aiperf.looks_like), ("aiperf records", aiperf.looks_like_record),
          ("genai-perf", genai_perf.looks_like), ("genai-perf records", genai_perf.looks_like_records),
          ("guidellm", guidellm.looks_like))


def tool_of(data: object) -> str | None:
    """Which tool wrote this parsed document (or first JSON line), by its keys."""
    for name, check in _KINDS:
        if check(data):
            return name
    return None


def _genai_perf_records(document: dict, path: Path) -> list[MeasuredRun]:
    summary = path.with_name(genai_perf.SUMMARY_NAME)
    if not summary.is_file():
        raise ServesimError(f"{path} is genai-perf's per-request profile_export.json, which holds no "
                            f"token counts; give its {genai_perf.SUMMARY_NAME} (read with it)")
    return _read(summary)


_READERS = {
    "vllm bench serve": lambda d, p: [vllm.read(d, p)],
    "SGLang bench_serving": lambda d, p: [sglang.read(d, p, p.name)],
    "aiperf": lambda d, p: [aiperf.read(d, p)],
    "aiperf records": lambda d, p: [aiperf.read_records_file(p)],   # a one-line profile_export.jsonl
    "genai-perf": lambda d, p: [genai_perf.read(d, p)],
    "genai-perf records": _genai_perf_records,
    "guidellm": guidellm.read_all,
}
# JSON-lines files: each line one run.
_LINE_READERS = {"vllm bench serve": vllm.read, "SGLang bench_serving": sglang.read}


def _unknown(path: Path, data: object) -> ServesimError:
    if isinstance(data, dict) and "servesim_version" in data:
        return ServesimError(f"{path} is servesim's own summary.json, not a benchmark result; validate a "
                             "tool's result file (servesim run --format vllm writes one as result.json)")
    return ServesimError(f"{path} is not a result file servesim reads: expected vllm bench serve "
                         "--save-result JSON, SGLang bench_serving JSONL, aiperf profile_export_aiperf.json or "
                         "profile_export.jsonl, genai-perf profile_export_genai_perf.json or guidellm JSON")


def read_results(path: Path) -> list[MeasuredRun]:
    """The runs (comparison rows) in one result file, their fields checked."""
    path = Path(path)
    try:
        runs = _read(path)
        for run in runs:
            check_run(run)
            fill_missing_stats(run)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, ArithmeticError) as err:
        # What the readers' own checks did not name: a field of a shape no tool writes.
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ServesimError(f"{path}: a field holds a value of a type or shape its tool never writes "
                            f"({detail})") from None
    return runs


def _read(path: Path) -> list[MeasuredRun]:
    document, lines = _parse(path)
    if document is not None:
        kind = tool_of(document)
        if kind is None:
            raise _unknown(path, document)
        return _READERS[kind](document, path)
    kind = tool_of(lines[0])
    if kind == "aiperf records":
        return [aiperf.read_records_file(path)]
    if kind not in _LINE_READERS:
        raise _unknown(path, lines[0])
    runs = []
    for index, line in enumerate(lines):
        if tool_of(line) != kind:
            raise ServesimError(f"{path} line {index + 1} is not a {kind} result like line 1")
        runs.append(_LINE_READERS[kind](line, path, f"{path.name}#{index + 1}"))
    return runs
