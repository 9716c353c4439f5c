"""Builders the mixture-of-experts adapters share (mixtral, qwen_moe, deepseek, glm4_moe, gpt_oss).

Every MoE in transformers 5 stores its routed experts as two fused tensors per layer
(`experts.gate_up_proj` [E, 2f, d] and `experts.down_proj` [E, d, f]), routes each token to
`num_experts_per_tok` of them, and has a bias-free router unless the model says otherwise. DeepSeek
and GLM-4.5 add shared experts, a score-correction buffer on the router, dense layers below the
first MoE layer and multi-token-prediction layers that only the checkpoint holds.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, gated_mlp, layer_runs
from calc.arch.config import Config

__all__ = ["MLP_LAYER_TYPES", "deepseek_moe", "dense_then_moe", "experts", "grouped_sigmoid", "mlp_layer_types",
           "mlp_typed_stack", "mtp"]


def experts(cfg: Config, n_experts_keys: tuple[str, ...], d_ff_key: str,
            top_k_keys: tuple[str, ...] = ("num_experts_per_tok",), **changes: Any) -> dict[str, Any]:
    """A MoE part: routed SwiGLU experts (fused gate_up), top `num_experts_per_tok` (or what
    `top_k_keys` name: ERNIE's moe_k, Hunyuan's moe_topk), no biases."""
    return {"kind": "moe", "n_experts": cfg.int(*n_experts_keys), "top_k": cfg.int(*top_k_keys),
            "d_ff": cfg.int(d_ff_key), "gated": True, "activation": "silu", "fused_gate_up": True, **changes}


def deepseek_moe(cfg: Config, score_bias: bool, bias: bool = False, **routing: Any) -> dict[str, Any]:
    """DeepSeek's MoE (also GLM-4.5's): `n_routed_experts` experts of `moe_intermediate_size` and one
    shared SwiGLU MLP `n_shared_experts` times as wide (DeepseekV3MoE.shared_experts), `bias` on it
    only (DeepSeek-V2's mlp_bias); `score_bias`: the router's e_score_correction_bias buffer; `routing`:
    how the router weighs experts (the MoE part's scoring, norm_topk, n_group, ... fields)."""
    n_shared = cfg.int("n_shared_experts")
    shared = gated_mlp(cfg, "moe_intermediate_size", bias=bias)
    shared["d_ff"] *= n_shared
    return experts(cfg, ("n_routed_experts",), "moe_intermediate_size", score_bias=score_bias,
                   shared=shared, n_shared=n_shared, **routing)


def grouped_sigmoid(cfg: Config) -> dict[str, Any]:
    """DeepseekV3TopkRouter (also GLM-4.5's): sigmoid scores, n_group groups scored by their best two
    experts, the best topk_group groups kept, weights renormalised if norm_topk_prob, then scaled."""
    return {"scoring": "sigmoid", "norm_topk": cfg.bool("norm_topk_prob"), "n_group": cfg.int("n_group"),
            "topk_group": cfg.int("topk_group"), "group_score": "top2_sum",
            "routed_scale": cfg.float("routed_scaling_factor")}


def dense_then_moe(cfg: Config, blocks: dict[str, dict[str, Any]], mtp: dict[str, Any] | None) -> dict[str, Any]:
    """ModelSpec's blocks, layers and mtp: `first_k_dense_replace` layers of blocks["dense"], then
    blocks["moe"] to the top (DeepseekV3DecoderLayer, Glm4MoeDecoderLayer: a MoE where
    `layer_idx >= config.first_k_dense_replace`), keeping the blocks a layer or the MTP uses."""
    n_layers = cfg.int(*KEYS["n_layers"])
    dense = max(0, min(cfg.int("first_k_dense_replace"), n_layers))
    return _stack(["dense"] * dense + ["moe"] * (n_layers - dense), blocks, mtp)


def _stack(names: list[str], blocks: dict[str, dict[str, Any]], mtp: dict[str, Any] | None) -> dict[str, Any]:
    """Each layer's block name as run-length layers, keeping the blocks a layer or the MTP uses."""
    used = set(names) | ({mtp["block"]} if mtp else set())
    return {"blocks": {name: block for name, block in blocks.items() if name in used}, "layers": layer_runs(names),
            "mtp": mtp}


# `mlp_layer_types` names (Glm4MoeLiteConfig) -> the block names dense_then_moe uses.
MLP_LAYER_TYPES = {"dense": "dense", "sparse": "moe"}


def mlp_typed_stack(cfg: Config, blocks: dict[str, dict[str, Any]], mtp: dict[str, Any] | None) -> dict[str, Any]:
    """ModelSpec's blocks, layers and mtp when `mlp_layer_types` says which layers are dense and which
    MoE ("dense" / "sparse"; Glm4MoeLiteConfig fills one dense layer, then sparse ones, when it is left out)."""
    return _stack([MLP_LAYER_TYPES[kind] for kind in mlp_layer_types(cfg)], blocks, mtp)


def mlp_layer_types(cfg: Config, dense: int = 1) -> list[str]:
    """Each layer's `mlp_layer_types` entry, "dense" or "sparse" (left out: `dense` dense layers, then sparse;
    Kimi Linear's config class reads first_k_dense_replace there, GLM-4.7-Flash's has one)."""
    n_layers = cfg.int(*KEYS["n_layers"])
    kinds = cfg.list("mlp_layer_types")
    if kinds is None:
        dense = max(0, min(dense, n_layers))
        return ["dense"] * dense + ["sparse"] * (n_layers - dense)
    if len(kinds) != n_layers or any(kind not in MLP_LAYER_TYPES for kind in kinds):
        raise cfg.error("mlp_layer_types", f"expected {n_layers} of {', '.join(MLP_LAYER_TYPES)} (one per layer), "
                                           f"got {kinds!r}")
    return kinds


def mtp(cfg: Config) -> dict[str, Any] | None:
    """`num_nextn_predict_layers` multi-token-prediction layers, each a MoE block (it sits above the
    last layer), or None. transformers' config defaults the count to 1 (num_mtp_layers)."""
    n_layers = cfg.int("num_nextn_predict_layers")
    return {"n_layers": n_layers, "block": "moe"} if n_layers else None
