"""Runs of identical decode passes for the per-request schedulers (SGLang, TensorRT-LLM).

vLLM's fast engine holds decoding requests as aggregates (engine/vllm/decode_group.py).
SGLang and TensorRT-LLM keep their per-request schedulers, whose passes cost
O(batch); what this module saves is the passes themselves. When a scheduled pass
only decodes, one token for every running request, and nothing can change until
the first of them receives its last token, the passes that follow are the same
pass again: the worker lets the scheduled pass stand for the whole run, a `PassRun`
(engine/passes.py; engine/worker.py `_fast_forward`), as it does for vLLM's group. A run costs O(batch) once, not per
pass.

What "nothing can change" means, pass by pass, in the reference scheduler:

- no admission: nothing waiting, or the waiting head stopped by a rule whose
  outcome the run's passes cannot change (the backend says which, `_admission_quiet`;
  SGLang settles its next call's prefill try there, so its runs may start at a pass that
  retracted: `_runs_past_preemption`, engine/sglang/retract_runs.py);
- no request mid-prompt, no received KV to admit (or no request slot for it), no
  handoff waiting for this decode worker's blocks (its admission rules can change as
  the batch decodes);
- every running request decodes one token, no drafts: each of its gaps in the run
  is one pass, but the first when its previous token came before the run started
  (SGLang's prefill passes do not decode the running requests), which the run
  keeps for its `token_gaps` (`PassRun.late_previous_ns`);
- enough free blocks for every pass of the run (and, with overlap, for the pass
  committed behind it), so nothing is retracted or paused. Blocks leave the free
  queue in the same order whether taken per pass or for the run at once, and the
  run's blocks are unkeyed, so which request holds which cannot be observed;
- the run ends with the pass that gives the first request its last token, and
  before any outside event can reach the worker (the worker's horizon).

Counters then advance in closed form. With overlap the pass after the run is
committed as the run starts, one pass earlier than the engine would, so the run
leaves every counter as the engine has it at that commit: outputs of all but the
run's last pass processed. `tests/test_fast_engine.py` holds these schedulers to
the reference (the same schedulers without runs) on random workloads.
"""

from __future__ import annotations

from itertools import repeat

from servesim.engine.passes import PassRun, SchedulerOutput


class DecodeRuns:
    """Mixin over a `SchedulerCore` policy: the worker's fast-forward interface."""

    fast_forwards = True   # engine/events.py's FastForward
    warmup_below = 0
    _last_decided: SchedulerOutput | None = None   # a run starts only from the pass scheduled last
    # One-token pages, none spare, no context limit in the run: its pages for s tokens each are
    # _run_deficit + n·s (set by quiet_steps; None: count them request by request).
    _run_deficit: int | None = None
    # With a deficit: the most tokens any of the run's requests has computed at quiet_steps
    # (its first pass included).
    _run_latest = 0

    def exclude_warmup(self, first_measured: int) -> None:
        self.warmup_below = first_measured

    def _admission_quiet(self) -> bool:
        """The backend: no pass of a run could admit anything or change its admission state."""
        raise NotImplementedError

    def _request_slots(self) -> int:
        """The backend: how many requests may run; received KV waits while they all do."""
        raise NotImplementedError

    def _advance_run(self, extra: int) -> None:
        """The backend: per-pass state other than the requests' (SGLang's new_token_ratio)."""

    def _runs_past_preemption(self, decided: SchedulerOutput) -> bool:
        """The backend: may a pass that preempted start a run (its preemptions belong to the run's
        first pass)? Only where the backend knows the admission rules the preempted requests
        meet in the passes after it (SGLang: `_admission_quiet` settles the next call's attempt)."""
        return False

    def schedule(self) -> SchedulerOutput:
        out = super().schedule()
        self._last_decided = out
        return out

    def may_run(self, decided: SchedulerOutput) -> bool:
        return bool(decided.entries) and decided is self._last_decided

    def _run_blocks(self, entries, steps: int) -> int:
        """Blocks the entries' requests need for `steps` more tokens each."""
        size = self.kv.block_size
        limit = self.max_model_len
        total = 0
        for entry in entries:
            request = entry.request
            end = request.num_computed + steps
            if end > limit:
                end = limit
            need = -(-end // size) - len(request.blocks)
            if need > 0:
                total += need
        return total

    def _run_pages(self, entries, steps: int) -> int:
        """`_run_blocks`, in closed form where `quiet_steps` found it (steps within the run's)."""
        deficit = self._run_deficit
        if deficit is None:
            return self._run_blocks(entries, steps)
        return deficit + len(entries) * steps

    def quiet_steps(self, decided: SchedulerOutput, limit: int, now: int) -> int:
        """How many passes, starting with `decided` (starting at `now`), are the same decode pass."""
        entries = decided.entries
        if ((decided.preempted and not self._runs_past_preemption(decided))
                or decided.load_ns or len(entries) != len(self.running)
                or (self.transferred and len(self.running) < self._request_slots())
                or self.transfers_waiting or not self._admission_quiet()):
            return 0
        self._run_deficit = None
        if self.kv.block_size == 1:
            return self._quiet_pages(entries, limit, now)
        max_len = self.max_model_len
        cap = limit
        context = 0
        for entry in entries:
            request = entry.request
            if not entry.is_decode or entry.tokens != 1 or entry.drafts or request.stale:
                return 0
            remaining = min(request.max_tokens, max_len - request.prompt_len) - request.num_output
            if remaining < cap:
                cap = remaining
            context += entry.computed_before + 1
        if cap < 2:
            return 0
        # Blocks for passes 2..k (the first has its own), plus with overlap the pass committed
        # behind the run (counted for every request): the largest k that fits.
        free = self.kv.num_free
        behind = 1 if self.async_scheduling else 0
        if self._run_blocks(entries, cap - 1 + behind) > free:
            cap = self._steps_fitting(entries, free, behind, cap)
            if cap < 2:
                return 0
        self._run_context = context
        self._run_start = now
        return cap

    def _quiet_pages(self, entries, limit: int, now: int) -> int:
        """`quiet_steps` past its first checks with one-token pages (SGLang's default), in one loop.

        A request that holds no page past its computed tokens (b <= c) and stays inside the
        context limit needs c - b + s pages for s more tokens, so the run's pages for s tokens
        each are `deficit + n·s` (deficit = Σ c - b): the largest run that fits is a quotient,
        and `_run_blocks` need not loop over the batch. Otherwise the general count decides."""
        max_len = self.max_model_len
        cap = limit
        context = 0
        deficit = 0   # Σ c - b
        latest = 0
        ahead = False   # some request holds pages past its computed tokens
        for entry in entries:
            request = entry.request
            if not entry.is_decode or entry.tokens != 1 or entry.drafts or request.stale:
                return 0
            allowed = max_len - request.prompt_len   # min() written out: this runs per request per run
            if request.max_tokens < allowed:
                allowed = request.max_tokens
            remaining = allowed - request.num_output
            if remaining < cap:
                cap = remaining
            context += entry.computed_before + 1
            computed = request.num_computed   # what `_run_blocks` counts from
            spare = len(request.blocks) - computed
            deficit -= spare
            if spare > 0:
                ahead = True
            if computed > latest:
                latest = computed
        return self._quiet_fit(entries, cap, context, deficit, latest, ahead, now)

    def _quiet_fit(self, entries, cap: int, context: int, deficit: int, latest: int, ahead: bool,
                   now: int) -> int:
        """`_quiet_pages` past its loop, on its sums (a backend may make them elsewhere)."""
        if cap < 2:
            return 0
        max_len = self.max_model_len
        free = self.kv.num_free
        behind = 1 if self.async_scheduling else 0
        count = len(entries)
        if ahead or latest + cap - 1 + behind > max_len:   # the general count (a page may be spare)
            if self._run_blocks(entries, cap - 1 + behind) > free:
                cap = self._steps_fitting(entries, free, behind, cap)
        else:
            self._run_deficit = deficit
            if deficit + count * (cap - 1 + behind) > free:
                cap = self._pages_fitting(deficit, count, free, behind)
        if cap < 2:
            return 0
        self._run_context = context
        self._run_start = now
        self._run_latest = latest
        return cap

    def _pages_fitting(self, deficit: int, count: int, free: int, behind: int) -> int:
        """`_steps_fitting` in closed form (see _quiet_pages): the largest k whose passes 2..k
        (+ `behind`) fit, deficit + n·(k - 1 + behind) <= free (below 2: none)."""
        return (free - deficit) // count + 1 - behind

    def _steps_fitting(self, entries, free: int, behind: int, cap: int) -> int:
        """The largest k < cap whose passes 2..k (+ `behind`) fit in `free` blocks (1: none)."""
        # Request r needs ceil((c_r + s) / size) - blocks_r blocks for s more tokens: within one
        # of (s - slack_r) / size, its free slots being slack_r. So the total over n requests
        # lies in [(n·s - Σ slack) / size, that + n), and the largest s that fits lies within
        # `size` of free · size / n + Σ slack / n: search only there.
        size = self.kv.block_size
        count = len(entries)
        slack = sum(len(e.request.blocks) * size - e.request.num_computed for e in entries)
        high = min(cap - 1, (free * size + slack) // count) + 1 - behind   # k = high + 1 does not fit
        low = max(1, high - size - 1)
        while low > 1 and self._run_blocks(entries, low - 1 + behind) > free:
            low = max(1, low - size)
        while low < high:
            middle = (low + high + 1) // 2
            if self._run_blocks(entries, middle - 1 + behind) <= free:
                low = middle
            else:
                high = middle - 1
        return low

    def run_segments(self, decided: SchedulerOutput, steps: int) -> list[tuple[int, int, int]]:
        """The run's steps as (steps, decoding requests, their total context in the first):
        one segment, as the run ends with the first request's last token."""
        return [(steps, len(decided.entries), self._run_context)]

    def _run_needs(self, entries, extra: int) -> tuple[list[int], int]:
        """Each entry's new blocks for `extra` more tokens (<= 0: none), and the blocks of the
        run's last pass: `KvCache.allocate_each`'s count fused with the last pass's, one loop."""
        kv = self.kv
        size = kv.block_size
        max_len = self.max_model_len
        needs = []
        last_step = 0
        for entry in entries:
            request = entry.request
            held = len(request.blocks)
            end = request.num_computed + extra
            if end > max_len:
                end = max_len
            need = -(-end // size) - held
            needs.append(need)
            if need > 0:
                before = request.num_computed + extra - 1
                if before > max_len:
                    before = max_len
                before_need = -(-before // size) - held
                last_step += need - (before_need if before_need > 0 else 0)
        return needs, last_step

    def extend(self, decided: SchedulerOutput, steps: int, durations, uniform_ns: int = 0) -> None:
        """Make `decided` stand for `steps` passes (see quiet_steps), each lasting its entry of
        `durations`, or `uniform_ns` when `durations` is None."""
        kv = self.kv
        size = kv.block_size
        extra = steps - 1
        overlap = self.async_scheduling
        caching = kv.enable_caching
        entries = decided.entries
        deficit = self._run_deficit
        if deficit is None:
            needs, last_step = self._run_needs(entries, extra)
            total = sum(need for need in needs if need > 0)
        else:   # one-token pages: each request needs c - b + extra, one a pass (see _quiet_pages)
            needs = repeat(0)
            total = deficit + len(entries) * extra
            last_step = len(entries)
        free_blocks = self._run_free_blocks(decided, steps)
        pool: list[int] = []
        kv.take(total, pool)
        position = 0
        warm = 0
        start = self._run_start
        late: list[int] = []
        for entry, need in zip(entries, needs):
            request = entry.request
            if request.request_id < self.warmup_below:
                warm += 1
            elif request.last_token_ns != start:
                late.append(request.last_token_ns)
            if deficit is not None:
                need = request.num_computed + extra - len(request.blocks)
            if need > 0:
                request.blocks.extend(pool[position:position + need])
                position += need
            request.num_computed += extra
            if overlap:
                # Outputs of every pass but the last are processed before the commit behind the run.
                request.num_output += extra
                filled = request.num_computed - request.placeholders
            else:
                filled = min(request.num_computed, request.prompt_len + request.num_output + extra)
            if caching:
                full = filled // size
                if full > request.num_cached_blocks:
                    if request.num_cached_blocks < request.keys.shared_blocks:
                        kv.cache_full_blocks(request, filled)
                    else:
                        # `cache_full_blocks` past the shareable prefix, without the call (a run
                        # fills a block per request with SGLang's one-token pages; see
                        # `KvCache.allocate_needs`).
                        request.num_cached_blocks = full
        self._advance_run(extra)
        # KV usage at the end of the run's next-to-last pass (the reference's highest sample
        # inside the run): every block taken, less the last pass's unless overlap committed it.
        self._record_run(decided, steps, durations, uniform_ns, kv.num_used - (0 if overlap else last_step),
                         free_blocks, warm, late)

    def _run_free_blocks(self, decided: SchedulerOutput, steps: int) -> list[int] | None:
        """For pass logs: the free blocks after each of a run's passes is scheduled, as the
        engine takes them (taken before the run's blocks are)."""
        if not self.names_requests:
            return None
        entries, num_free = decided.entries, self.kv.num_free
        return [decided.free_blocks] + [num_free - self._run_pages(entries, step) for step in range(1, steps)]

    def _record_run(self, decided: SchedulerOutput, steps: int, durations, uniform_ns: int, kv_peak: int,
                    free_blocks: list[int] | None, warm: int, late: list[int]) -> None:
        """Make `decided` stand for the run `extend` made: its passes, KV peak and late gaps."""
        run = decided.run = PassRun(steps, durations, uniform_ns)
        run.kv_peak = kv_peak
        run.free_blocks = free_blocks
        run.per_pass = len(decided.entries) - warm
        run.late_previous_ns = late
        decided.num_tokens = len(decided.entries) * steps
