"""Cohere Command-R (model_type cohere): a parallel block with one norm.

Attention and the SwiGLU MLP both read the output of the block's single LayerNorm, which has a
scale and no bias (CohereLayerNorm); the final norm is the same kind. With `use_qk_norm`, queries
and keys get such a norm per head, stored as [n_heads, head_dim] and [n_kv_heads, head_dim]: a
full-width count. The head is tied; `logit_scale` multiplies the logits (a scalar, no parameter).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, gated_mlp, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' CohereConfig defaults (models/cohere/configuration_cohere.py) for the keys read here.
DEFAULTS = {"vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
            "num_attention_heads": 64, "max_position_embeddings": 8192, "layer_norm_eps": 1e-5,
            "tie_word_embeddings": True, "attention_bias": False, "use_qk_norm": False, "rope_theta": 500000.0,
            "logit_scale": 0.0625}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_eps"), bias=False)
    attn = attention(cfg)
    attn["rope"]["interleaved"] = True  # CohereRotaryEmbedding: repeat_interleave, pairs of channels
    if cfg.bool("use_qk_norm"):
        attn["qk_norm"] = {"norm": ln, "scope": "full"}
    block = {"attention": attn, "mlp": gated_mlp(cfg, bias=False), "norm": ln, "norms": ("attn_in",),
             "parallel": True}
    head = {"tied": cfg.bool("tie_word_embeddings"), "logit_scale": cfg.float("logit_scale")}
    return uniform(cfg, "cohere", block, ln, head["tied"], head=head)
