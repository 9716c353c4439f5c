"""Mixtral and the model_types that share its layout: phimoe, granitemoe, olmoe.

Llama's pre-norm block with the SwiGLU MLP replaced, on every layer, by a mixture of
`num_local_experts` SwiGLU experts of `intermediate_size` (stored fused: experts.gate_up_proj) behind
a bias-free router; no shared expert. What the others change, as data:
- mixtral: no biases whatever `attention_bias` says; `sliding_window` (if set) on every layer.
- phimoe (Phi-3.5-MoE): LayerNorms with bias instead of RMSNorms (eps rms_norm_eps), `attention_bias`
  on Q, K, V and O, `lm_head_bias`, `sliding_window` on every layer.
- granitemoe: `attention_bias` on Q, K, V and O; its embedding, residual, attention and logit
  multipliers are scalars, not parameters.
- olmoe (OLMoE): `num_experts` experts, `attention_bias` on Q, K, V and O, and QK-norm over the full
  width: q_norm of hidden_size, k_norm of (hidden_size / heads) x KV heads.
Heads untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, norm, uniform, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

_COMMON = {"hidden_act": "silu", "tie_word_embeddings": False}
_BIASED = {**_COMMON, "attention_bias": False}  # the types whose attention reads attention_bias
# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "mixtral": {**_COMMON, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "num_experts_per_tok": 2,
                "num_local_experts": 8, "rope_theta": 1_000_000.0},
    "phimoe": {**_BIASED, "vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400,
               "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
               "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "num_experts_per_tok": 2,
               "num_local_experts": 16, "lm_head_bias": False, "rope_theta": 1_000_000.0},
    "granitemoe": {**_BIASED, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048,
                   "rms_norm_eps": 1e-6, "num_experts_per_tok": 2, "num_local_experts": 8, "rope_theta": 10000.0},
    "olmoe": {**_BIASED, "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048,
              "num_hidden_layers": 16, "num_attention_heads": 16, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-5, "num_experts_per_tok": 8, "num_experts": 64, "rope_theta": 10000.0},
}
# The key naming the number of experts (olmoe's attribute_map lets num_local_experts stand for it).
N_EXPERTS = {"olmoe": ("num_local_experts", "num_experts")}
WINDOWED = ("mixtral", "phimoe")


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    eps = cfg.float("rms_norm_eps")
    block_norm = norm("layernorm", eps) if model_type == "phimoe" else norm("rmsnorm", eps)
    attn = attention(cfg, window=cfg.int("sliding_window", default=None) if model_type in WINDOWED else None)
    if model_type == "mixtral":
        attn.update(q_bias=False, k_bias=False, v_bias=False, o_bias=False)
    if model_type == "olmoe":
        attn["qk_norm"] = {"norm": block_norm, "scope": "full"}
    moe = experts(cfg, N_EXPERTS.get(model_type, ("num_local_experts",)), "intermediate_size")
    spec = uniform(cfg, model_type, {"attention": attn, "mlp": moe, "norm": block_norm}, block_norm,
                   cfg.bool("tie_word_embeddings"))
    spec["head"]["bias"] = model_type == "phimoe" and cfg.bool("lm_head_bias")
    return spec
