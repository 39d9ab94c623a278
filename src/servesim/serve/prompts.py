"""Prompt lengths, prefix-cache block ids and synthetic output text for the live server.

A prompt is counted with the config's tokenizer (`serve.tokenizer`, a local tokenizer.json
read with the `tokenizers` library) when it names one, else approximated as one token per
`serve.chars_per_token` characters (rounded up). Token-id prompts are counted exactly.
Chat messages are rendered by one fixed template before counting (docs/serve.md):

    <|role|>\\ncontent\\n   for each message, then   <|assistant|>\\n

The prompt's tokens (or, approximated, its character chunks) in blocks of the workload's
`trace_block_size` give the request's hash_ids, as a trace's block hashes do: prompts that
share a prefix share blocks in the simulated prefix cache.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError
from servesim.serve.settings import ServeConfig
from servesim.tokenizer_file import load_tokenizer

# Without a tokenizer each output token is this text, and /tokenize's ids are chunk hashes
# folded into a vocabulary of this size.
APPROX_OUTPUT_TOKEN = " tok"
APPROX_VOCAB = 32_000
# Tried in order as the one-token output text under a real tokenizer: the first whose
# repetitions encode to exactly as many tokens.
_OUTPUT_CANDIDATES = (" the", " a", " and", " of", " to", "the", "a", " x", "x")


def render_chat(messages: list[dict[str, Any]]) -> str:
    """The documented chat template (module docstring); content given as parts keeps its text parts."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append(f"<|{message.get('role', 'user')}|>\n{content or ''}\n")
    out.append("<|assistant|>\n")
    return "".join(out)


class PromptCounter:
    """Counts prompts, makes their block ids, and writes output text, with or without a tokenizer."""

    def __init__(self, settings: ServeConfig, base_dir: Path, block_size: int) -> None:
        self.chars_per_token = settings.chars_per_token
        self.block_size = block_size
        self.tokenizer = None if settings.tokenizer is None else load_tokenizer(base_dir / settings.tokenizer)
        self.output_token = APPROX_OUTPUT_TOKEN if self.tokenizer is None else self._one_token_text()

    # ------------------------------------------------------------------ prompts

    def tokens(self, text: str) -> list[int]:
        """The prompt's token ids (approximated: each chunk's hash in a small vocabulary)."""
        if self.tokenizer is not None:
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        return [zlib.crc32(chunk.encode()) % APPROX_VOCAB for chunk in self._chunks(text)]

    def count(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokens(text))
        return math.ceil(len(text) / self.chars_per_token)

    def _chunks(self, text: str) -> list[str]:
        # The approximation's tokens: consecutive slices, one per counted token.
        n = self.count(text)
        step = self.chars_per_token
        return [text[round(i * step):round((i + 1) * step)] for i in range(n)]

    def hash_ids(self, token_ids: list[int]) -> tuple[int, ...]:
        """One id per block of `block_size` tokens (the last may be partial), from its contents."""
        size = self.block_size
        return tuple(zlib.crc32(b",".join(str(t).encode() for t in token_ids[i:i + size]))
                     for i in range(0, len(token_ids), size))

    # ------------------------------------------------------------------ outputs and ids

    def output_text(self, tokens: int) -> str:
        return self.output_token * tokens

    def detokenize(self, ids: list[int]) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        return APPROX_OUTPUT_TOKEN * len(ids)

    def _one_token_text(self) -> str:
        for text in _OUTPUT_CANDIDATES:
            if all(len(self.tokens(text * k)) == k for k in (1, 2, 3, 8)):
                return text
        raise ServesimError("serve.tokenizer: no output token text found that the tokenizer encodes "
                            "one token per repetition (tried " + ", ".join(map(repr, _OUTPUT_CANDIDATES)) + ")")
