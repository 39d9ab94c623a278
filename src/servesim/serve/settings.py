"""The config's `serve:` block: what only `servesim serve` reads (docs/serve.md).

Kept out of the config's dump (and so out of config_hash and config.resolved.yaml): the
block changes nothing a batch run does.
"""

from __future__ import annotations

from pydantic import model_validator

from servesim.schema_base import PositiveFloat, PositiveInt, StrictModel


class OutputLengthRange(StrictModel):
    """Uniform over min..max, both included: the output length when a request leaves it to EOS."""

    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> OutputLengthRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class ServeConfig(StrictModel):
    # A local tokenizer.json (or a folder holding one), relative to the config's folder;
    # null: prompt lengths from the character approximation below.
    tokenizer: str | None = None
    # Without a tokenizer, one prompt token per this many characters (rounded up).
    chars_per_token: PositiveFloat = 4.0
    # Output tokens when max_tokens is absent or EOS is honoured (ignore_eos false).
    output_length: OutputLengthRange = OutputLengthRange(min=64, max=512)
    # Warn on stderr when a token reaches its client this much later (simulated ms) than due.
    lag_warn_ms: PositiveFloat = 50.0
