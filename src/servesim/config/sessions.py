"""`workload.sessions`: multi-turn chat sessions, the third workload source (workload/sessions.py).

Defined apart from schema.py so the session keys live in one place; schema.py resolves
the `Length` they share with `workload.synthetic` (`SessionsConfig.model_rebuild`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import Field, model_serializer, model_validator

from servesim.schema_base import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, StrictModel

if TYPE_CHECKING:
    from servesim.config.schema import Length


class FixedThinkTime(StrictModel):
    distribution: Literal["fixed"]
    seconds: NonNegativeFloat = 0.0


class ExponentialThinkTime(StrictModel):
    distribution: Literal["exponential"]
    mean_s: PositiveFloat


class LognormalThinkTime(StrictModel):
    """exp(N(ln median_s, sigma²)) seconds: median `median_s`, `sigma` the spread of ln(seconds)."""

    distribution: Literal["lognormal"]
    median_s: PositiveFloat
    sigma: NonNegativeFloat


ThinkTime = Annotated[Union[FixedThinkTime, ExponentialThinkTime, LognormalThinkTime],
                      Field(discriminator="distribution")]


class SessionsConfig(StrictModel):
    """Synthetic chat sessions: each turn's prompt is the session so far plus new user input."""

    num_sessions: PositiveInt
    turns: Length                       # turns per session: a number or {min, max}
    input_length: Length                # new user tokens of each turn
    output_length: Length               # tokens asked of each turn's response
    # The first turn's own tokens (a system prompt and first question); default input_length.
    first_input_length: Length | None = None
    # Between a response's last token reaching the user and the next turn being sent.
    think_time: ThinkTime = Field(default_factory=lambda: FixedThinkTime(distribution="fixed"))
    # Sessions open at once: a new one starts when one ends (instead of the client's arrivals).
    in_flight: PositiveInt | None = None
    seed: NonNegativeInt | None = None
    # The same first tokens in every session's first prompt (a shared system prompt), before
    # its first_input_length tokens; the prefix cache shares them across sessions.
    system_prompt_length: NonNegativeInt = 0
    # A session meets it when every turn is served and its last token reaches the user
    # within this many ms of its first turn's arrival.
    slo_ms: PositiveFloat | None = None
    # A chat front-end's window (workload/context_cap.py): a turn whose prompt would exceed
    # it is sent with the oldest turns dropped until it fits; the system prompt stays.
    max_context_tokens: PositiveInt | None = None

    @model_validator(mode="after")
    def _cap_fits_a_question(self) -> SessionsConfig:
        if self.max_context_tokens is None:
            return self
        largest = max(_largest(self.input_length), _largest(self.first_input_length or self.input_length))
        if self.system_prompt_length + largest > self.max_context_tokens:
            raise ValueError(f"max_context_tokens ({self.max_context_tokens}) must hold the system prompt and "
                             f"the longest question ({self.system_prompt_length} + {largest} tokens): the "
                             "front-end drops old turns, never the new question")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_cap(self, handler):
        # Written only when given: session configs without it dump (and hash) as before.
        data = handler(self)
        if self.max_context_tokens is None and isinstance(data, dict):
            data.pop("max_context_tokens", None)
        return data


def _largest(length) -> int:
    return length if isinstance(length, int) else length.max


class PrefixRepetition(StrictModel):
    """vLLM 0.32's `prefix_repetition` dataset (benchmarks/datasets/datasets.py,
    PrefixRepetitionRandomDataset): num_prefixes prefixes, each before the suffixes of
    num_requests // num_prefixes prompts, the prompts shuffled."""

    num_prefixes: PositiveInt
    prefix_length: PositiveInt
    suffix_length: PositiveInt


def check_prefix_repetition(synthetic) -> None:
    """The keys prefix_repetition takes the place of; a ValueError (schema.py reports it)."""
    repetition = synthetic.prefix_repetition
    if repetition is None:
        return
    if synthetic.input_length is not None or synthetic.lengths_from is not None or synthetic.prefix_length:
        raise ValueError("prefix_repetition gives the prompt (prefix_length + suffix_length tokens); leave "
                         "input_length, lengths_from and prefix_length unset")
    if synthetic.output_length is None:
        raise ValueError("prefix_repetition needs output_length")
    if synthetic.num_requests < repetition.num_prefixes:
        raise ValueError(f"num_requests ({synthetic.num_requests}) must be at least prefix_repetition."
                         f"num_prefixes ({repetition.num_prefixes}), as vLLM requires")


def check_sessions_client(sessions: SessionsConfig, client, max_requests: int | None = None,
                          warmup_requests: int = 0) -> None:
    """The clients sessions arrive by; a ValueError (schema.py reports it) for the others."""
    if max_requests is not None:
        raise ValueError("workload.max_requests limits a trace or synthetic workload; a sessions workload "
                         "sends workload.sessions.num_sessions sessions")
    if warmup_requests:
        # Request ids number turns as they are made: an open loop makes every first turn
        # before any later one, so the first N ids would be the cold turns, not a warm-up.
        raise ValueError("workload.warmup_requests leaves out the first N request ids, which a sessions "
                         "workload gives its turns in the order they are made (every open-loop first turn "
                         "first), so it is refused with workload.sessions; leave it 0")
    mode = client.mode
    if mode == "closed_loop":
        raise ValueError("workload.client closed_loop counts requests, not sessions; for a fixed number of "
                         "sessions at once set workload.sessions.in_flight")
    if sessions.in_flight is not None and (mode != "open_loop" or client.time_scale != 1.0):
        raise ValueError("workload.sessions.in_flight starts each session when another ends; it replaces the "
                         f"client's arrivals, so leave workload.client unset (it is {mode})")
    if mode == "open_loop" and client.time_scale != 1.0 and sessions.in_flight is None:
        # A scale on arrival times that are all 0 would be accepted and change nothing.
        raise ValueError(f"workload.client.time_scale ({client.time_scale:g}) scales a trace's arrival times; "
                         "generated sessions under open_loop all open at time 0, so it would change nothing: "
                         "leave it 1, or give the sessions a rate (client poisson) and their pace with "
                         "workload.sessions.think_time")
