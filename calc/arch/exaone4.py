"""EXAONE 4.0 (model_type exaone4): OLMo-2's norm placement, Qwen-3's QK-norm, hybrid attention.

Exaone4DecoderLayer normalises outputs, not inputs: an RMSNorm on attention's and the MLP's outputs
before each residual add (post_attention_layernorm, post_feedforward_layernorm). Attention is GQA
without biases, with a head_dim-wide RMSNorm on queries and one on keys (q_norm, k_norm). Layers
are local (sliding window, rotary) or global (full attention and, when the model has a window at
all, no rotary: "global NoPE"), as `layer_types` says or, without it, every `sliding_window_pattern`-th
layer global. The MLP is SwiGLU without biases; the head is untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, attention_kinds, decoder, gated_mlp, kind_stack, norm, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Exaone4Config defaults (models/exaone4/configuration_exaone4.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "exaone4": {"vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 2048,
                "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": 4096,
                "sliding_window_pattern": 4, "rope_theta": 10000.0},
}
BLOCK_NAMES = {"sliding_attention": "local", "full_attention": "global"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS["exaone4"])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    window = cfg.int("sliding_window", default=None)
    blocks, layers = kind_stack(_kinds(cfg, window), BLOCK_NAMES, lambda kind: _block(cfg, rms, kind, window))
    return decoder(cfg, "exaone4", blocks, layers, rms, cfg.bool("tie_word_embeddings"))


def _kinds(cfg: Config, window: int | None) -> list[str]:
    """`layer_types`, else what Exaone4Config fills in: no window, every layer global; else every
    `sliding_window_pattern`-th layer global. A string pattern ("LLLG") it cannot expand without
    `layer_types` (it raises a TypeError), so neither do we."""
    if window is None or cfg.has("layer_types"):
        return attention_kinds(cfg, lambda i: "full_attention")
    pattern = cfg.raw("sliding_window_pattern")
    if isinstance(pattern, str):
        raise cfg.error("sliding_window_pattern", f"{pattern!r} needs layer_types beside it "
                        "(transformers' Exaone4Config cannot expand a string pattern)")
    period = cfg.int("sliding_window_pattern")
    return attention_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % period else "full_attention")


def _block(cfg: Config, rms: dict[str, Any], kind: str, window: int | None) -> dict[str, Any]:
    attn = attention(cfg, q_bias=False, k_bias=False, v_bias=False, o_bias=False,
                     qk_norm={"norm": rms, "scope": "head"})
    if kind == "sliding_attention":
        attn["window"] = window
    elif window is not None:
        attn["rope"] = None  # global NoPE: Exaone4Attention rotates only local layers of a hybrid model
    return {"attention": attn, "mlp": gated_mlp(cfg, bias=False), "norm": rms, "norms": ("attn_out", "mlp_out")}
