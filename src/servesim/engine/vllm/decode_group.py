"""Decoding requests that advance in lockstep, held as aggregates.

In a steady pass every decoding request computes exactly one token, so the
fast engine does not visit them. A request joins the group at the pass where
it first decodes (its "first step" f, with c tokens computed before it); at
group step s it then has c + (s - f) tokens computed before the step, and its
last token comes from step `group_final`. Everything a pass needs is kept as
running totals over the members still to be scheduled ("active"):

- how many there are (one decode token each);
- Σ (c - f + 1), so their total context at step s is that sum + active · s;
- counts by (c - f) mod block_size: a member needs a new KV block at step s
  exactly when c + s - f is a multiple of the block size, so the blocks a
  step needs are one bucket: buckets[-s mod block_size].

Blocks grown by members are kept in one anonymous pool: they are private to
their request and unkeyed until it leaves the group, so which member holds
which block is unobservable; a leaving member takes as many as it grew. Keys
of its full blocks (vLLM caches them as they fill) are given when it leaves,
which is equivalent because only the request itself could hit those blocks,
and it does not look itself up while running.
"""

from __future__ import annotations

import heapq

from servesim.engine.request import Request


class DecodeGroup:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.warmup_below = 0       # requests with smaller ids are warm-up (left out of the ITL)
        self.reset()

    def reset(self) -> None:
        self.step = 0               # last step scheduled
        self.done_step = 0          # last step whose outputs were processed
        self.done_end_ns = 0        # end of the pass that ran `done_step`
        self.active = 0             # members whose last step is not yet scheduled
        self.warm_active = 0        # ... of which warm-up requests
        self.context_base = 0       # Σ over active members of (c - f + 1)
        self.buckets = [0] * self.block_size
        self.members: dict[int, Request] = {}     # seq -> member (active or finishing)
        self.retire_at: dict[int, list[Request]] = {}  # final step -> members
        self.depart_at: dict[int, list[Request]] = {}  # final step -> members
        self.joined_at: dict[int, list[Request]] = {}  # first step -> members
        self.retired_through = 0    # members with final step <= this are no longer active
        self.seq_heap: list[tuple[int, Request]] = []  # (-seq, member), active ones, lazily cleaned
        self.final_heap: list[int] = []   # members' final steps, lazily cleaned
        self.latest_final = 0       # the last active member's final step (0: none yet)
        # (-final step, seq) of members, lazily cleaned: the latest final again after a
        # preemption takes the member holding it, without a pass over every member.
        self.latest_heap: list[tuple[int, int]] = []
        self.private_blocks: list[int] = []

    # ------------------------------------------------------------------ membership

    def join(self, request: Request, step: int) -> None:
        """`request` decodes from `step` on; it has its blocks for `step` already."""
        remaining = request.max_tokens - request.num_output - request.placeholders
        final = step + remaining - 1
        request.group_first = step
        request.group_final = final
        request.group_computed = request.num_computed
        offset = request.num_computed - step
        request.group_offset = offset
        self.active += 1
        if self.is_warm(request):
            self.warm_active += 1
        self.context_base += offset + 1
        self.buckets[offset % self.block_size] += 1
        self.members[request.seq] = request
        self.retire_at.setdefault(final, []).append(request)
        self.depart_at.setdefault(final, []).append(request)
        self.joined_at.setdefault(step, []).append(request)
        heap = self.seq_heap
        heapq.heappush(heap, (-request.seq, request))
        if len(heap) > 2 * len(self.members) + 64:
            # Departed members below the newest are never popped by `max_active_seq`; drop
            # them now and then, or a long run keeps every request it ever served.
            members = self.members
            self.seq_heap = heap = [entry for entry in heap if members.get(-entry[0]) is entry[1]]
            heapq.heapify(heap)
        heapq.heappush(self.final_heap, final)
        latest = self.latest_heap
        heapq.heappush(latest, (-final, request.seq))
        if len(latest) > 2 * len(self.members) + 64:
            self.latest_heap = latest = [entry for entry in latest if self._holds_final(entry)]
            heapq.heapify(latest)
        if final > self.latest_final:
            self.latest_final = final

    def finals_between(self, first: int, stop: int) -> list[int]:
        """The steps in [first, stop) that some member was given as its last (its list may be
        empty since), in order. After a fast-forwarded run the range is longer than there are
        finals held: those are visited, not every step of the run."""
        retire_at = self.retire_at
        if stop - first > len(retire_at):
            return sorted(final for final in retire_at if first <= final < stop)
        return [final for final in range(first, stop) if final in retire_at]

    def retire_before(self, step: int) -> None:
        """Members whose last step comes before `step` are no longer scheduled."""
        retire_at = self.retire_at
        for final in self.finals_between(self.retired_through + 1, step):
            for member in retire_at.pop(final):
                self._deactivate(member)
        if step - 1 > self.retired_through:
            self.retired_through = step - 1

    def is_warm(self, request: Request) -> bool:
        """A warm-up request: it loads the engine, but its gaps stay out of the ITL."""
        return request.request_id < self.warmup_below

    def _deactivate(self, member: Request) -> None:
        """Take a member out of the running totals of the members still to be scheduled."""
        offset = member.group_offset
        self.active -= 1
        if self.is_warm(member):
            self.warm_active -= 1
        self.context_base -= offset + 1
        self.buckets[offset % self.block_size] -= 1

    def active_members(self, step: int) -> list[Request]:
        """The members decoding at `step`, in admission order (O(members): pass logs only)."""
        return [member for _, member in sorted(self.members.items()) if member.group_final >= step]

    def blocks_needed(self, step: int) -> int:
        return self.buckets[-step % self.block_size]

    def context_at(self, step: int) -> int:
        return self.context_base + self.active * step

    def earliest_final(self, step: int) -> int:
        """The first step at or after `step` that is some active member's last."""
        heap = self.final_heap
        while heap and heap[0] < step:
            heapq.heappop(heap)
        return heap[0] if heap else -1

    def blocks_for_steps(self, first: int, count: int) -> int:
        """Blocks the active members need over `count` steps from `first` (no one leaving)."""
        size = self.block_size
        cycles, rest = divmod(count, size)
        total = cycles * self.active
        buckets = self.buckets
        for step in range(first, first + rest):
            total += buckets[-step % size]
        return total

    def steps_within(self, first: int, limit: int, free_blocks: int) -> int:
        """How many steps from `first` (at most `limit`) fit in `free_blocks` new blocks."""
        size = self.block_size
        cycles = min(limit // size, free_blocks // self.active) if self.active else limit // size
        count = cycles * size
        left = free_blocks - cycles * self.active
        buckets = self.buckets
        while count < limit:
            need = buckets[-(first + count) % size]
            if need > left:
                break
            left -= need
            count += 1
        return count

    def max_active_seq(self, step: int) -> int:
        heap = self.seq_heap
        while heap:
            member = heap[0][1]
            if member.group_first >= 0 and member.group_final >= step:
                return -heap[0][0]
            heapq.heappop(heap)
        return -1

    def newest_member(self, step: int) -> Request:
        """The member admitted last, active or with its last token still in flight."""
        newest = -1
        for final in range(self.done_step + 1, step):   # finishing: last step scheduled, not processed
            for member in self.depart_at.get(final, ()):
                newest = max(newest, member.seq)
        return self.members[max(newest, self.max_active_seq(step))]

    # ------------------------------------------------------------------ leaving

    def remove(self, member: Request, step: int) -> None:
        """Forget a settled member (preempted) before step `step` is scheduled."""
        final = member.group_final
        if final >= step:   # still active
            self._deactivate(member)
            self.retire_at[final].remove(member)
        for table, key in ((self.depart_at, final), (self.joined_at, member.group_computed - member.group_offset)):
            members = table.get(key)
            if members is not None and member in members:
                members.remove(member)
        del self.members[member.seq]
        if final == self.latest_final:
            latest = self.latest_heap
            while latest and not self._holds_final(latest[0]):
                heapq.heappop(latest)
            self.latest_final = -latest[0][0] if latest else 0

    def _holds_final(self, entry: tuple[int, int]) -> bool:
        """Is a `latest_heap` entry a current member's final step?"""
        member = self.members.get(entry[1])
        return member is not None and member.group_final == -entry[0]

    def settle(self, member: Request, through_scheduled: int, through_done: int) -> int:
        """Write a member's implicit progress into its own counters; returns group tokens still in flight."""
        first = member.group_first
        final = member.group_final
        # (conditionals, not min()/max(): a builtin call parses its arguments)
        scheduled = (through_scheduled if through_scheduled < final else final) - first + 1
        done = (through_done if through_done < final else final) - first + 1
        if done < 0:
            done = 0
        member.num_computed = member.group_computed + scheduled
        member.num_output += done
        need = -(-member.num_computed // self.block_size) - len(member.blocks)
        if need > 0:
            pool = self.private_blocks
            member.blocks.extend(pool[-need:])
            del pool[-need:]
        member.group_first = -1
        return scheduled - done
