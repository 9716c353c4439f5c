"""OPT (model_type opt): learned positions with two extra rows, and two odd variants.

A learned position table of max_position_embeddings + 2 rows (OPT offsets positions by 2), ReLU
MLP (fc1, fc2: ffn_dim), Q/K/V/out and the MLP with biases unless `enable_bias` is false, LayerNorms
with scale and bias unless `layer_norm_elementwise_affine` is false (eps fixed at 1e-5), head tied.
OPT-350m differs twice:
- `do_layer_norm_before` false: post-LN, each norm after its residual add (self_attn_layer_norm,
  final_layer_norm per layer), and no final norm (nor with `_remove_final_layer_norm`);
- `word_embed_proj_dim` (512) narrower than hidden_size (1,024): the token embedding and the head
  are that wide, with bias-free project_in and project_out between them and the model width.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, NO_LLAMACPP, mha, mlp_activation, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' OPTConfig defaults (models/opt/configuration_opt.py) for the keys read here.
DEFAULTS = {"vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072,
            "max_position_embeddings": 2048, "do_layer_norm_before": True, "_remove_final_layer_norm": False,
            "num_attention_heads": 12, "activation_function": "relu", "enable_bias": True,
            "layer_norm_elementwise_affine": True, "tie_word_embeddings": True, "dropout": 0.1,
            "attention_dropout": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    affine = cfg.bool("layer_norm_elementwise_affine")
    ln = norm("layernorm", 1e-5, weight=affine, bias=affine)
    bias = cfg.bool("enable_bias")
    mlp = {"d_ff": cfg.int("ffn_dim"), **mlp_activation(cfg, "activation_function"), "bias": bias}
    pre_norm = cfg.bool("do_layer_norm_before")
    # OPTDecoderLayer: `dropout` on the attention's and fc2's outputs before each add, `attention_dropout` on P
    block = {"attention": mha(cfg, bias, dropout=cfg.float("attention_dropout")), "mlp": mlp, "norm": ln,
             "post_ln": not pre_norm, "residual_dropout": cfg.float("dropout")}
    final = ln if pre_norm and not cfg.bool("_remove_final_layer_norm") else None
    return uniform(cfg, "opt", block, final, cfg.bool("tie_word_embeddings"), embedding=_embedding(cfg), **NO_LLAMACPP)


def _embedding(cfg: Config) -> dict[str, Any]:
    """Learned positions offset by 2; word embeddings projected when word_embed_proj_dim is not d_model."""
    width = cfg.int("word_embed_proj_dim", default=None)
    proj = width if width not in (None, cfg.int(*KEYS["d_model"])) else None
    return {"positions": "learned", "position_offset": 2, "proj_dim": proj}
