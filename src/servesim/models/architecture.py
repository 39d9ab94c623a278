"""What a step-time model needs to know about a transformer, derived from its config.json.

`Architecture.from_hf(config)` reads the Hugging Face fields of the model families
servesim knows (Llama, Qwen3 dense and MoE, Mixtral, DeepSeek-V3/Kimi (MLA), gpt-oss
(sliding-window layers, MoE), MiniMax-M2, Qwen3.5 and GLM MoE (hybrid / MLA)) and
turns them into parameter counts and per-token costs per layer kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Architecture:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context_length: int
    tied_embeddings: bool
    dense_intermediate: int          # MLP width of dense layers
    dense_layers: int                # layers with a dense MLP
    moe_layers: int                  # layers with routed experts
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0     # total width of shared experts (0: none)
    # Multi-head latent attention (DeepSeek-V3 family).
    mla: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Layers whose attention sees only a window of recent tokens, and linear-attention layers
    # (constant-size state, no KV cache).
    sliding_window: int = 0
    sliding_layers: int = 0
    linear_layers: int = 0
    native_dtype: str = "bf16"
    quantized_experts: str | None = None   # e.g. "mxfp4" for gpt-oss checkpoints
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    # ------------------------------------------------------------------ derived

    @property
    def attention_layers(self) -> int:
        """Layers with softmax attention over a KV cache."""
        return self.layers - self.linear_layers

    @property
    def full_attention_layers(self) -> int:
        return self.attention_layers - self.sliding_layers

    def attention_params(self) -> int:
        """Weights of one softmax-attention layer."""
        h = self.hidden
        if self.mla:
            q = (h * self.q_lora_rank + self.q_lora_rank * self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
                 if self.q_lora_rank else h * self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim))
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * self.heads * (
                self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.heads * self.v_head_dim * h
        return h * (self.heads + 2 * self.kv_heads) * self.head_dim + self.heads * self.head_dim * h

    def linear_attention_params(self) -> int:
        # Linear-attention (Gated DeltaNet style) layers project to q, k, v, gates and back:
        # about the size of a full multi-head attention block.
        h = self.hidden
        return 4 * h * self.heads * self.head_dim

    def expert_params(self) -> int:
        return 3 * self.hidden * self.moe_intermediate

    def dense_mlp_params(self) -> int:
        return 3 * self.hidden * self.dense_intermediate

    def shared_expert_params(self) -> int:
        return 3 * self.hidden * self.shared_intermediate

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def total_params(self) -> int:
        attention = self.attention_layers * self.attention_params() + self.linear_layers * self.linear_attention_params()
        mlp = self.dense_layers * self.dense_mlp_params()
        moe = self.moe_layers * (self.experts * self.expert_params() + self.shared_expert_params()
                                 + self.hidden * self.experts)
        head = 0 if self.tied_embeddings else self.lm_head_params()
        return attention + mlp + moe + self.embedding_params() + head

    def active_params(self) -> int:
        """Parameters a token touches (routed experts: only its own)."""
        attention = self.attention_layers * self.attention_params() + self.linear_layers * self.linear_attention_params()
        mlp = self.dense_layers * self.dense_mlp_params()
        moe = self.moe_layers * (self.experts_per_token * self.expert_params() + self.shared_expert_params()
                                 + self.hidden * self.experts)
        head = 0 if self.tied_embeddings else self.lm_head_params()
        return attention + mlp + moe + self.embedding_params() + head

    def kv_elements_per_token_layer(self) -> int:
        """KV-cache elements one token stores in one softmax-attention layer."""
        if self.mla:
            return self.kv_lora_rank + self.qk_rope_head_dim   # the latent cache, shared by all heads
        return 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """KV-cache bytes per token over the whole model (every attention layer)."""
        return self.attention_layers * self.kv_elements_per_token_layer() * kv_bytes

    # ------------------------------------------------------------------ parsing

    @classmethod
    def from_hf(cls, name: str, cfg: dict[str, Any]) -> Architecture:
        """Read a config.json; a field of the wrong type or outside servesim's bounds raises ModelConfigError."""
        text = cfg.get("text_config")
        if text is not None and not isinstance(text, dict):
            raise ModelConfigError(f"text_config must be a mapping, got {_show(text)}")
        if isinstance(text, dict) and "hidden_size" not in cfg:
            cfg = {**text, **{k: v for k, v in cfg.items() if k != "text_config"}}
        get = _Fields(cfg)
        hidden = get.int("hidden_size", required=True, maximum=MAX_WIDTH)
        layers = get.int("num_hidden_layers", required=True, maximum=MAX_LAYERS)
        heads = get.int("num_attention_heads", required=True, maximum=MAX_HEADS)
        kv_heads = get.int("num_key_value_heads", minimum=0, maximum=heads) or heads
        if heads % kv_heads:
            raise ModelConfigError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
        head_dim = get.int("head_dim", minimum=0, maximum=MAX_WIDTH) or hidden // heads
        if head_dim < 1:
            raise ModelConfigError(f"hidden_size {hidden} is smaller than num_attention_heads {heads}; give head_dim")
        experts = (get.int("n_routed_experts", minimum=0, maximum=MAX_EXPERTS)
                   or get.int("num_experts", minimum=0, maximum=MAX_EXPERTS)
                   or get.int("num_local_experts", minimum=0, maximum=MAX_EXPERTS) or 0)
        per_token = (get.int("num_experts_per_tok", minimum=0, maximum=MAX_EXPERTS)
                     or get.int("experts_per_token", minimum=0, maximum=MAX_EXPERTS)
                     or get.int("num_experts_per_token", minimum=0, maximum=MAX_EXPERTS) or 0)
        if per_token > experts:
            raise ModelConfigError(f"{per_token} experts per token is more than the {experts} experts")
        intermediate = get.int("intermediate_size", minimum=0, maximum=MAX_WIDTH)
        moe_inter = get.int("moe_intermediate_size", minimum=0, maximum=MAX_WIDTH) or (
            intermediate if experts else 0) or 0
        dense_inter = intermediate or 0
        shared = 0
        shared_experts = get.int("n_shared_experts", minimum=0, maximum=MAX_EXPERTS)
        shared_size = get.int("shared_expert_intermediate_size", minimum=0, maximum=MAX_WIDTH)
        if shared_experts:
            shared = shared_experts * moe_inter
        elif shared_size:
            shared = shared_size
        first_dense_given = get.int("first_k_dense_replace", minimum=0, maximum=MAX_LAYERS)
        mlp_only = get.int_list("mlp_only_layers")
        moe_layers = 0
        if experts:
            first_dense = first_dense_given or 0
            step = get.int("decoder_sparse_step", maximum=MAX_LAYERS) or get.int("moe_layer_freq",
                                                                                maximum=MAX_LAYERS) or 1
            only = set(mlp_only)
            moe_layers = sum(
                1 for i in range(layers)
                if i >= first_dense and i not in only and (i + 1) % step == 0
            )
        dense_layers = layers - moe_layers
        if experts and dense_layers and not first_dense_given and not mlp_only:
            dense_inter = dense_inter or moe_inter
        layer_types = get.str_list("layer_types")
        sliding_window = get.int("sliding_window", minimum=0, maximum=MAX_CONTEXT) or 0
        sliding_layers = sum(1 for t in layer_types if "sliding" in t)
        linear_layers = sum(1 for t in layer_types if "linear" in t)
        interval = get.int("full_attention_interval", maximum=MAX_LAYERS)
        if not layer_types and interval:
            linear_layers = layers - layers // interval
        if sliding_window and not layer_types and get.raw("use_sliding_window"):
            sliding_layers = layers
        if not sliding_layers:
            sliding_window = 0
        if sliding_layers + linear_layers > layers:
            raise ModelConfigError(f"layer_types lists {sliding_layers + linear_layers} sliding or linear layers "
                                   f"but num_hidden_layers is {layers}")
        kv_lora_rank = get.int("kv_lora_rank", minimum=0, maximum=MAX_WIDTH) or 0
        mla = bool(kv_lora_rank)
        dtype = str(get.raw("torch_dtype") or get.raw("dtype") or "bfloat16")
        quant = get.raw("quantization_config") or {}
        if not isinstance(quant, dict):
            raise ModelConfigError(f"quantization_config must be a mapping, got {_show(quant)}")
        native = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, "bf16")
        quant_method = str(quant.get("quant_method") or "").lower()
        quantized_experts = None
        if quant_method in ("fp8",):
            native = "fp8"
        elif quant_method == "mxfp4":
            quantized_experts = "mxfp4"
        context = get.int("max_position_embeddings", maximum=MAX_CONTEXT) or 4096
        return cls(
            name=name, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            vocab=get.int("vocab_size", required=True, maximum=MAX_VOCAB), context_length=context,
            tied_embeddings=bool(get.raw("tie_word_embeddings", False)),
            dense_intermediate=dense_inter, dense_layers=dense_layers, moe_layers=moe_layers,
            experts=experts, experts_per_token=per_token, moe_intermediate=moe_inter if experts else 0,
            shared_intermediate=shared,
            mla=mla, q_lora_rank=get.int("q_lora_rank", minimum=0, maximum=MAX_WIDTH) or 0,
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=get.int("qk_rope_head_dim", minimum=0, maximum=MAX_WIDTH) or 0,
            qk_nope_head_dim=get.int("qk_nope_head_dim", minimum=0, maximum=MAX_WIDTH) or 0,
            v_head_dim=get.int("v_head_dim", minimum=0, maximum=MAX_WIDTH) or 0,
            sliding_window=sliding_window, sliding_layers=sliding_layers, linear_layers=linear_layers,
            native_dtype=native, quantized_experts=quantized_experts,
        )


# Bounds on config.json sizes: an order of magnitude or more past any released model,
# small enough that set-up (a loop over layers, products of sizes) stays instant.
MAX_WIDTH = 1 << 20        # hidden, intermediate and head sizes, LoRA ranks
MAX_LAYERS = 10_000
MAX_HEADS = 1 << 16
MAX_EXPERTS = 1 << 16
MAX_VOCAB = 1 << 27
MAX_CONTEXT = 1 << 30      # max_position_embeddings, sliding_window


class ModelConfigError(ValueError):
    """A config.json field servesim cannot use; the message names the field."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Fields:
    """Typed reads of a config.json mapping: integers are JSON integers (not true/false, not 4096.0)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg

    def raw(self, key: str, default: Any = None) -> Any:
        return self.cfg.get(key, default)

    def int(self, key: str, *, required: bool = False, minimum: int = 1, maximum: int) -> int | None:
        value = self.cfg.get(key)
        if value is None:
            if required:
                raise ModelConfigError(f"its config.json lacks {key}")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelConfigError(f"{key} must be an integer, got {_show(value)}")
        if not minimum <= value <= maximum:
            raise ModelConfigError(f"{key} must be between {minimum} and {maximum:,}, got {value:,}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.cfg.get(key) or []
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise ModelConfigError(f"{key} must be a list of integers, got {_show(value)}")
        return value

    def str_list(self, key: str) -> list[str]:
        value = self.cfg.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ModelConfigError(f"{key} must be a list of strings, got {_show(value)}")
        return value
