"""What servesim can simulate at all: bounds checked up front, each error naming its limit.

Simulated time is integer nanoseconds held in 64-bit integers (numpy arrays, the
records table), which overflow past 2**63 ns ≈ 292 years. servesim keeps every time it
is given to at most `MAX_TIME_NS` (2**62 ns ≈ 146 years, leaving room for a run's own
passes after the last arrival) and every configured duration to at most an hour per
pass, so no sum of them wraps around. Request counts and lengths are bounded so a run
finishes in minutes and fits in memory: see docs/config.md, "Limits".
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any

from servesim.errors import ServesimError

MAX_TIME_NS = 2**62                # any arrival time, after time_scale (~146 years)
MAX_TIME_MS = MAX_TIME_NS / 1e6
MAX_PASS_MS = 3_600_000.0          # one hour: any fixed duration of one pass, transfer or tokenization
MAX_PER_TOKEN_MS = 1_000.0         # per-token (or per-request) costs of the polynomial timing
MAX_REQUESTS = 10_000_000          # requests in one run (a trace, or synthetic num_requests)
MAX_REQUEST_TOKENS = 100_000_000   # input or output tokens of one request (10× the longest context)
MAX_THINK_S = 604_800.0           # one think time of a session (a week)
MAX_HASH_IDS = 1_000_000           # prefix blocks listed by one trace request
# Input plus output tokens of the whole workload: the default's 2.4 million take 0.2 s, so
# ten billion take tens of minutes; more would take hours.
MAX_TOTAL_TOKENS = 10_000_000_000


def check_time_ms(value: float, what: str, unit: str = "ms") -> None:
    """A time (in ms, or in s with unit="s") that must be finite, non-negative and fit in int64 nanoseconds."""
    top = MAX_TIME_MS if unit == "ms" else MAX_TIME_MS / 1e3
    if (isinstance(value, float) and not math.isfinite(value)) or not 0 <= value <= top:
        raise ServesimError(f"{what} must be between 0 and {top:.4g} {unit} (2**62 ns, about 146 years, "
                            f"the most servesim's integer-nanosecond clock holds), got {value!r}")


def check_tokens(value: int, what: str) -> None:
    if value > MAX_REQUEST_TOKENS:
        raise ServesimError(f"{what} is {value:,} tokens; servesim's limit is {MAX_REQUEST_TOKENS:,} tokens "
                            "per request")


def check_request_count(count: int, what: str) -> None:
    if count > MAX_REQUESTS:
        raise ServesimError(f"{what} is {count:,}; servesim simulates at most {MAX_REQUESTS:,} requests per run "
                            "(use workload.max_requests for a prefix)")


_PASS_FIELDS = ("pass_ms", "base_ms", "pass_overhead_ms")
_PER_UNIT_FIELDS = ("per_prefill_token_ms", "per_decode_token_ms", "per_context_token_ms", "per_request_ms")
_MICROSECOND_FIELDS = ("comm_latency_us", "per_layer_overhead_us", "eager_moe_layer_us")


def check_config(cfg: Any, source: str) -> None:
    """Bounds on a validated SimulationConfig's times, rates and request counts."""
    timing = cfg.engine.timing
    for name in _PASS_FIELDS:
        value = getattr(timing, name, None)
        if value is not None and value > MAX_PASS_MS:
            raise ServesimError(f"{source}: engine.timing.{name} is {value:g} ms; servesim's limit is "
                                f"{MAX_PASS_MS:,.0f} ms (one hour) per pass")
    for name in _MICROSECOND_FIELDS:
        value = getattr(timing, name, None)
        if value is not None and value > MAX_PASS_MS * 1e3:
            raise ServesimError(f"{source}: engine.timing.{name} is {value:g} µs; servesim's limit is "
                                f"{MAX_PASS_MS * 1e3:,.0f} µs (one hour)")
    for name in _PER_UNIT_FIELDS:
        value = getattr(timing, name, None)
        if value is not None and value > MAX_PER_TOKEN_MS:
            raise ServesimError(f"{source}: engine.timing.{name} is {value:g} ms; servesim's limit is "
                                f"{MAX_PER_TOKEN_MS:,.0f} ms per token or request")
    path = cfg.engine.request_path
    for where, value in (("engine.tokenization_ms", cfg.engine.tokenization_ms),
                         ("engine.kv_transfer.latency_ms", cfg.engine.kv_transfer.latency_ms),
                         *((f"engine.request_path.{name}", getattr(path, name))
                           for name in ("http_ms", "to_engine_ms", "broadcast_ms", "output_ms"))):
        if value is not None and value > MAX_PASS_MS:
            raise ServesimError(f"{source}: {where} is {value:g} ms; servesim's limit is {MAX_PASS_MS:,.0f} ms "
                                "(one hour)")
    per_token = path.tokenizer_us_per_token
    if per_token is not None and per_token > MAX_PER_TOKEN_MS * 1e3:
        raise ServesimError(f"{source}: engine.request_path.tokenizer_us_per_token is {per_token:g} µs; "
                            f"servesim's limit is {MAX_PER_TOKEN_MS * 1e3:,.0f} µs per token")
    workload = cfg.workload
    synthetic = workload.synthetic
    if synthetic is not None:
        count = min(synthetic.num_requests, workload.max_requests or synthetic.num_requests)
        check_request_count(count, f"{source}: workload.synthetic.num_requests")
        prefix = synthetic.prefix_length   # every prompt is the shared prefix plus its own input_length
        repetition = synthetic.prefix_repetition
        if repetition is not None:   # every prompt is one of the prefixes plus a suffix
            prefix = repetition.prefix_length + repetition.suffix_length
        check_tokens(prefix, f"{source}: workload.synthetic.prefix_length")
        mean_tokens = float(prefix)
        for name in ("input_length", "output_length"):
            length = getattr(synthetic, name)
            if length is not None:
                longest = length if isinstance(length, int) else length.max
                check_tokens(longest + (prefix if name == "input_length" else 0),
                             f"{source}: workload.synthetic.{name}")
                mean_tokens += length if isinstance(length, int) else (length.min + length.max) / 2
        check_total_tokens(count * mean_tokens, f"{source}: workload.synthetic")
    if workload.sessions is not None:
        check_sessions(workload.sessions, f"{source}: workload.sessions")


def _longest(length: Any) -> int:
    return length if isinstance(length, int) else length.max


def _mean(length: Any) -> float:
    return length if isinstance(length, int) else (length.min + length.max) / 2


def check_sessions(sessions: Any, where: str) -> None:
    """Turns, one turn's prompt at its longest (the whole session before it), and the tokens
    of every prompt and output (turn k's prompt holds the k turns before it: quadratic)."""
    turns = _longest(sessions.turns)
    if sessions.num_sessions * turns > MAX_REQUESTS:
        raise ServesimError(f"{where}: {sessions.num_sessions:,} sessions of up to {turns:,} turns are up to "
                            f"{sessions.num_sessions * turns:,} requests; servesim simulates at most "
                            f"{MAX_REQUESTS:,} per run")
    think = sessions.think_time
    typical = {"fixed": "seconds", "exponential": "mean_s", "lognormal": "median_s"}[think.distribution]
    typical = getattr(think, typical)
    if typical > MAX_THINK_S:
        raise ServesimError(f"{where}: think_time of {typical:g} s is past servesim's limit of "
                            f"{MAX_THINK_S:,.0f} s (a week)")
    first = sessions.first_input_length or sessions.input_length
    per_turn = _longest(sessions.input_length) + _longest(sessions.output_length)
    longest = sessions.system_prompt_length + _longest(first) + (turns - 1) * per_turn
    check_tokens(longest, f"{where}: a session's last prompt")
    block = sessions.system_prompt_length
    if block and (longest + _longest(sessions.output_length)) // block > MAX_HASH_IDS:
        raise ServesimError(f"{where}: a session holds up to {longest:,} tokens, more than {MAX_HASH_IDS:,} "
                            f"content blocks of system_prompt_length {block:,} tokens; lengthen the system "
                            "prompt or shorten the sessions")
    mean_turns = _mean(sessions.turns)
    mean_turn = _mean(sessions.input_length) + _mean(sessions.output_length)
    check_total_tokens(sessions.num_sessions * mean_turns * (mean_turns + 1) / 2 * mean_turn, where)


def check_total_tokens(total: float, what: str) -> None:
    if total > MAX_TOTAL_TOKENS:
        raise ServesimError(f"{what} holds about {total:,.0f} input and output tokens; servesim simulates at most "
                            f"{MAX_TOTAL_TOKENS:,} per run (hours of simulation otherwise)")


def check_arrivals(requests: list, cfg: Any, source: str) -> None:
    """Arrival times after the client's scaling, and the span a Poisson client would take."""
    client = cfg.workload.client
    mode = getattr(client, "mode", None)
    if mode == "open_loop" and requests:
        latest = max((r.arrival_ns or 0) for r in requests)
        if latest * client.time_scale > MAX_TIME_NS:
            raise ServesimError(f"{source}: the trace's last arrival ({latest / 1e6:.6g} ms) times "
                                f"workload.client.time_scale {client.time_scale:g} is past {MAX_TIME_MS:.4g} ms "
                                "(2**62 ns), the most servesim's clock holds; are the timestamps absolute "
                                "epoch times, or is time_scale too large?")


def check_poisson(count: int, cfg: Any, source: str) -> None:
    """A Poisson (or `bench`) client's expected span (count / rate), with a wide margin, fits the clock."""
    client = cfg.workload.client
    mode = getattr(client, "mode", None)
    name = {"poisson": "rate", "bench": "request_rate"}.get(mode)
    rate = getattr(client, name, None) if name else None
    if isinstance(rate, (int, float)) and count > 1:   # a bench client's "inf" sends everything at once
        span_ns = 4 * count / rate * 1e9
        if span_ns > MAX_TIME_NS:
            raise ServesimError(f"{source}: workload.client.{name} {rate:g} requests/s spreads {count:,} "
                                f"requests over about {count / rate:.3g} s, past what servesim's "
                                "integer-nanosecond clock holds (2**62 ns, about 146 years)")


def check_requests(requests: Any, cfg: Any, source: str) -> None:
    """A loaded workload: how many requests (a trace's are listed), their arrival times, a Poisson span."""
    if isinstance(requests, list):
        if len(requests) > MAX_REQUESTS:   # read one past the limit (run.py), so "more than"
            raise ServesimError(f"{source}: the trace holds more than {MAX_REQUESTS:,} requests, servesim's limit "
                                "per run; set workload.max_requests to replay its first ones")
        check_arrivals(requests, cfg, source)
        check_total_tokens(sum(r.input_length + r.output_length for r in requests), f"{source}: the trace")
        count = len(requests)
    elif cfg.workload.sessions is not None:
        count = cfg.workload.sessions.num_sessions   # the client's arrivals are sessions
    else:
        count = min(cfg.workload.synthetic.num_requests, cfg.workload.max_requests or MAX_REQUESTS)
    check_poisson(count, cfg, source)


@contextmanager
def clock_overflow_is_an_error():
    """The last line of defence: a time or count that still outgrows 64 bits is an error, not a traceback."""
    try:
        yield
    except OverflowError:
        raise ServesimError("the simulation's times or counts outgrew 64-bit integers (past 2**63 ns, about "
                            "292 years of simulated time); shorten the workload or the pass times") from None
