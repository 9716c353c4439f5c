"""MiMo-V2-Flash (model_type mimo_v2_flash), as transformers' MiMoV2FlashForCausalLM builds it.

Pre-norm RMSNorm blocks. Attention is GQA with 192-wide query and key heads but 128-wide value heads
(`head_dim`, `v_head_dim`), values times `attention_value_scale` (0.707) before they are cached,
`attention_bias` on Q, K and V, never on O. `layer_types` (default: full attention on the first and
every sixth layer, sliding-window on the rest) decide each layer's attention: a sliding layer has
twice `num_key_value_heads`, a learned sink logit per head and a window of `sliding_window` keys
(`sliding_window_size` + 1 when that key is given, as SGLang's reference attends to that many
previous tokens plus the query); a full layer has neither. Rotary acts on int(head_dim x 0.334) = 64
channels by halves, each layer type with its own `rope_parameters` (default theta 5,000,000 full,
10,000 sliding). `mlp_layer_types` (default one dense layer, then sparse) picks a dense SwiGLU of
`intermediate_size` or a MoE of `n_routed_experts` experts of `moe_intermediate_size` without shared
experts, routed as DeepSeek-V3 (sigmoid, e_score_correction_bias buffer, grouped top-k,
`routed_scaling_factor`, which the Hub's config.json sets to null, meaning 1.0). Head untied.

The Hub's config.json also carries keys transformers does not read (hybrid_layer_pattern,
moe_layer_freq, swa_num_key_value_heads, swa_rope_theta, rope_theta, partial_rotary_factor,
layernorm_epsilon, add_*_attention_sink_bias): they are not read here either, so the count is the
model transformers builds. Its multi-token-prediction weights (model.mtp.*, which transformers skips
on load) are not modelled.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, attention_kinds, decoder, gated_mlp, kind_stack, norm, rope, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import MLP_LAYER_TYPES, experts, grouped_sigmoid, mlp_layer_types

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' MiMoV2FlashConfig defaults (models/mimo_v2_flash/configuration_mimo_v2_flash.py), keys read here.
DEFAULTS = {"vocab_size": 152576, "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 48,
            "num_attention_heads": 64, "num_key_value_heads": 4, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "attention_bias": False, "moe_intermediate_size": 2048,
            "num_experts_per_tok": 8, "n_routed_experts": 256, "routed_scaling_factor": 1.0, "n_group": 1,
            "topk_group": 1, "norm_topk_prob": True, "head_dim": 192, "v_head_dim": 128, "sliding_window": 129,
            "attention_value_scale": 0.707}
# MiMoV2FlashConfig.__post_init__'s rope_parameters when the config has none (its rope_theta and
# partial_rotary_factor keys are not read), and the rotary fraction a layer type's entry may leave out.
ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 5_000_000.0, "partial_rotary_factor": 0.334},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 0.334}}
PARTIAL_ROTARY = 0.334
NAMES = {"full_attention": "full", "sliding_attention": "sliding", "dense": "dense", "sparse": "moe"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = _as_transformers_reads(with_defaults(cfg, DEFAULTS))
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    kinds = [f"{a} {m}" for a, m in zip(attention_kinds(cfg, _full_every_sixth), mlp_layer_types(cfg))]
    names = {kind: "_".join(NAMES[part] for part in kind.split()) for kind in kinds}
    blocks, layers = kind_stack(kinds, names, lambda kind: _block(cfg, *kind.split(), rms))
    return decoder(cfg, "mimo_v2_flash", blocks, layers, rms, cfg.bool("tie_word_embeddings"))


def _full_every_sixth(i: int) -> str:
    return "full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention"


def _as_transformers_reads(cfg: Config) -> Config:
    """The keys MiMoV2FlashConfig rewrites: rope_parameters per layer type (defaulted as a whole, each
    entry's partial_rotary_factor 0.334 when left out), sliding_window from sliding_window_size, a null
    routed_scaling_factor as 1.0; the top-level rotary keys it does not read are dropped."""
    data = {k: v for k, v in cfg.data.items() if k not in ("rope_theta", "partial_rotary_factor", "rope_scaling")}
    nested = cfg.dict("rope_parameters") or ROPE
    data["rope_parameters"] = {kind: {"partial_rotary_factor": PARTIAL_ROTARY, **entry} if isinstance(entry, dict)
                               else entry for kind, entry in nested.items()}
    if cfg.has("sliding_window_size"):
        data["sliding_window"] = cfg.int("sliding_window_size") + 1
    if cfg.data.get("routed_scaling_factor", 1.0) is None:
        data["routed_scaling_factor"] = 1.0
    return cfg.replace(data)


def _block(cfg: Config, kind: str, mlp: str, rms: dict[str, Any]) -> dict[str, Any]:
    sliding = kind == "sliding_attention"
    heads = cfg.int("num_key_value_heads") * (2 if sliding else 1)
    head_dim, bias = cfg.int("head_dim"), cfg.bool("attention_bias")
    scale = cfg.float("attention_value_scale", default=None)
    attn = attention(cfg, n_kv_heads=heads, v_head_dim=cfg.int("v_head_dim"), value_scale=scale,
                     o_bias=False, q_bias=bias, k_bias=bias, v_bias=bias, sinks=sliding,
                     window=cfg.int("sliding_window") if sliding else None, rope=rope(cfg, head_dim, layer_type=kind))
    if MLP_LAYER_TYPES[mlp] == "dense":
        return {"attention": attn, "mlp": gated_mlp(cfg, bias=False), "norm": rms}
    moe = experts(cfg, ("n_routed_experts",), "moe_intermediate_size", score_bias=True, **grouped_sigmoid(cfg))
    return {"attention": attn, "mlp": moe, "norm": rms}
