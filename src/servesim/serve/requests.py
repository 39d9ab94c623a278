"""Reading one OpenAI-style request body: its prompt, its output length, what is refused.

Errors are `ApiError`s the routes answer with vLLM's error body (api.py). The output length:
`max_tokens` with `ignore_eos`; else a length drawn from `serve.output_length` (the model's
EOS), raised to `min_tokens` and cut at `max_tokens` (finish reason "length" then, "stop"
otherwise); a request with neither limit can run to the context's end (max_model_len).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servesim.serve.prompts import render_chat


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


# Parameters a synthetic engine cannot honour: refused rather than silently wrong.
_REFUSED = {"logprobs": "log-probabilities", "top_logprobs": "log-probabilities",
            "prompt_logprobs": "log-probabilities", "echo": "echoing the prompt", "suffix": "a suffix"}


@dataclass(frozen=True)
class Parsed:
    prompt_ids: list[int]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    model: str | None


def _int(body: dict, key: str, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if type(value) is not int or value < low:
        raise ApiError(400, f"{key} must be an integer of at least {low}, got {value!r}", param=key)
    return value


def _bool(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"{key} must be true or false, got {value!r}", param=key)
    return value


def parse(body: Any, counter, chat: bool) -> Parsed:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for key, what in _REFUSED.items():
        if body.get(key) not in (None, False, 0):
            raise ApiError(400, f"{key}: servesim serve does not produce {what}", param=key)
    if body.get("n", 1) != 1 or body.get("best_of", 1) not in (1, None):
        raise ApiError(400, "n and best_of must be 1: servesim serve samples one sequence per request", param="n")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    max_tokens = _int(body, "max_completion_tokens", 1) if chat else None
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    min_tokens = _int(body, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise ApiError(400, f"min_tokens ({min_tokens}) must be at most max_tokens ({max_tokens})", param="min_tokens")
    model = body.get("model")
    return Parsed(_chat_prompt(body, counter) if chat else _prompt(body, counter), _bool(body, "stream"),
                  bool(options.get("include_usage")), max_tokens, min_tokens, _bool(body, "ignore_eos"),
                  model if isinstance(model, str) else None)


def _prompt(body: dict, counter) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]   # a batch of one
    if isinstance(prompt, str):
        return counter.tokens(prompt)
    if isinstance(prompt, list) and prompt and all(type(t) is int and t >= 0 for t in prompt):
        return list(prompt)
    raise ApiError(400, "prompt must be one string or one list of token ids (servesim serve takes one "
                   "prompt per request)", param="prompt")


def _chat_prompt(body: dict, counter) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "messages must be a non-empty list of message objects", param="messages")
    return counter.tokens(render_chat(messages))


def output_plan(parsed: Parsed, prompt_tokens: int, live) -> tuple[int, str]:
    """(output tokens, finish reason) for a request whose prompt fits; 400 over max_model_len."""
    limit = live.max_model_len
    room = live.output_room(prompt_tokens)
    if room < 1:
        raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, your request has "
                       f"{prompt_tokens} input tokens. Please reduce the length of the input messages.")
    max_tokens = parsed.max_tokens
    if max_tokens is not None and max_tokens > room:
        raise ApiError(400, f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                       f"maximum context length is {limit} tokens and your request has {prompt_tokens} input "
                       f"tokens ({max_tokens} > {limit} - {prompt_tokens}).", param="max_tokens")
    reason = live.reject_reason(prompt_tokens)
    if reason is not None:
        raise ApiError(400, f"the engine refuses this prompt of {prompt_tokens} tokens ({reason})")
    cap = room if max_tokens is None else max_tokens
    if parsed.ignore_eos:
        return cap, "length"
    wanted = max(parsed.min_tokens, live.draw_output_length())
    return (cap, "length") if wanted >= cap else (wanted, "stop")
