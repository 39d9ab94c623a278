"""`kv_aware`: worker selection after NVIDIA Dynamo's KV router (docs/modeling/routing.md).

The router prices each worker from two sources a real Dynamo router has: the blocks the
worker's prefix cache holds, as its KV events announce them (`cached_prefix_blocks`), and
its own bookkeeping of the sequences it sent there and has not seen finish (`WorkerSequences`).

    cost = overlap_score_weight × prefill tokens / block size + decode blocks

where the prefill tokens are those of the requests it sent there whose first token has not
come back, plus this prompt's tokens past the worker's cached prefix, and the decode blocks
are the distinct full prompt blocks of the sequences it has there, this one included. The
lowest cost wins (ties to the lowest index); with a temperature above 0 a worker is drawn
from a softmax over the costs, from the router's seeded stream.
"""

from __future__ import annotations

import math

from servesim.cluster.kv_events import PredictedPrefixes, PublishedPrefixes

# Costs closer than this count as a tie (Dynamo compares floating-point logits so).
TIE_EPSILON = 1e-5


class Sequence:
    """One request as the router tracks it on the worker it sent it to."""

    __slots__ = ("shared", "shared_count", "unique", "prefill_tokens", "request")

    def __init__(self, shared: tuple[tuple[int, int], ...], unique: int, prefill_tokens: int,
                 shared_count: int | None = None) -> None:
        # Its shareable full prompt blocks as runs: (prefix id, blocks of that id's run it
        # holds). Every prompt reaching a prefix id cuts the same run of blocks from it, so
        # two sequences share exactly the head of a run the shorter one holds.
        self.shared = shared
        self.shared_count = sum(length for _, length in shared) if shared_count is None else shared_count
        self.unique = unique                  # its other full prompt blocks (no one else's)
        self.prefill_tokens = prefill_tokens  # prompt tokens past the worker's cached prefix
        self.request = None                   # the engine request, once sent


class WorkerSequences:
    """The sequences a router sent one worker and has not seen finish."""

    def __init__(self) -> None:
        # Per prefix id: how many sequences hold each head length of its run, and the longest
        # (the distinct blocks of that run the worker's sequences hold).
        self.heads: dict[int, dict[int, int]] = {}
        self.longest: dict[int, int] = {}
        self.shared_blocks = 0                  # Σ longest
        self.unique_blocks = 0
        self.prefill_tokens = 0                 # of the sequences whose first token is not back
        self.prefilling: list[Sequence] = []
        self.by_request: dict[int, Sequence] = {}

    def active_blocks(self) -> int:
        return self.shared_blocks + self.unique_blocks

    def new_blocks(self, seq: Sequence) -> int:
        """Its full blocks no tracked sequence holds. A run's blocks name the whole prompt up to
        their end, so once a run is not wholly held, no later one is held at all."""
        longest = self.longest
        held = 0
        for node, length in seq.shared:
            run_held = longest.get(node, 0)
            if run_held < length:
                held += run_held
                break
            held += length
        return seq.unique + seq.shared_count - held

    def settle(self, now: int) -> None:
        """Mark prefill complete for the sequences whose first token is out by `now`."""
        done = [seq for seq in self.prefilling
                if seq.request.first_token_ns is not None and seq.request.first_token_ns <= now]
        if done:
            self.prefill_tokens -= sum(seq.prefill_tokens for seq in done)
            gone = {id(seq) for seq in done}
            self.prefilling = [seq for seq in self.prefilling if id(seq) not in gone]

    def add(self, seq: Sequence, request) -> None:
        seq.request = request
        self.by_request[id(request)] = seq
        heads, longest = self.heads, self.longest
        for node, length in seq.shared:
            counts = heads.setdefault(node, {})
            counts[length] = counts.get(length, 0) + 1
            top = longest.get(node, 0)
            if length > top:
                longest[node] = length
                self.shared_blocks += length - top
        self.unique_blocks += seq.unique
        self.prefill_tokens += seq.prefill_tokens
        self.prefilling.append(seq)

    def remove(self, request) -> None:
        seq = self.by_request.pop(id(request), None)
        if seq is None:
            return
        heads, longest = self.heads, self.longest
        for node, length in seq.shared:
            counts = heads[node]
            left = counts[length] - 1
            if left:
                counts[length] = left
                continue
            del counts[length]
            if length == longest[node]:
                top = max(counts) if counts else 0
                self.shared_blocks -= length - top
                if counts:
                    longest[node] = top
                else:
                    del longest[node], heads[node]
        self.unique_blocks -= seq.unique
        if seq in self.prefilling:
            self.prefilling.remove(seq)
            self.prefill_tokens -= seq.prefill_tokens


def shared_runs(keys) -> tuple[tuple[int, int], ...]:
    """A prompt's shareable full blocks as (prefix id, blocks) runs (none without prefix caching)."""
    if keys is None:
        return ()
    return tuple((node, stop - first) for node, first, stop, _ in keys.chunk_spans())


class KvAwareSelector:
    """Dynamo's DefaultWorkerSelector over the router's bookkeeping of `workers`."""

    def __init__(self, workers: list, overlap_score_weight: float, temperature: float, rng_source,
                 events_delay_ns: int | None = None, credit: "OverlapCredit | None" = None,
                 predicted_ttl_ns: int | None = None) -> None:
        self.workers = workers
        self.weight = overlap_score_weight
        self.temperature = temperature
        # Dynamo 1.2's cost (overlap_score_credit, prefill_load_scale, its decay) and its
        # random tie-break; None: the 0.7 cost above, ties to the lowest index.
        self.credit = credit
        self.sequences = [WorkerSequences() for _ in workers]
        # The router's index of each worker's cache, fed by its KV events after each pass
        # (cluster/kv_events.py); None: the router reads the caches at the instant of routing.
        self.events_delay_ns = events_delay_ns
        self.indexes: dict[int, PublishedPrefixes | PredictedPrefixes] | None = None
        self.predicted_ttl_ns = predicted_ttl_ns
        if predicted_ttl_ns is not None:   # no KV events: the router predicts from what it sent
            self.indexes = {id(w): PredictedPrefixes(w, predicted_ttl_ns) for w in workers}
        elif events_delay_ns is not None:
            self.indexes = {id(w): PublishedPrefixes(w, events_delay_ns) for w in workers}
        self._now = 0   # the instant of the last choice
        self._rng_source = rng_source   # () -> numpy Generator, made on first use
        self._rng = None
        self._chosen: Sequence | None = None

    def costs(self, input_length: int, keys_for, now: int,
              candidates: list[int] | None = None) -> tuple[list[float], list[Sequence]]:
        costs, seqs = [], []
        shared_of: dict = {}   # the prompt's shareable runs, once per keys object
        indexes = self.indexes
        credit = self.credit
        for tracked in self.sequences:
            tracked.settle(now)
        least_prefill = 0
        if credit is not None and credit.decay > 0.0:
            pool = range(len(self.sequences)) if candidates is None else candidates
            least_prefill = min(self.sequences[i].prefill_tokens for i in pool)
        for worker, tracked in zip(self.workers, self.sequences):
            kv = worker.scheduler.kv
            size = kv.block_size
            keys = keys_for(worker) if keys_for is not None else None
            if keys is None:
                overlap = 0
            elif indexes is None:
                overlap = kv.cached_prefix_blocks(keys)
            else:
                overlap = indexes[id(worker)].cached_prefix_blocks(keys, now)
            shared = shared_of.get(id(keys))
            if shared is None:
                shared = shared_of[id(keys)] = shared_runs(keys)
            shared_count = 0 if keys is None else keys.shared_blocks
            seq = Sequence(shared, input_length // size - shared_count, max(input_length - overlap * size, 0),
                           shared_count)
            decode_blocks = tracked.active_blocks() + tracked.new_blocks(seq)
            if credit is None:
                prefill_blocks = (tracked.prefill_tokens + seq.prefill_tokens) / size
                costs.append(self.weight * prefill_blocks + decode_blocks)
            else:
                costs.append(credit.prefill_cost(tracked.prefill_tokens, input_length, overlap, size,
                                                 least_prefill) + decode_blocks)
            seqs.append(seq)
        return costs, seqs

    def choose(self, input_length: int, keys_for, now: int, candidates: list[int] | None = None) -> int:
        """The worker for the request; `candidates`: the indices it may go to (None: all)."""
        costs, seqs = self.costs(input_length, keys_for, now, candidates)
        self._now = now
        if candidates is None:
            index = self._pick(costs)
        else:
            index = candidates[self._pick([costs[i] for i in candidates])]
        self._chosen = seqs[index]
        return index

    def add_worker(self) -> None:
        self.sequences.append(WorkerSequences())
        if self.indexes is not None:
            worker = self.workers[-1]
            self.indexes[id(worker)] = (PublishedPrefixes(worker, self.events_delay_ns)
                                        if self.predicted_ttl_ns is None
                                        else PredictedPrefixes(worker, self.predicted_ttl_ns))

    def on_pass_done(self, worker, done) -> None:
        """The worker's pass ended: it publishes its KV events to the router's index."""
        index = self.indexes.get(id(worker))
        if index is not None:
            index.publish(done, done.end_ns)

    def _pick(self, costs: list[float]) -> int:
        if self.temperature != 0.0:
            return softmax_pick(costs, self.temperature, self._draw())
        if self.credit is not None:
            return self._lowest_drawing_ties(costs)
        low = min(costs)
        return next(i for i, c in enumerate(costs) if abs(c - low) < TIE_EPSILON)

    def _lowest_drawing_ties(self, costs: list[float]) -> int:
        """Dynamo 1.2's minimum_cost_index: the lowest cost; among equal ones each later one
        replaces the pick with probability 1 / (ties so far), so every tied worker is equally
        likely (a draw from the router's seeded stream at each tie)."""
        best, best_cost, ties = 0, math.inf, 0
        for i, cost in enumerate(costs):
            if cost < best_cost:
                best, best_cost, ties = i, cost, 1
            elif cost == best_cost:
                ties += 1
                if self._draw_index(ties) == 0:
                    best = i
        return best

    def _draw_index(self, count: int) -> int:
        if self._rng is None:
            self._rng = self._rng_source()
        return int(self._rng.integers(count))

    def _draw(self) -> float:
        if self._rng is None:
            self._rng = self._rng_source()
        return float(self._rng.random())

    def sent(self, index: int, request) -> None:
        if self._chosen is not None:
            self.sequences[index].add(self._chosen, request)
            self._chosen = None
        if self.predicted_ttl_ns is not None:
            self.indexes[id(self.workers[index])].routed(request.keys, self._now)

    def returned(self, index: int, request) -> None:
        self.sequences[index].remove(request)


class OverlapCredit:
    """Dynamo 1.2's prefill term (`DefaultWorkerScorer::worker_logit`):

        prefill_load_scale × max(raw prefill blocks − credit × decay × overlap blocks, 0)

    raw prefill blocks: the prefill tokens queued on the worker plus this whole prompt, over
    the block size; decay: 1 / (1 + overlap_score_credit_decay × the worker's queued prefill
    above the least-loaded candidate's, in blocks, over this prompt's blocks), 1 when the
    decay is 0 (the default). With the defaults (credit 1, scale 1, decay 0) this is the 0.7
    router's cost at overlap_score_weight 1."""

    __slots__ = ("credit", "scale", "decay")

    def __init__(self, credit: float, scale: float, decay: float) -> None:
        self.credit = credit
        self.scale = scale
        self.decay = decay

    def prefill_cost(self, queued_tokens: int, input_length: int, overlap: int, size: int,
                     least_queued: int) -> float:
        raw_blocks = (queued_tokens + input_length) / size
        credit = self.credit
        if self.decay > 0.0:
            excess_blocks = (queued_tokens - least_queued) / size
            request_blocks = -(-input_length // size)
            credit /= 1.0 + self.decay * excess_blocks / request_blocks
        return self.scale * max(raw_blocks - credit * overlap, 0.0)


def softmax_pick(costs: list[float], temperature: float, draw: float) -> int:
    """The worker a uniform `draw` in [0, 1) picks from Dynamo's softmax over costs: each
    cost divided by the costs' range and negated (lower is better), over the temperature."""
    low, high = min(costs), max(costs)
    if low == high:
        weights = [1.0] * len(costs)
    else:
        scaled = [-c / (high - low) / temperature for c in costs]
        top = max(scaled)
        weights = [math.exp(s - top) for s in scaled]
    total = sum(weights)
    cumulative = 0.0
    for i, w in enumerate(weights):
        cumulative += w / total
        if draw <= cumulative:
            return i
    return len(costs) - 1
