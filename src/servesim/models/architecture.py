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
        text = cfg.get("text_config")
        if isinstance(text, dict) and "hidden_size" not in cfg:
            cfg = {**text, **{k: v for k, v in cfg.items() if k != "text_config"}}
        get = cfg.get
        hidden = int(get("hidden_size"))
        layers = int(get("num_hidden_layers"))
        heads = int(get("num_attention_heads"))
        kv_heads = int(get("num_key_value_heads") or heads)
        head_dim = int(get("head_dim") or hidden // heads)
        experts = int(get("n_routed_experts") or get("num_experts") or get("num_local_experts") or 0)
        per_token = int(get("num_experts_per_tok") or get("experts_per_token") or get("num_experts_per_token") or 0)
        moe_inter = int(get("moe_intermediate_size") or (get("intermediate_size") if experts else 0) or 0)
        dense_inter = int(get("intermediate_size") or 0)
        shared = 0
        if get("n_shared_experts"):
            shared = int(get("n_shared_experts")) * moe_inter
        elif get("shared_expert_intermediate_size"):
            shared = int(get("shared_expert_intermediate_size"))
        moe_layers = 0
        if experts:
            first_dense = int(get("first_k_dense_replace") or 0)
            step = int(get("decoder_sparse_step") or get("moe_layer_freq") or 1)
            mlp_only = set(get("mlp_only_layers") or [])
            moe_layers = sum(
                1 for i in range(layers)
                if i >= first_dense and i not in mlp_only and (i + 1) % step == 0
            )
        dense_layers = layers - moe_layers
        if experts and dense_layers and not get("first_k_dense_replace") and not get("mlp_only_layers"):
            dense_inter = dense_inter or moe_inter
        layer_types = list(get("layer_types") or [])
        sliding_window = int(get("sliding_window") or 0)
        sliding_layers = sum(1 for t in layer_types if "sliding" in str(t))
        linear_layers = sum(1 for t in layer_types if "linear" in str(t))
        if not layer_types and get("full_attention_interval"):
            interval = int(get("full_attention_interval"))
            linear_layers = layers - layers // interval
        if sliding_window and not layer_types and get("use_sliding_window"):
            sliding_layers = layers
        if not sliding_layers:
            sliding_window = 0
        mla = bool(get("kv_lora_rank"))
        dtype = str(get("torch_dtype") or get("dtype") or "bfloat16")
        quant = get("quantization_config") or {}
        native = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, "bf16")
        quant_method = str(quant.get("quant_method") or "").lower()
        quantized_experts = None
        if quant_method in ("fp8",):
            native = "fp8"
        elif quant_method == "mxfp4":
            quantized_experts = "mxfp4"
        context = int(get("max_position_embeddings") or 4096)
        return cls(
            name=name, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            vocab=int(get("vocab_size")), context_length=context,
            tied_embeddings=bool(get("tie_word_embeddings", False)),
            dense_intermediate=dense_inter, dense_layers=dense_layers, moe_layers=moe_layers,
            experts=experts, experts_per_token=per_token, moe_intermediate=moe_inter if experts else 0,
            shared_intermediate=shared,
            mla=mla, q_lora_rank=int(get("q_lora_rank") or 0), kv_lora_rank=int(get("kv_lora_rank") or 0),
            qk_rope_head_dim=int(get("qk_rope_head_dim") or 0), qk_nope_head_dim=int(get("qk_nope_head_dim") or 0),
            v_head_dim=int(get("v_head_dim") or 0),
            sliding_window=sliding_window, sliding_layers=sliding_layers, linear_layers=linear_layers,
            native_dtype=native, quantized_experts=quantized_experts,
        )
