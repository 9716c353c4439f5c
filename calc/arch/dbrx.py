"""DBRX (model_type dbrx): fused Q/K/V with clipping, LayerNorms without bias, fused experts.

Its config nests the attention's keys under `attn_config` and the MoE's under `ffn_config`; they are
read here as `attn_config.<key>` and `ffn_config.<key>`, so an error names the nested key. Each block
is pre-norm (norm_attn_norm.norm_1, norm_2: LayerNorms without bias), GQA attention with one bias-free
Wqkv (Q|K|V) whose output is clamped to ±`clip_qkv`, and a MoE of `moe_num_experts` SwiGLU experts
of `ffn_hidden_size`, each of w1 (gate), v1 (up) and w2 (down) one [E·f, d] matrix. The router
(bias-free) takes the softmax over all experts and the top `moe_top_k`, divided by their
`moe_normalize_expert_weights`-norm: the 1-norm (their sum) in the released models; null leaves them
as they are. The head is never tied (DbrxConfig refuses it). transformers 5 rotates with the top-level
rope_theta (10000 by default) and not with attn_config.rope_theta, and so does this count; a note says
so when they differ.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import ACTIVATIONS, mha, norm, rope, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

NESTED = ("attn_config", "ffn_config")
# transformers' DbrxConfig, DbrxAttentionConfig and DbrxFFNConfig defaults (models/dbrx/configuration_dbrx.py).
DEFAULTS = {"d_model": 2048, "n_heads": 16, "n_layers": 24, "max_seq_len": 2048, "vocab_size": 32000,
            "tie_word_embeddings": False, "rope_theta": 10000.0, "attn_config.kv_n_heads": 1,
            "ffn_config.ffn_hidden_size": 3584, "ffn_config.moe_num_experts": 4, "ffn_config.moe_top_k": 1,
            "ffn_config.moe_normalize_expert_weights": 1.0, "ffn_config.ffn_act_fn": {"name": "silu"},
            "attn_config.attn_pdrop": 0.0, "resid_pdrop": 0.0}
LAYERNORM_EPS = 1e-5  # nn.LayerNorm's default: DBRX's norms do not set one


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(_flattened(cfg), DEFAULTS)
    if cfg.bool("tie_word_embeddings"):
        raise cfg.error("tie_word_embeddings", "DBRX's head is never tied to the embedding (DbrxConfig refuses it)")
    layer_norm = norm("layernorm", LAYERNORM_EPS, bias=False)
    attn = mha(cfg, bias=False, n_kv_heads=cfg.int("attn_config.kv_n_heads"), fused_qkv=True,
               clip_qkv=cfg.float("attn_config.clip_qkv", default=None), dropout=cfg.float("attn_config.attn_pdrop"))
    attn["rope"] = rope(cfg, attn["head_dim"])
    # DbrxNormAttentionNorm and DbrxBlock: resid_pdrop on the attention's and the MoE's outputs; emb_pdrop is
    # stored by DbrxModel but never applied
    block = {"attention": attn, "mlp": _moe(cfg), "norm": layer_norm, "residual_dropout": cfg.float("resid_pdrop")}
    return uniform(cfg, "dbrx", block, layer_norm, tied=False, notes=_notes(cfg, attn["rope"]["theta"]))


def _flattened(cfg: Config) -> Config:
    """attn_config and ffn_config's keys beside the top-level ones, as `attn_config.<key>`."""
    data = {key: value for key, value in cfg.data.items() if key not in NESTED}
    for section in NESTED:
        data.update({f"{section}.{key}": value for key, value in cfg.dict(section).items()})
    return cfg.replace(data)


def _moe(cfg: Config) -> dict[str, Any]:
    """DbrxFFN: the router's top_k softmax weights, renormalised by their 1-norm or left as they are."""
    p = cfg.float("ffn_config.moe_normalize_expert_weights", default=None)
    if p not in (None, 1.0):
        raise cfg.error("ffn_config.moe_normalize_expert_weights",
                        f"{p:g}: only 1 (weights divided by their sum, as released) or null is supported")
    act = cfg.dict("ffn_config.ffn_act_fn").get("name", "silu")
    if act not in ACTIVATIONS:
        raise cfg.error("ffn_config.ffn_act_fn", f"activation {act!r} is not one of {', '.join(ACTIVATIONS)}")
    return {"kind": "moe", "n_experts": cfg.int("ffn_config.moe_num_experts"), "top_k": cfg.int("ffn_config.moe_top_k"),
            "d_ff": cfg.int("ffn_config.ffn_hidden_size"), "gated": True, "activation": ACTIVATIONS[act],
            "norm_topk": p is not None}


def _notes(cfg: Config, theta: float) -> tuple[str, ...]:
    nested = cfg.float("attn_config.rope_theta", default=None)
    if nested is None or nested == theta:
        return ()
    return (f"attn_config.rope_theta {nested:g} is not what transformers 5 rotates with (it reads rope_theta, "
            f"here {theta:g}); counts do not depend on it",)
