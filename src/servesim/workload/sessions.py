"""Multi-turn chat sessions (`workload.sessions`): turns sent one after another.

A session is one growing token stream. Turn k's prompt is the stream so far (every
earlier prompt and response) plus U_k new user tokens, and its response continues the
stream: with P_k its prompt and O_k the tokens it produced,

    P_0 = U_0,    P_{k+1} = P_k + O_k + U_{k+1}.

Content (workload/prompt.py): the stream is one chain of hash_ids, `trace_block_size`
tokens each, the first unique to the session. With a `system_prompt_length` S, every
session's stream starts with the same S tokens: the chain's blocks are then S tokens long
(`content_block_size`), its first (hash id 0) shared by every session, the rest its own. A turn's hash_ids cover its prompt *and*
its requested output (`TraceRequest.content_length`), so the engine keys the blocks its
response fills with the same content keys the next turn's prompt has: the next turn can
hit the cache on what the model just said. No two sessions share a token.

Timing: turn k+1 reaches the frontend when turn k's last token reaches the user (the
completion the simulation reports, after the output path) plus a think time. A rejected
turn ends its session. Sessions start by the workload's client (open loop: all at time 0;
poisson or bench: sessions as its arrivals, later turns through its semaphore if it has
one) or, with `in_flight` N, N at time 0 and a new one whenever one ends.

Draws: the number of turns of every session from the "sessions.turns" stream up front;
a session's lengths and think times from the "sessions" stream when it starts (sessions
start in index order), so the same seed gives the same sessions whatever the timing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from servesim.config.schema import BenchClient, ClientConfig, ClosedLoopClient, LengthRange
from servesim.config.sessions import ExponentialThinkTime, FixedThinkTime, SessionsConfig
from servesim.errors import ServesimError
from servesim.limits import MAX_THINK_S
from servesim.seeds import rng_for
from servesim.workload.clients import Client, GatedSchedule, make_client
from servesim.workload.trace import NS_PER_S, TraceRequest


@dataclass(slots=True)
class _Live:
    """A session between turns: what its next turn needs."""

    session: int
    turn: int                 # the turn in flight (0-based)
    prompt: int               # its prompt length
    inputs: list[int]         # new user tokens of every turn
    outputs: list[int]        # tokens asked of every turn
    thinks_ns: list[int]      # think time before turns 1, 2, ...
    head: int                 # the first hash id of its stream's own blocks (workload/context_cap.py)
    kept: list[int] | None = None   # with max_context_tokens: the turns in the context, oldest first


class SessionLog:
    """Which session and turn every request is, by request id; each session's planned turns."""

    def __init__(self, planned_turns: list[int]) -> None:
        self.planned_turns = planned_turns
        self.session_of: list[int] = []
        self.turn_of: list[int] = []
        self.started = 0          # sessions started
        self.truncated: int | None = None   # turns whose context was cut (with max_context_tokens)


def _draw(length: int | LengthRange, count: int, rng: np.random.Generator | None) -> list[int]:
    if isinstance(length, int):
        return [length] * count
    return rng.integers(length.min, length.max, size=count, endpoint=True).tolist()


def _is_fixed(cfg: SessionsConfig) -> bool:
    lengths = (cfg.input_length, cfg.output_length, cfg.first_input_length)
    return all(v is None or isinstance(v, int) for v in lengths) and isinstance(cfg.think_time, FixedThinkTime)


class SessionSource:
    """Makes every turn's `TraceRequest`, numbering requests in the order they are made."""

    def __init__(self, cfg: SessionsConfig, root_seed: int, content_block_size: int) -> None:
        self.cfg = cfg
        seed = root_seed if cfg.seed is None else cfg.seed
        turns_rng = None if isinstance(cfg.turns, int) else rng_for(seed, "sessions.turns")
        self.log = SessionLog(_draw(cfg.turns, cfg.num_sessions, turns_rng))
        self._rng = None if _is_fixed(cfg) else rng_for(seed, "sessions")
        self._block = content_block_size
        self._live: dict[int, _Live] = {}
        self._cap = None
        if cfg.max_context_tokens is not None:
            from servesim.workload.context_cap import ContextCap

            self._cap = ContextCap(cfg.max_context_tokens, cfg.system_prompt_length, cfg.num_sessions)
            self.log.truncated = 0

    @property
    def total_turns(self) -> int:
        return sum(self.log.planned_turns)

    def has_more(self) -> bool:
        return self.log.started < self.cfg.num_sessions

    def first_turns(self) -> Iterator[TraceRequest]:
        while self.has_more():
            yield self.start_session()

    def start_session(self) -> TraceRequest:
        cfg, rng, log = self.cfg, self._rng, self.log
        session = log.started
        log.started += 1
        turns = log.planned_turns[session]
        first = [cfg.system_prompt_length + n for n in _draw(cfg.first_input_length or cfg.input_length, 1, rng)]
        inputs = first + _draw(cfg.input_length, turns - 1, rng)
        outputs = _draw(cfg.output_length, turns, rng)
        head = session + 1 if cfg.system_prompt_length else session
        live = _Live(session, 0, inputs[0], inputs, outputs, self._think_times(turns - 1), head)
        return self._turn(live)

    def _think_times(self, count: int) -> list[int]:
        think = self.cfg.think_time
        if isinstance(think, FixedThinkTime):
            return [round(think.seconds * NS_PER_S)] * count
        if isinstance(think, ExponentialThinkTime):
            seconds = self._rng.exponential(think.mean_s, size=count)
        else:
            seconds = self._rng.lognormal(math.log(think.median_s), think.sigma, size=count)
        drawn = seconds.tolist()
        if drawn and max(drawn) > MAX_THINK_S:
            raise ServesimError(f"workload.sessions.think_time drew {max(drawn):.3g} s, past servesim's limit of "
                                f"{MAX_THINK_S:,.0f} s (a week); narrow the distribution (sigma)")
        return [round(s * NS_PER_S) for s in drawn]

    def _turn(self, live: _Live) -> TraceRequest:
        log = self.log
        request_id = len(log.session_of)
        log.session_of.append(live.session)
        log.turn_of.append(live.turn)
        self._live[request_id] = live
        output = live.outputs[live.turn]
        content = live.prompt + output
        blocks = -(-content // self._block)
        if self.cfg.system_prompt_length:   # block 0 is the shared system prompt (hash id 0)
            hash_ids = (0, live.head, *range(2, blocks))
        else:
            hash_ids = (live.head, *range(1, blocks))
        return TraceRequest(request_id=request_id, arrival_ns=None, input_length=live.prompt,
                            output_length=output, hash_ids=hash_ids,
                            session_id=str(live.session), content_length=content)

    def next_turn(self, request_id: int, outputs: int, rejected: bool, now: int) -> tuple[int, TraceRequest] | None:
        """The turn after request `request_id` (it produced `outputs` tokens, the last reaching the
        user at `now`), or None: its session ends."""
        live = self._live.pop(request_id, None)
        if live is None or rejected or live.turn + 1 >= len(live.inputs):
            return None
        think = live.thinks_ns[live.turn]
        live.turn += 1
        if self._cap is None:
            live.prompt = live.prompt + outputs + live.inputs[live.turn]
        elif self._cap.next_prompt(live, outputs):
            self.log.truncated += 1
        return now + think, self._turn(live)


class SessionClient(Client):
    """Sessions' first turns by an inner client (or `in_flight` at a time); later turns on completions."""

    def __init__(self, source: SessionSource, inner: Client | None, in_flight: int | None) -> None:
        self.source = source
        self._inner = inner
        self._in_flight = in_flight
        admit = getattr(inner, "admit", None)
        if admit is not None:   # the simulation looks the hook up: set only when there is one
            self.admit = admit

    @property
    def session_log(self) -> SessionLog:
        return self.source.log

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        if self._inner is not None:
            return self._inner.initial()
        source = self.source
        first = [source.start_session() for _ in range(min(self._in_flight, source.cfg.num_sessions))]
        return iter([(0, turn) for turn in first])

    def on_complete(self, time_ns: int) -> TraceRequest | None:
        return None if self._inner is None else self._inner.on_complete(time_ns)

    def follow_ups(self, request_id: int, outputs: int, rejected: bool,
                   time_ns: int) -> list[tuple[int, TraceRequest]]:
        source = self.source
        nxt = source.next_turn(request_id, outputs, rejected, time_ns)
        if nxt is not None:
            return [nxt]
        if self._inner is None and source.has_more():   # in_flight: the next session takes its place
            return [(time_ns, source.start_session())]
        return []


def first_turn_client(client: ClientConfig, first_turns, root_seed: int, total: int) -> Client:
    """The client that sends sessions' first turns (later turns go through its `admit` too)."""
    if isinstance(client, ClosedLoopClient):
        raise ServesimError("workload.client closed_loop counts requests, not sessions; a session workload "
                            "arrives by open_loop, poisson or bench")
    if isinstance(client, BenchClient) and client.request_rate == "inf" and client.ramp_up_strategy is None \
            and client.max_concurrency is not None:
        # Every session due at once behind the semaphore; later turns queue for it too, so it
        # keeps counting requests (a closed loop of first turns would let sessions pile up).
        return GatedSchedule(((0, turn) for turn in first_turns), client.max_concurrency)
    return make_client(client, first_turns, root_seed, total=total)


def session_client(cfg: SessionsConfig, client: ClientConfig, root_seed: int,
                   content_block_size: int) -> SessionClient:
    source = SessionSource(cfg, root_seed, content_block_size)
    if cfg.in_flight is not None:
        return SessionClient(source, None, cfg.in_flight)
    return SessionClient(source, first_turn_client(client, source.first_turns(), root_seed, cfg.num_sessions), None)
