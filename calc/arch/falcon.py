"""Falcon (model_type falcon): two generations under one model_type.

- Falcon-7B/1B (`new_decoder_architecture` false): `parallel_attn` blocks with one shared
  LayerNorm (input_layernorm); `multi_query` gives one K/V head for all query heads (the fused
  query_key_value is d x (d + 2·head_dim)), otherwise every head has its own (whatever
  `num_kv_heads` says: the fused tensor is then d x 3d).
- Falcon-40B/180B (`new_decoder_architecture`): GQA with `num_kv_heads` groups, and two norms in
  parallel, ln_attn and ln_mlp (`num_ln_in_parallel_attn`, 2 unless it says 1).
Without `parallel_attn` a block is sequential with input_layernorm and post_attention_layernorm.
`bias` puts biases on query_key_value, dense and the MLP (ffn_hidden_size, default 4·d); LayerNorms
have biases. Rotary on the whole head, or ALiBi with `alibi`. Head tied unless
`tie_word_embeddings` is false. Older configs spell hidden_size `n_embed`. The pre-transformers
model_types "RefinedWebModel" and "RefinedWeb" are not read: transformers 5 no longer maps them.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, mha, mlp_activation, norm, renamed, rope, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' FalconConfig defaults (models/falcon/configuration_falcon.py) for the keys read here.
DEFAULTS = {"vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
            "layer_norm_epsilon": 1e-5, "alibi": False, "new_decoder_architecture": False, "multi_query": True,
            "parallel_attn": True, "bias": False, "max_position_embeddings": 2048, "activation": "gelu",
            "tie_word_embeddings": True, "attention_dropout": 0.0, "hidden_dropout": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(renamed(cfg, {"n_embed": "hidden_size"}), DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_epsilon"))
    d = cfg.int(*KEYS["d_model"])
    mlp = {"d_ff": cfg.int("ffn_hidden_size", default=None) or 4 * d, **mlp_activation(cfg, "activation"),
           "bias": cfg.bool("bias")}
    block = {"attention": _attention(cfg), "mlp": mlp, "norm": ln, **_norms(cfg), **_dropout(cfg)}
    # llama.cpp's falcon graph norms every token for the MLP where a parallel layer has two norms (llamacpp.mlp_norm_rows)
    return uniform(cfg, "falcon", block, ln, cfg.bool("tie_word_embeddings"),
                   llamacpp={"mlp_norm_rows": bool(block.get("parallel")) and len(block["norms"]) == 2, "ff_4d": True,
                             "quant_falcon": True})


def _summed(cfg: Config) -> bool:
    """FalconDecoderLayer adds the attention's output to the MLP's (mlp_output += attention_output)."""
    return cfg.bool("new_decoder_architecture") or cfg.bool("parallel_attn")


def _dropout(cfg: Config) -> dict[str, Any]:
    """FalconDecoderLayer's dropout_add(mlp_output, residual, hidden_dropout): on the MLP's output, which
    holds the attention's too where the two are summed (one mask either way); a sequential block first
    adds the attention's output through dropout_add(attention_output, residual, attention_dropout)."""
    mixer = 0.0 if _summed(cfg) else cfg.float("attention_dropout")
    return {"residual_dropout": cfg.float("hidden_dropout"), "residual_dropout_on": "mlp", "mixer_dropout": mixer}


def _attention(cfg: Config) -> dict[str, Any]:
    """FalconAttention's K/V heads: num_kv_heads (default all) in the new architecture, else 1 with multi_query."""
    # both of FalconAttention's eager softmaxes take dtype=hidden_states.dtype (the alibi path's fp32 logits cast back)
    attn = mha(cfg, cfg.bool("bias"), fused_qkv=True, softmax_fp32=False)
    if cfg.bool("new_decoder_architecture"):
        attn["n_kv_heads"] = cfg.int("num_kv_heads", default=attn["n_heads"])
    elif cfg.bool("multi_query"):
        attn["n_kv_heads"] = 1
    # _split_heads picks K and V with [-2] and [-1] in both (modeling_falcon.py); per head by int indices otherwise
    attn["kv_list_index"] = cfg.bool("new_decoder_architecture") or cfg.bool("multi_query")
    if cfg.bool("alibi"):  # P's dropout only here: FalconAttention's rotary path passes dropout_p=0.0
        return {**attn, "alibi": True, "dropout": cfg.float("attention_dropout")}
    return {**attn, "rope": rope(cfg, attn["head_dim"])}


def _norms(cfg: Config) -> dict[str, Any]:
    """FalconDecoderLayer's norms: two sequential, or in parallel one (input_layernorm) or two
    (ln_attn, ln_mlp: num_ln_in_parallel_attn, which the new architecture sets to 2 when absent)."""
    if not cfg.bool("parallel_attn"):
        return {"norms": ("attn_in", "mlp_in")}
    two = cfg.int("num_ln_in_parallel_attn", default=2 if cfg.bool("new_decoder_architecture") else 1) == 2
    return {"norms": ("attn_in", "mlp_in") if two else ("attn_in",), "parallel": True}
