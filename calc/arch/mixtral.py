"""Mixtral and the model_types that share its layout: phimoe, granitemoe, olmoe, flex_olmo, minimax_m2.

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
- flex_olmo (FlexOlmo): OLMoE's layer with OLMo-2's norms, on the outputs of attention and of the
  MoE (post_attention_layernorm, post_feedforward_layernorm) instead of their inputs.
- minimax_m2 (MiniMax-M2, M2.1, M2.5): no biases, `head_dim` wide heads, QK-norm over the full width
  (FlexOlmoAttention's), rotary on `rotary_dim` channels of each head (the released configs' legacy key,
  read as partial_rotary_factor = rotary_dim / head_dim), and a sigmoid router whose per-expert
  e_score_correction_bias buffer shifts the choice; the top_k sigmoid scores are renormalised.
  transformers builds no multi-token-prediction modules (use_mtp, num_mtp_modules), and neither does this.
Heads untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (LLAMA_CLASS_NO_WINDOW, NO_LLAMACPP, PHI3_CLASS, TRANSFORMERS_BACKEND, attention,
                              granite_scalars, norm, uniform, with_defaults)
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
    "flex_olmo": {**_BIASED, "vocab_size": 100352, "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 4096,
                  "rms_norm_eps": 1e-6, "num_experts_per_tok": 5, "num_experts": 7, "norm_topk_prob": False,
                  "rope_theta": 500000.0},
    "minimax_m2": {**_COMMON, "vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536,
                   "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 196608, "rms_norm_eps": 1e-6, "num_experts_per_tok": 8,
                   "num_local_experts": 256, "rope_theta": 5_000_000.0},
}
# The key naming the number of experts (olmoe's attribute_map lets num_local_experts stand for it).
N_EXPERTS = {"olmoe": ("num_local_experts", "num_experts"), "flex_olmo": ("num_local_experts", "num_experts")}
WINDOWED = ("mixtral", "phimoe")
UNBIASED = ("mixtral", "minimax_m2")  # attention without biases, whatever attention_bias says
FULL_QK_NORM = ("olmoe", "flex_olmo", "minimax_m2")
OUTPUT_NORMS = {"flex_olmo": ("attn_out", "mlp_out")}
# vLLM 0.32 runs FlexOlmoForCausalLM through its Transformers backend (vllm/model_executor/models/registry.py L713)
VLLM = {"flex_olmo": TRANSFORMERS_BACKEND}
# llama.cpp converts MixtralForCausalLM as its `llama` architecture: no window (conversion/__init__.py:195), by
# LlamaModel's class
LLAMACPP = {"mixtral": LLAMA_CLASS_NO_WINDOW, "flex_olmo": NO_LLAMACPP,
            "phimoe": PHI3_CLASS}  # PhiMoEForCausalLM: Phi3MiniModel's subclass
# How each router weighs its top_k experts (MixtralTopKRouter renormalises; OLMoE as norm_topk_prob says).
# MixtralTopKRouter softmaxes router_logits.float() and hands its weights on in fp32; OLMoE's and FlexOlmo's
# softmax(..., dtype=torch.float) cast them back (.to(router_logits.dtype))
ROUTING = {"mixtral": lambda cfg: {"router_fp32": "kept"}, "granitemoe": lambda cfg: {"topk_first": True},
           "phimoe": lambda cfg: {"scoring": "sparsemixer", "jitter_eps": cfg.float("router_jitter_noise", default=0.01)},
           "olmoe": lambda cfg: {"norm_topk": cfg.bool("norm_topk_prob", default=False), "router_fp32": "cast"},
           "flex_olmo": lambda cfg: {"norm_topk": cfg.bool("norm_topk_prob"), "router_fp32": "cast"},
           "minimax_m2": lambda cfg: {"scoring": "sigmoid", "score_bias": True}}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    if model_type == "minimax_m2":
        cfg = _rotary_dim(cfg)
    eps = cfg.float("rms_norm_eps")
    block_norm = norm("layernorm", eps) if model_type == "phimoe" else norm("rmsnorm", eps)
    attn = attention(cfg, window=cfg.int("sliding_window", default=None) if model_type in WINDOWED else None)
    if model_type in UNBIASED:
        attn.update(q_bias=False, k_bias=False, v_bias=False, o_bias=False)
    if model_type in FULL_QK_NORM:
        attn["qk_norm"] = {"norm": block_norm, "scope": "full"}
    moe = experts(cfg, N_EXPERTS.get(model_type, ("num_local_experts",)), "intermediate_size", **ROUTING[model_type](cfg))
    block = {"attention": attn, "mlp": moe, "norm": block_norm}
    if model_type in OUTPUT_NORMS:
        block["norms"] = OUTPUT_NORMS[model_type]
    spec = uniform(cfg, model_type, block, block_norm, cfg.bool("tie_word_embeddings"), **VLLM.get(model_type, {}),
                   **LLAMACPP.get(model_type, {}))
    spec["head"]["bias"] = model_type == "phimoe" and cfg.bool("lm_head_bias")
    return granite_scalars(cfg, spec) if model_type == "granitemoe" else spec


def _rotary_dim(cfg: Config) -> Config:
    """MiniMaxM2Config.convert_rope_params_to_dict: the released configs' `rotary_dim` is read as
    partial_rotary_factor = rotary_dim / head_dim, unless the config gives that factor itself."""
    rotary_dim = cfg.int("rotary_dim", default=None)
    if rotary_dim is None or cfg.has("partial_rotary_factor"):
        return cfg
    return cfg.replace({**cfg.data, "partial_rotary_factor": rotary_dim / cfg.int("head_dim")})
