"""`workload.sessions`: multi-turn chat sessions, the third workload source (workload/sessions.py).

Defined apart from schema.py so the session keys live in one place; schema.py resolves
the `Length` they share with `workload.synthetic` (`SessionsConfig.model_rebuild`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import Field

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


def check_sessions_client(sessions: SessionsConfig, client, max_requests: int | None = None) -> None:
    """The clients sessions arrive by; a ValueError (schema.py reports it) for the others."""
    if max_requests is not None:
        raise ValueError("workload.max_requests limits a trace or synthetic workload; a sessions workload "
                         "sends workload.sessions.num_sessions sessions")
    mode = client.mode
    if mode == "closed_loop":
        raise ValueError("workload.client closed_loop counts requests, not sessions; for a fixed number of "
                         "sessions at once set workload.sessions.in_flight")
    if sessions.in_flight is not None and (mode != "open_loop" or client.time_scale != 1.0):
        raise ValueError("workload.sessions.in_flight starts each session when another ends; it replaces the "
                         f"client's arrivals, so leave workload.client unset (it is {mode})")
