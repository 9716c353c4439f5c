"""GPT-2 (GPT2LMHeadModel): learned positions, pre-norm LayerNorm blocks, a fused Q|K|V `c_attn`,
a GELU MLP (`activation_function`, gelu_new by default and in openai-community/gpt2's config.json: the tanh
approximation written out in python ops, which training keeps more of) with biases everywhere, head tied to `wte`; dropout
(`attn_pdrop` on P, `resid_pdrop` on each sublayer's output, `embd_pdrop` on the embeddings: 0.1 each)
changes only what training keeps."""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, mha, mlp_activation, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' GPT2Config defaults (models/gpt2/configuration_gpt2.py) for the keys read here: GPT-2 small.
DEFAULTS = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "activation_function": "gelu_new",
            "attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_epsilon", default=1e-5))
    d_ff = cfg.int("n_inner", default=None) or 4 * cfg.int(*KEYS["d_model"])
    mlp = {"d_ff": d_ff, **mlp_activation(cfg, "activation_function"), "bias": True}  # GPT2MLP: ACT2FN
    # GPT2Attention's eager softmax runs in the logits' dtype (softmax(attn_weights, dim=-1), no dtype)
    attention = {**mha(cfg, True, fused_qkv=True), "dropout": cfg.float("attn_pdrop"), "softmax_fp32": False}
    block = {"attention": attention, "mlp": mlp, "norm": ln, "residual_dropout": cfg.float("resid_pdrop")}
    return uniform(cfg, "gpt2", block, ln, cfg.bool("tie_word_embeddings"),
                   embedding={"positions": "learned", "dropout": cfg.float("embd_pdrop")}, llamacpp={"ff_4d": True})
