"""Arcee's AFMoE (model_type afmoe): Trinity.

Sandwich-normed RMSNorm blocks (input_layernorm, post_attention_layernorm, pre_mlp_layernorm,
post_mlp_layernorm). Attention is GQA (`attention_bias` on Q, K, V and O) with a head_dim-wide RMSNorm
on queries and keys and an output gate: the heads' output times sigmoid(x·W_G) (gate_proj, d -> h·hd,
no bias) before W_O. Layers are local (sliding window, rotary) or global (full attention, no rotary),
as `layer_types` says or, without it, every `global_attn_every_n_layers`-th layer global. The first
`num_dense_layers` layers have a dense SwiGLU of `intermediate_size`; the rest a MoE of `num_experts`
experts of `moe_intermediate_size` and a shared SwiGLU `num_shared_experts` times as wide, behind a
sigmoid router (router.gate) whose expert_bias shifts the choice; the top_k sigmoid scores are
renormalised and scaled by `route_scale`. transformers keeps expert_bias as an nn.Parameter without
gradient, so parameters() counts it, and so does gptcalc. With `mup_enabled` the embeddings are
multiplied by sqrt(hidden_size). Head untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

import math
from typing import Any

from calc.arch.common import KEYS, attention, attention_kinds, decoder, gated_mlp, layer_runs, norm, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' AfmoeConfig defaults (models/afmoe/configuration_afmoe.py) for the keys read here.
DEFAULTS = {"vocab_size": 200192, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 1408,
            "num_hidden_layers": 32, "num_dense_layers": 1, "num_attention_heads": 16, "head_dim": 128,
            "max_position_embeddings": 16384, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
            "num_experts": 64, "num_experts_per_tok": 6, "num_shared_experts": 2, "route_scale": 1.0,
            "global_attn_every_n_layers": 4, "sliding_window": 1024, "mup_enabled": False, "attention_bias": False,
            "rope_theta": 10000.0}
BLOCK_NAMES = {"sliding_attention": "local", "full_attention": "global"}
SANDWICH = ("attn_in", "attn_out", "mlp_in", "mlp_out")


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    period, dense = cfg.int("global_attn_every_n_layers"), cfg.int("num_dense_layers")
    attn_kinds = attention_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % period else "full_attention")
    kinds = [(kind, "dense" if i < dense else "moe") for i, kind in enumerate(attn_kinds)]
    names = {kind: f"{BLOCK_NAMES[kind[0]]}_{kind[1]}" for kind in kinds}
    blocks = {names[kind]: _block(cfg, rms, *kind) for kind in dict.fromkeys(kinds)}
    spec = decoder(cfg, "afmoe", blocks, layer_runs([names[kind] for kind in kinds]), rms,
                   cfg.bool("tie_word_embeddings"))
    if cfg.bool("mup_enabled"):
        spec["embedding"] = {"multiplier": math.sqrt(cfg.int(*KEYS["d_model"]))}
    return spec


def _block(cfg: Config, rms: dict[str, Any], attn_kind: str, mlp_kind: str) -> dict[str, Any]:
    """AfmoeDecoderLayer: gated attention (rotary and a window on local layers only), a dense MLP or the MoE."""
    attn = attention(cfg, qk_norm={"norm": rms, "scope": "head"}, output_gate=True)
    if attn_kind == "sliding_attention":
        attn["window"] = cfg.int("sliding_window")
    else:
        attn["rope"] = None  # AfmoeAttention rotates only its local layers
    mlp = gated_mlp(cfg, bias=False) if mlp_kind == "dense" else _moe(cfg)
    return {"attention": attn, "mlp": mlp, "norm": rms, "norms": SANDWICH}


def _moe(cfg: Config) -> dict[str, Any]:
    """AfmoeSparseMoeBlock: the router, expert_bias (a parameter), routed and shared experts."""
    moe = experts(cfg, ("num_experts",), "moe_intermediate_size", scoring="sigmoid", score_bias=True,
                  score_bias_param=True, routed_scale=cfg.float("route_scale"))
    n_shared = cfg.int("num_shared_experts")
    if n_shared:
        shared = gated_mlp(cfg, "moe_intermediate_size", bias=False)
        moe.update(shared={**shared, "d_ff": shared["d_ff"] * n_shared}, n_shared=n_shared)
    return moe
