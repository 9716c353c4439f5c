"""Hunyuan-A13B (model_type hunyuan_v1_moe).

Llama's pre-norm RMSNorm block and attention (`attention_bias` on Q, K, V and O) with a head_dim-wide
RMSNorm on queries and keys applied after rotary (query_layernorm, key_layernorm). Every layer is a
MoE: `num_experts` SwiGLU experts behind a bias-free softmax router (gate.wg), the top `moe_topk`
weights renormalised, plus one always-on shared SwiGLU (shared_mlp). transformers builds the routed
experts and the shared MLP all `intermediate_size` wide, whatever the released configs'
moe_intermediate_size and num_shared_expert lists say, and reads `moe_topk` per layer when it is a
list. Rotary "dynamic" scaling with an `alpha` is NTK-alpha: a fixed base of
rope_theta · alpha^(head_dim / (head_dim - 2)) (HunYuanMoEV1RotaryEmbedding), so it is written as
that theta. Head untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, TRANSFORMERS_BACKEND, attention, decoder, gated_mlp, layer_runs, norm, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' HunYuanMoEV1Config defaults (models/hunyuan_v1_moe/configuration_hunyuan_v1_moe.py), keys read here.
DEFAULTS = {"vocab_size": 290943, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False, "attention_bias": False, "num_experts": 1, "moe_topk": 1,
            "rope_theta": 10000.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    # attribute_map: num_experts_per_tok and num_local_experts stand for moe_topk and num_experts
    cfg = with_defaults(cfg, DEFAULTS)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    attn = _ntk_alpha(attention(cfg, qk_norm={"norm": rms, "scope": "head", "after_rope": True}))
    top_ks = _top_ks(cfg)
    names = {k: "moe" if len(set(top_ks)) == 1 else f"moe_top{k}" for k in top_ks}
    blocks = {names[k]: {"attention": attn, "mlp": _moe(cfg.replace({**cfg.data, "moe_topk": k})), "norm": rms}
              for k in dict.fromkeys(top_ks)}
    # vLLM 0.32: HunYuanMoEV1ForCausalLM through the Transformers backend (vllm/model_executor/models/registry.py L718)
    return decoder(cfg, "hunyuan_v1_moe", blocks, layer_runs([names[k] for k in top_ks]), rms,
                   cfg.bool("tie_word_embeddings"), **TRANSFORMERS_BACKEND)


def _moe(cfg: Config) -> dict[str, Any]:
    """HunYuanMoEV1Moe: routed experts and the shared MLP, all intermediate_size wide."""
    moe = experts(cfg, ("num_experts",), "intermediate_size", top_k_keys=("moe_topk",))
    return {**moe, "shared": gated_mlp(cfg, bias=False), "n_shared": 1}


def _top_ks(cfg: Config) -> list[int]:
    """Each layer's top_k: `moe_topk`, one for all layers or a list of one per layer (HunYuanMoEV1Gate)."""
    n_layers, value = cfg.int(*KEYS["n_layers"]), cfg.raw("moe_topk")
    if not isinstance(value, list):
        return [cfg.int("moe_topk")] * n_layers
    if len(value) != n_layers or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in value):
        raise cfg.error("moe_topk", f"expected {n_layers} positive integers (one per layer), got {value!r}")
    return value


def _ntk_alpha(attn: dict[str, Any]) -> dict[str, Any]:
    """"dynamic" scaling with an alpha (the released configs' NTK-alpha) as the fixed theta it amounts to."""
    rope = attn["rope"]
    scaling = rope["scaling"] or {}
    if scaling.get("rope_type", scaling.get("type")) != "dynamic" or not scaling.get("alpha"):
        return attn
    dim = attn["head_dim"]
    return {**attn, "rope": {**rope, "theta": rope["theta"] * scaling["alpha"] ** (dim / (dim - 2)), "scaling": None}}
