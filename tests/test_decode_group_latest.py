"""DecodeGroup.latest_final after removals (engine/vllm/decode_group.py): the latest final step
of the members left, kept by a lazily cleaned heap instead of a max over every member."""

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.request import Request
from servesim.engine.vllm.decode_group import DecodeGroup


def _member(seq: int, remaining: int) -> Request:
    request = Request(seq, 0, 0, 16, remaining, remaining, None)
    request.seq = seq
    request.num_computed = 16
    return request


def test_removing_the_latest_member_falls_back_to_the_next_latest():
    # Joined at step 1 with 5, 9 and 7 tokens to go: finals 5, 9, 7 (step + remaining - 1).
    group = DecodeGroup(16)
    a, b, c = _member(0, 5), _member(1, 9), _member(2, 7)
    for request in (a, b, c):
        group.join(request, 1)
    assert group.latest_final == 9
    group.remove(b, 2)          # b held 9: the latest is now c's 7
    assert group.latest_final == 7
    group.remove(a, 2)          # a's 5 was not the latest: unchanged
    assert group.latest_final == 7
    group.remove(c, 2)
    assert group.latest_final == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40), st.integers(0, 1000)), min_size=1, max_size=300))
def test_latest_final_is_the_members_maximum_after_every_removal(ops):
    group = DecodeGroup(16)
    seq = 0
    step = 1
    for join, remaining, pick in ops:
        if join or not group.members:
            group.join(_member(seq, remaining), step)
            seq += 1
        else:
            members = sorted(group.members.values(), key=lambda r: r.seq)
            victim = members[pick % len(members)]
            group.remove(victim, step)
            assert group.latest_final == max((m.group_final for m in group.members.values()), default=0)
    assert len(group.latest_heap) <= 2 * len(group.members) + 65


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 80)), min_size=1, max_size=60))
def test_retiring_after_a_long_jump_leaves_the_totals_of_one_step_at_a_time(ops):
    """retire_before after a run (a jump past more steps than the group has finals) visits the
    finals held instead of every step: the same members leave the running totals."""
    groups = DecodeGroup(16), DecodeGroup(16)
    step = 1
    for seq, (remaining, jump) in enumerate(ops):
        for group in groups:
            group.join(_member(seq, remaining), step)
        groups[0].retire_before(step + jump)        # one call over the jump (a run's)
        for one in range(step + 1, step + jump + 1):
            groups[1].retire_before(one)            # a step at a time (the range branch)
        step += jump
        totals = [(g.active, g.context_base, g.buckets, sorted(g.retire_at), g.retired_through) for g in groups]
        assert totals[0] == totals[1]
