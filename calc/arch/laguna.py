"""Laguna (model_type laguna, poolside's Laguna XS), as transformers' LagunaForCausalLM builds it.

Pre-norm RMSNorm blocks. Attention is GQA with `head_dim` (128) heads, a per-head RMSNorm on queries
and keys, `attention_bias` on Q, K, V and O, and a softplus gate on the heads' output before W_O
(`g_proj`, d_model -> one value per head with `gating` true or "per-head", one per channel otherwise).
Each layer has its own query-head count (`num_attention_heads_per_layer`, default
`num_attention_heads` everywhere) and attention type (`layer_types`, default all full; a sliding
layer sees `sliding_window` keys), and each layer type its own `rope_parameters` (default theta
500,000 on half of each head for full layers, 10,000 on all of it for sliding ones; a type's entry
without partial_rotary_factor rotates the whole head). `mlp_layer_types` (default one dense layer,
then sparse) picks a dense SwiGLU of `intermediate_size` or a MoE: `num_experts` SwiGLU experts of
`moe_intermediate_size`, a shared one of `shared_expert_intermediate_size`, a router whose logits are
soft-capped by `moe_router_logit_softcapping` (when > 0), scored by a sigmoid, chosen after adding
e_score_correction_bias (a frozen parameter, so counted as ERNIE-4.5's, unlike DeepSeek-V3's buffer), the top
`num_experts_per_tok` renormalised and scaled by `moe_routed_scaling_factor`. Head untied by default.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, attention, attention_kinds, decoder, gated_mlp, kind_stack, norm, rope, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import MLP_LAYER_TYPES, experts, mlp_layer_types

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' LagunaConfig defaults (models/laguna/configuration_laguna.py) for the keys read here.
DEFAULTS = {"vocab_size": 100352, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 40,
            "num_attention_heads": 48, "num_key_value_heads": 8, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "sliding_window": 512, "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8, "num_experts": 256, "head_dim": 128,
            "attention_bias": False, "gating": True, "moe_routed_scaling_factor": 1.0,
            "moe_router_logit_softcapping": 0.0}
# LagunaConfig.__post_init__'s rope_parameters when the config has none (top-level rope keys are not read).
ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}
GATING = {True: "head", "per-head": "head", False: "element", "per-element": "element"}  # gate_scope
SHORT = {"full_attention": "full", "sliding_attention": "sliding", "dense": "dense", "sparse": "moe"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    cfg = cfg.replace({k: v for k, v in cfg.data.items() if k not in ("rope_theta", "partial_rotary_factor", "rope_scaling")}
                      | {"rope_parameters": _rope_parameters(cfg)})
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    heads = _heads_per_layer(cfg)
    kinds = [f"{a} {h} {m}" for a, h, m in zip(attention_kinds(cfg, lambda i: "full_attention"), heads,
                                                mlp_layer_types(cfg))]
    varied = len(set(heads)) > 1
    names = {kind: _name(kind, varied) for kind in kinds}
    blocks, layers = kind_stack(kinds, names, lambda kind: _block(cfg, kind.split(), rms))
    return decoder(cfg, "laguna", blocks, layers, rms, cfg.bool("tie_word_embeddings"))


def _name(kind: str, varied: bool) -> str:
    attn, heads, mlp = kind.split()
    return f"{SHORT[attn]}{f'_{heads}h' if varied else ''}_{SHORT[mlp]}"


def _rope_parameters(cfg: Config) -> dict[str, Any]:
    """One rotary mapping per layer type, each rotating all of a head unless it says otherwise."""
    nested = cfg.dict("rope_parameters") or ROPE
    if not all(isinstance(nested.get(kind), dict) for kind in ROPE):
        raise cfg.error("rope_parameters", f"expected a mapping for each of {', '.join(ROPE)} (one per layer type)")
    return {kind: {"partial_rotary_factor": 1.0, **entry} if isinstance(entry, dict) else entry
            for kind, entry in nested.items()}


def _heads_per_layer(cfg: Config) -> list[int]:
    n_layers, heads = cfg.int(*KEYS["n_layers"]), cfg.list("num_attention_heads_per_layer")
    if heads is None:
        return [cfg.int("num_attention_heads")] * n_layers
    if len(heads) != n_layers or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in heads):
        raise cfg.error("num_attention_heads_per_layer", f"expected {n_layers} positive head counts, got {heads!r}")
    return heads


def _block(cfg: Config, kind: list[str], rms: dict[str, Any]) -> dict[str, Any]:
    attn_type, heads, mlp = kind[0], int(kind[1]), kind[2]
    gating = cfg.raw("gating")
    if gating not in GATING:
        raise cfg.error("gating", f"expected true, false, 'per-head' or 'per-element', got {gating!r}")
    head_dim = cfg.int("head_dim")
    attn = attention(cfg, n_heads=heads, qk_norm={"norm": rms, "scope": "head"}, output_gate=True,
                     gate_activation="softplus", gate_scope=GATING[gating],
                     window=cfg.int("sliding_window") if attn_type == "sliding_attention" else None,
                     rope=rope(cfg, head_dim, layer_type=attn_type))
    if MLP_LAYER_TYPES[mlp] == "dense":
        return {"attention": attn, "mlp": gated_mlp(cfg, bias=False), "norm": rms}
    softcap = cfg.float("moe_router_logit_softcapping")
    moe = experts(cfg, ("num_experts",), "moe_intermediate_size", score_bias=True, score_bias_param=True,
                  scoring="sigmoid", norm_topk=True, routed_scale=cfg.float("moe_routed_scaling_factor"),
                  router_softcap=softcap if softcap > 0 else None, n_shared=1,
                  shared=gated_mlp(cfg, "shared_expert_intermediate_size", bias=False))
    return {"attention": attn, "mlp": moe, "norm": rms}
