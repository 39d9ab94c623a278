"""`sessions.max_context_tokens`: a chat front-end's context window over a session.

Chat front-ends keep a conversation within the model's window by sending only its newest
messages: when turn k+1's prompt (the context so far plus the new question) would exceed
the cap, whole turns (a question and its answer) are dropped from the oldest end until it
fits. The system prompt (`system_prompt_length`) always stays, and so does the new question
(the config guarantees it fits: config/sessions.py).

What it does to the prefix cache: the cut prompt is the system prompt followed by what
were later tokens of the stream, now at other positions, so its blocks chain to content
no earlier prompt had. It can hit the system prompt's blocks and nothing else; the turns
after it extend the cut stream and hit on it again until the next cut. In the content
model (workload/prompt.py) a cut gives the session's stream a new first hash id, unique
in the run, after the system prompt's.
"""

from __future__ import annotations

from collections import deque


class ContextCap:
    """Cuts sessions' contexts to `cap` tokens; gives each cut stream a fresh hash-id head."""

    def __init__(self, cap: int, system_prompt_length: int, num_sessions: int) -> None:
        self.cap = cap
        self.system = system_prompt_length
        # Past every session's own head (session, or session + 1 after the system prompt's 0).
        self._next_head = num_sessions + 1

    def next_prompt(self, live, produced: int) -> bool:
        """Sets `live.prompt` for its turn `live.turn` after the one before produced `produced`
        tokens; True when the context was cut."""
        previous = live.turn - 1
        if live.kept is None:
            live.kept = deque()
        own = live.inputs[previous] - (self.system if previous == 0 else 0)
        live.kept.append(own + produced)
        context = live.prompt + produced            # system prompt + every kept turn
        question = live.inputs[live.turn]
        cut = False
        while context + question > self.cap and live.kept:
            context -= live.kept.popleft()
            cut = True
        live.prompt = context + question
        if cut:
            live.head = self._next_head
            self._next_head += 1
        return cut
