"""The request path: the time a request spends outside the engine's passes.

Between a client sending a request and the engine's scheduler seeing it, the server
parses and validates the HTTP request, tokenizes the prompt and hands the token ids to
the engine process (and, on engines whose ranks each receive requests, to every
tensor-parallel rank). Between a pass sampling a token and the client reading it, the
engine sends the token back to the API server, which detokenizes it and writes a
server-sent event. Each engine supplies its own costs (`Backend.request_path`, with the
upstream functions in docs/modeling/request_path.md); the tokenizer's cost per prompt
token is a property of the model's tokenizer family (models/data/*.json `tokenizer`).

The costs are fixed per request and per prompt token: they run on the API server's CPU,
beside the GPU's passes, so they neither take pass time nor wait for it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Prompt-token cost of each tokenizer family, in ns per token (docs/modeling/request_path.md):
# Hugging Face `tokenizers` (Rust, byte-level BPE) encodes about 0.7-2 µs per token on one
# server core; tiktoken's BPE about 0.2-1 µs.
TOKENIZER_NS_PER_TOKEN = {"hf-fast": 1500, "tiktoken": 500}
DEFAULT_TOKENIZER = "hf-fast"


@dataclass(frozen=True)
class RequestPathCosts:
    """One engine's request-path costs (ms), each inside the physical range its docs give."""

    http_ms: float          # HTTP server: JSON parse, request validation, sampling parameters
    to_engine_ms: float     # API server → engine process: the request object, serialisation, IPC
    broadcast_ms: float     # rank 0 → every tensor-parallel rank (engines that broadcast requests), tp > 1
    output_ms: float        # engine → client for one token: output IPC, detokenization, the SSE write

    def inbound_ms(self, gpus: int) -> float:
        """HTTP, the hop to the engine and, for a worker of more than one GPU, the broadcast."""
        return self.http_ms + self.to_engine_ms + (self.broadcast_ms if gpus > 1 else 0.0)


@dataclass(frozen=True)
class RequestPath:
    """A run's request path in integer ns: `inbound_ns(prompt)` before the engine, `outbound_ns` after."""

    fixed_in_ns: int = 0
    per_token_ns: int = 0
    outbound_ns: int = 0
    # Disaggregated serving through a proxy that sends the request to the decode server only
    # after the prefill server's response (vLLM's, TensorRT-LLM's): that response's way out and
    # the decode server's own way in, before the decode side pulls the KV.
    handoff_fixed_ns: int = 0

    def inbound_ns(self, input_length: int) -> int:
        return self.fixed_in_ns + self.per_token_ns * input_length

    def handoff_ns(self, input_length: int) -> int:
        if not self.handoff_fixed_ns:
            return 0
        return self.handoff_fixed_ns + self.per_token_ns * input_length

    @classmethod
    def build(cls, costs: RequestPathCosts | None, tp: int, per_token_ns: int, tokenization_ms: float | None,
              handoff_tp: int | None = None) -> RequestPath:
        """The path of one deployment; `costs` None: the path is off (only a given
        `engine.tokenization_ms`, a fixed cost, remains). `handoff_tp`: the decode workers' GPUs
        under a proxy that asks the decode server after the prefill server answered."""
        fixed_tokenization = 0 if tokenization_ms is None else round(tokenization_ms * 1e6)
        if costs is None:
            return cls(fixed_in_ns=fixed_tokenization)
        handoff = 0 if handoff_tp is None else round((costs.output_ms + costs.inbound_ms(handoff_tp)) * 1e6)
        return cls(fixed_in_ns=round(costs.inbound_ms(tp) * 1e6) + fixed_tokenization,
                   per_token_ns=per_token_ns if tokenization_ms is None else 0,
                   outbound_ns=round(costs.output_ms * 1e6), handoff_fixed_ns=handoff)


# Step-time models whose costs a user sets by hand: their runs are hand-checked, and the
# request path stays off unless engine.request_path.enabled says otherwise.
HAND_SET_TIMING = ("fixed", "polynomial")


def request_path_for(settings, engine_costs: RequestPathCosts | None, timing_kind: str, tp: int,
                     tokenizer: str, tokenization_ms: float | None, decode_tp: int | None = None,
                     sequential_handoff: bool = False) -> RequestPath:
    """The run's request path from `engine.request_path` (its nulls: the engine's own costs)."""
    enabled = settings.enabled if settings.enabled is not None else timing_kind not in HAND_SET_TIMING
    if not enabled or engine_costs is None:
        return RequestPath.build(None, tp, 0, tokenization_ms)
    costs = RequestPathCosts(**{name: (getattr(settings, name) if getattr(settings, name) is not None
                                       else getattr(engine_costs, name))
                                for name in ("http_ms", "to_engine_ms", "broadcast_ms", "output_ms")})
    per_token = (TOKENIZER_NS_PER_TOKEN[tokenizer] if settings.tokenizer_us_per_token is None
                 else round(settings.tokenizer_us_per_token * 1e3))
    return RequestPath.build(costs, tp, per_token, tokenization_ms,
                             handoff_tp=decode_tp if sequential_handoff else None)
