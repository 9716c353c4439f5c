"""GPT-J (model_type gptj): a parallel block with one shared norm.

Attention and the MLP both read the output of the block's single LayerNorm (ln_1) and are added
to the residual together. q/k/v/out_proj have no bias; the MLP (fc_in, fc_out: n_inner, default
4·d) has. Rotary acts on the first `rotary_dim` channels of each head (64 of 256 in GPT-J-6B; the
whole head when null). The head is untied unless `tie_word_embeddings`, and has a bias either way.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, NO_LLAMACPP, mha, mlp_activation, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' GPTJConfig defaults (models/gptj/configuration_gptj.py) for the keys read here.
DEFAULTS = {"vocab_size": 50400, "n_positions": 2048, "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False,
            "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_epsilon"))
    attn = mha(cfg, False, dropout=cfg.float("attn_pdrop"))
    attn["rope"] = {"theta": 10000.0, "rotary_dim": cfg.int("rotary_dim", default=None) or attn["head_dim"],
                    "interleaved": True, "tables_per_call": 2}  # apply_rotary_pos_emb re-lays them for K, then Q
    attn["qk_fp32"] = True  # eager_attention_forward (modeling_gptj.py): QKᵀ on query.to(float32), key.to(float32)
    d_ff = cfg.int("n_inner", default=None) or 4 * cfg.int(*KEYS["d_model"])
    mlp = {"d_ff": d_ff, **mlp_activation(cfg, "activation_function"), "bias": True}
    # GPTJAttention and GPTJMLP drop out their outputs (resid_pdrop); GPTJModel its embeddings (embd_pdrop)
    block = {"attention": attn, "mlp": mlp, "norm": ln, "norms": ("attn_in",), "parallel": True,
             "residual_dropout": cfg.float("resid_pdrop")}
    spec = uniform(cfg, "gptj", block, ln, cfg.bool("tie_word_embeddings"),
                   embedding={"dropout": cfg.float("embd_pdrop")}, **NO_LLAMACPP)
    return {**spec, "head": {**spec["head"], "bias": True}}
