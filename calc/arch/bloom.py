"""BLOOM (model_type bloom): ALiBi, and a LayerNorm right after the token embedding.

No position table: ALiBi biases attention scores by distance. The embedding is followed by
word_embeddings_layernorm; blocks are pre-norm LayerNorm (with bias) around a fused
query_key_value and dense with biases and a 4·d GELU MLP with biases (BloomMLP hard-codes the
width); final LayerNorm; head tied unless `tie_word_embeddings` is false. Older configs spell
hidden_size `n_embed` (BloomConfig takes that one over hidden_size). BloomConfig has no context
length: configs that give one say `seq_length`; without it we take BLOOM's training length, 2,048.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import mha, norm, renamed, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' BloomConfig defaults (models/bloom/configuration_bloom.py) for the keys read here.
DEFAULTS = {"vocab_size": 250880, "hidden_size": 64, "n_layer": 2, "n_head": 8, "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True, "attention_dropout": 0.0, "hidden_dropout": 0.0}
# BLOOM's training length: "Sequence length of 2048 tokens" (bloom-560m's model card,
# https://huggingface.co/bigscience/bloom-560m, mirrored at
# https://github.com/ZHUI/paddlenlp_model_readme/blob/40a7101e89dcf9a0dedb0e0d48c8c357fcc95996/bigscience/bloom-560m/index.md#L341).
TRAINING_LENGTH = 2048


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(renamed(cfg, {"n_embed": "hidden_size"}), {**DEFAULTS, "seq_length": TRAINING_LENGTH})
    ln = norm("layernorm", cfg.float("layer_norm_epsilon"))
    attn = mha(cfg, True, fused_qkv=True, alibi=True, dropout=cfg.float("attention_dropout"))
    mlp = {"d_ff": 4 * cfg.int("hidden_size"), "activation": "gelu_tanh", "bias": True}
    # BloomAttention and BloomMLP: dropout_add(output, residual, hidden_dropout); the embeddings have none
    block = {"attention": attn, "mlp": mlp, "norm": ln, "residual_dropout": cfg.float("hidden_dropout")}
    return uniform(cfg, "bloom", block, ln, cfg.bool("tie_word_embeddings"), embedding={"norm": ln})
