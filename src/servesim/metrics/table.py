"""The summary table printed after a run, laid out like `vllm bench serve`'s report."""

from __future__ import annotations

from servesim.config import SimulationConfig
from servesim.metrics.jobs import job_rows
from servesim.metrics.sessions import session_rows
from servesim.metrics.summary import DEFAULT_PERCENTILES, percentile_word


def _num(value, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def summary_rows(summary: dict, config: SimulationConfig) -> list[tuple[str, str] | str]:
    """Rows of (label, value); a bare string starts a section."""
    slo = config.slo
    slo_text = ", ".join(
        f"{name} <= {value:g} ms"
        for name, value in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E", slo.e2e_ms))
        if value is not None
    ) or "none"
    rows: list[tuple[str, str] | str] = [
        "Serving Benchmark Result (simulated)",
        ("Successful requests", _num(summary["completed"])),
        ("Failed requests", _num(summary["failed_requests"])),
        *([("Warm-up requests (left out)", _num(summary["warmup_requests"]))]
          if summary.get("warmup_requests") else []),
        ("Benchmark duration (s)", _num(summary["duration_ms"] / 1e3)),
        ("Total input tokens", _num(summary["total_input_tokens"])),
        ("Total generated tokens", _num(summary["total_output_tokens"])),
        ("Request throughput (req/s)", _num(summary["request_throughput_req_s"])),
        ("Request goodput (req/s)", _num(summary["request_goodput_req_s"])),
        ("Output token throughput (tok/s)", _num(summary["output_throughput_tok_s"])),
        *([("Peak output token throughput (tok/s)", _num(summary["max_output_tokens_per_s"])),
           ("Peak concurrent requests", _num(summary["max_concurrent_requests"]))]
          if "max_output_tokens_per_s" in summary else []),
        ("Total token throughput (tok/s)", _num(summary["total_token_throughput_tok_s"])),
        ("Prefix cache hit rate (%)", _num(None if summary["prefix_cache_hit_rate"] is None
                                           else 100 * summary["prefix_cache_hit_rate"])),
        *([("Host cache hit rate (%)", _num(None if summary.get("host_cache_hit_rate") is None
                                             else 100 * summary["host_cache_hit_rate"]))]
          if any(role.kv_offload is not None for role in config.engine.roles().values()) else []),
        ("Preemptions", _num(summary["preemptions"])),
    ]
    if summary.get("mean_acceptance_length") is not None:
        rows.append(("Mean acceptance length (tok)", _num(summary["mean_acceptance_length"])))
    for title, key in (("Time to First Token", "ttft"), ("Time per Output Token (excl. 1st token)", "tpot"),
                       ("Inter-token Latency", "itl"), ("End-to-end Latency", "e2e")):
        short = key.upper() if key != "e2e" else "E2E"
        rows.append(title)
        rows.append((f"Mean {short} (ms)", _num(summary[f"mean_{key}_ms"])))
        rows.append((f"Median {short} (ms)", _num(summary[f"median_{key}_ms"])))
        for q in summary.get("percentiles", DEFAULT_PERCENTILES):
            if q != 50:   # the median row shows it
                word = percentile_word(q)
                rows.append((f"P{word} {short} (ms)", _num(summary.get(f"p{word}_{key}_ms"))))
    rows.extend(session_rows(summary))   # metrics/sessions.py: nothing without sessions
    rows.extend(job_rows(summary))       # metrics/jobs.py: nothing without an agentic trace
    rows.append("Goodput and simulator")
    rows.append(("SLOs", slo_text))
    rows.append(("Good requests", _num(summary["good_requests"])))
    rows.append(("Goodput output throughput (tok/s)", _num(summary["goodput_output_throughput_tok_s"])))
    rows.append(("GPUs", _num(summary["gpus"])))
    rows.append(("GPU-hours", _num(summary["gpu_hours"], 3)))
    if "cost_usd" in summary:   # with cost.gpu_price_per_hour only, to keep the default table vLLM's
        rows.append(("Cost ($)", _num(summary["cost_usd"], 3)))
        rows.append(("Cost per M output tokens ($)", _num(summary["cost_per_mtok_output_usd"], 3)))
        rows.append(("Energy per output token (J)", _num(summary["energy_per_output_token_j"], 3)))
    rows.append(("Simulator wall time (s)", _num(summary["wall_time_ms"] / 1e3, 3)))
    return rows


def format_summary(summary: dict, config: SimulationConfig) -> list[str]:
    """Plain lines, 50 columns wide, as `vllm bench serve` prints its result."""
    lines = []
    for row in summary_rows(summary, config):
        if isinstance(row, str):
            fill = "=" if not lines else "-"
            lines.append(f"{' ' + row + ' ':{fill}^50}")
        else:
            label, value = row
            lines.append(f"{label + ':':<40} {value:<10}")
    lines.append("=" * 50)
    return lines


def print_summary(summary: dict, config: SimulationConfig, stderr: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape

    fleet = " + ".join(f"{role.count}x {name} (tp={role.tp}{f', pp={role.pp}' if role.pp > 1 else ''}"
                       f"{role_hardware(role)})"
                       for name, role in config.engine.roles().items())
    console = Console(highlight=False, stderr=stderr)
    console.print(f"{config.model} on {config.gpu}: {fleet}, {config.engine.backend}, "
                  f"{config.engine.timing.kind} timing", style="dim")
    for line in format_summary(summary, config):
        style = "bold cyan" if line.startswith(("=", "-")) else None
        console.print(escape(line), style=style, soft_wrap=True)


def role_hardware(role) -> str:
    """", b200, fp8" for a role on its own GPU or precision; "" for one on the top-level ones."""
    return "".join(f", {value}" for value in (role.gpu, role.precision) if value is not None)
