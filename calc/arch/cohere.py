"""Cohere Command-R (model_type cohere) and Command R7B / Command A (cohere2): a parallel block with one norm.

Attention and the SwiGLU MLP both read the output of the block's single LayerNorm, which has a
scale and no bias (CohereLayerNorm); the final norm is the same kind. Rotary pairs interleaved
channels. The head is tied unless `tie_word_embeddings` says otherwise; `logit_scale` multiplies
the logits (a scalar, no parameter).
- cohere: with `use_qk_norm`, queries and keys get such a norm per head, stored as [n_heads,
  head_dim] and [n_kv_heads, head_dim]: a full-width count.
- cohere2: no QK-norm; `attention_bias` reaches the output projection too. Layers are sliding (a window of
  `sliding_window`, rotary) or full (no window and no rotary at all), as `layer_types` says or,
  without it, every `sliding_window_pattern`-th layer (4) full. Cohere2Attention rotates only when
  its layer has a window, so with `sliding_window` null no layer rotates.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, attention_kinds, decoder, gated_mlp, kind_stack, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

_SHARED = {"vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
           "num_attention_heads": 64, "max_position_embeddings": 8192, "layer_norm_eps": 1e-5,
           "tie_word_embeddings": True, "attention_bias": False, "logit_scale": 0.0625}

# transformers' config-class defaults (models/cohere*/configuration_cohere*.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "cohere": {**_SHARED, "use_qk_norm": False, "rope_theta": 500000.0},
    "cohere2": {**_SHARED, "sliding_window": 4096, "rope_theta": 10000.0},
}
# Cohere2Config's pattern when the config has no layer_types (it reads the pattern only then).
COHERE2_PATTERN = {"sliding_window_pattern": 4}
BLOCK_NAMES = {"sliding_attention": "sliding", "full_attention": "full"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    ln = norm("layernorm", cfg.float("layer_norm_eps"), bias=False, written_out=True)  # CohereLayerNorm
    head = {"tied": cfg.bool("tie_word_embeddings"), "logit_scale": cfg.float("logit_scale")}
    if model_type == "cohere":
        return uniform(cfg, model_type, _block(cfg, ln, _cohere_attention(cfg, ln)), ln, head["tied"], head=head)
    if not cfg.has("layer_types"):
        cfg = with_defaults(cfg, COHERE2_PATTERN)
    blocks, layers = kind_stack(_cohere2_kinds(cfg), BLOCK_NAMES, lambda kind: _cohere2_block(cfg, ln, kind))
    return decoder(cfg, model_type, blocks, layers, ln, head["tied"], head=head)


def _cohere2_kinds(cfg: Config) -> list[str]:
    """`layer_types`, else what Cohere2Config fills in: every `sliding_window_pattern`-th layer full."""
    if cfg.has("layer_types"):
        return attention_kinds(cfg, lambda i: "full_attention")
    period = cfg.int("sliding_window_pattern")
    if period < 1:
        raise cfg.error("sliding_window_pattern", f"expected a positive layer period, got {period}")
    return attention_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % period else "full_attention")


def _block(cfg: Config, ln: dict[str, Any], attn: dict[str, Any]) -> dict[str, Any]:
    return {"attention": attn, "mlp": gated_mlp(cfg, bias=False), "norm": ln, "norms": ("attn_in",), "parallel": True}


def _cohere_attention(cfg: Config, ln: dict[str, Any]) -> dict[str, Any]:
    attn = attention(cfg)
    attn["rope"]["interleaved"] = True  # CohereRotaryEmbedding: repeat_interleave, pairs of channels
    if cfg.bool("use_qk_norm"):
        attn["qk_norm"] = {"norm": ln, "scope": "full", "per_head": True}
    return attn


def _cohere2_block(cfg: Config, ln: dict[str, Any], kind: str) -> dict[str, Any]:
    attn = attention(cfg)
    window = cfg.int("sliding_window", default=None) if kind == "sliding_attention" else None
    attn["window"] = window
    if window is None:
        attn["rope"] = None  # Cohere2Attention rotates only the layers with a window
    else:
        attn["rope"]["interleaved"] = True
    return _block(cfg, ln, attn)
