"""OLMo (model_type olmo), OLMo-2 (olmo2), OLMo-3 (olmo3) and OLMo-Hybrid (olmo_hybrid): Llama's tensors, different norms.

OLMo-1's LayerNorm has no parameters at all (OlmoLayerNorm: F.layer_norm with no weight or bias,
eps fixed at 1e-5), so its blocks and final norm add nothing; `clip_qkv` clamps activations (no
parameter). OLMo-2 drops the pre-norms and normalises outputs instead: RMSNorm on attention's and
the MLP's outputs before each residual add (post_attention_layernorm, post_feedforward_layernorm),
plus QK-norm over the full width (q_norm over n_heads x head_dim, k_norm over n_kv_heads x head_dim).
OLMo-3 is OLMo-2's block with three sliding-window layers (`sliding_window`) per full one, or as
`layer_types` says; rope_theta defaults to 500,000 and a legacy `rope_scaling` applies to the full
layers only (Olmo3Config files it under rope_parameters["full_attention"]).
OLMo-Hybrid (OlmoHybridForCausalLM) mixes OLMo-3's full-attention layer (output norms, full-width
QK-norm, rotary always: transformers fills rope_theta 10,000 when the config has none) with gated
DeltaNet layers under Llama's input norms (OlmoHybridLinearAttentionDecoderLayer), every 4th layer
attention unless `layer_types` says otherwise (and the last one if none would be). Its DeltaNet
projects q, k, v, a, b and the gate separately, scales beta by 2 when `linear_allow_neg_eigval`
(the default) and normalises with eps 1e-5 whatever rms_norm_eps says; linear_num_key_heads and
linear_num_value_heads default to num_attention_heads, linear_key_head_dim to
int(0.75 x hidden_size / key heads), linear_value_head_dim to twice that (OlmoHybridConfig).
All untie the head unless `tie_word_embeddings` (OLMo-1B ties it).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (KEYS, NO_LLAMACPP, TRANSFORMERS_BACKEND, attention, attention_kinds, decoder, gated_mlp,
                               kind_stack, layer_kinds, norm, rope, uniform, with_defaults)
from calc.arch.config import Config
from calc.arch.qwen3_next import _deltanet

__all__ = ["DEFAULTS", "spec_dict"]

_SHARED = {"vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "max_position_embeddings": 2048, "tie_word_embeddings": False,
           "attention_bias": False, "rope_theta": 10000.0}

# transformers' config-class defaults (models/olmo*/configuration_olmo*.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "olmo": _SHARED,
    "olmo2": {**_SHARED, "rms_norm_eps": 1e-5},
    "olmo3": {**_SHARED, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "sliding_window": 4096},
    "olmo_hybrid": {**_SHARED, "vocab_size": 100352, "hidden_size": 3840, "num_attention_heads": 30,
                    "max_position_embeddings": 65536, "rms_norm_eps": 1e-6, "linear_conv_kernel_dim": 4,
                    "linear_allow_neg_eigval": True},
}
# vLLM 0.32 runs OLMo, OLMo-2 and OLMo-3 through its Transformers backend
# (vllm/model_executor/models/registry.py L722-724); OLMo-Hybrid is its own.
VLLM = {"olmo": TRANSFORMERS_BACKEND, "olmo2": TRANSFORMERS_BACKEND, "olmo3": TRANSFORMERS_BACKEND}
HYBRID_KINDS = ("linear_attention", "full_attention")
BLOCK_NAMES = {"sliding_attention": "sliding", "full_attention": "full"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    if model_type == "olmo_hybrid":
        return _olmo_hybrid(cfg)
    if model_type == "olmo3":
        kinds = attention_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % 4 else "full_attention")
        blocks, layers = kind_stack(kinds, BLOCK_NAMES, lambda kind: _olmo3_block(cfg, kind))
        return decoder(cfg, model_type, blocks, layers, norm("rmsnorm", cfg.float("rms_norm_eps")),
                       cfg.bool("tie_word_embeddings"), **VLLM[model_type])
    block = _olmo2_block(cfg) if model_type == "olmo2" else _olmo_block(cfg)
    return uniform(cfg, model_type, block, block["norm"], cfg.bool("tie_word_embeddings"), **VLLM[model_type])


def _olmo_block(cfg: Config) -> dict[str, Any]:
    ln = norm("layernorm", 1e-5, weight=False, bias=False)
    return {"attention": attention(cfg), "mlp": gated_mlp(cfg, bias=False), "norm": ln}


def _olmo2_block(cfg: Config) -> dict[str, Any]:
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    attn = attention(cfg, qk_norm={"norm": rms, "scope": "full"})
    return {"attention": attn, "mlp": gated_mlp(cfg, bias=False), "norm": rms, "norms": ("attn_out", "mlp_out")}


def _olmo3_block(cfg: Config, kind: str) -> dict[str, Any]:
    block = _olmo2_block(cfg)
    sliding = kind == "sliding_attention"
    read = cfg.replace({key: value for key, value in cfg.data.items() if key != "rope_scaling"}) if sliding else cfg
    attn = {**block["attention"], "window": cfg.int("sliding_window", default=None) if sliding else None,
            "rope": rope(read, block["attention"]["head_dim"], layer_type=kind)}
    return {**block, "attention": attn}


def _olmo_hybrid(cfg: Config) -> dict[str, Any]:
    n_layers = cfg.int(*KEYS["n_layers"])
    kinds = layer_kinds(cfg, lambda i: HYBRID_KINDS[i % 4 == 3 or (n_layers < 4 and i == n_layers - 1)])
    unknown = sorted(set(kinds) - set(HYBRID_KINDS))
    if unknown:
        raise cfg.error("layer_types", f"unknown layer type {unknown[0]!r} (expected {', '.join(HYBRID_KINDS)})")
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    deltanet = {"attention": {**_deltanet(_linear_defaults(cfg)), "neg_eigval": cfg.bool("linear_allow_neg_eigval"),
                              "norm_eps": 1e-5},
                "mlp": gated_mlp(cfg, bias=False), "norm": rms}
    blocks, layers = kind_stack(kinds, {"linear_attention": "deltanet", "full_attention": "attention"},
                                lambda kind: deltanet if kind == "linear_attention" else _olmo2_block(cfg))
    return decoder(cfg, "olmo_hybrid", blocks, layers, rms, cfg.bool("tie_word_embeddings"),
                   **NO_LLAMACPP)


def _linear_defaults(cfg: Config) -> Config:
    """OlmoHybridConfig.__post_init__'s DeltaNet widths for the keys a config leaves out (or sets to null)."""
    heads = cfg.int(*KEYS["n_heads"])
    k_heads = cfg.int("linear_num_key_heads", default=None) or heads
    k_dim = cfg.int("linear_key_head_dim", default=None) or int(0.75 * cfg.int(*KEYS["d_model"]) / k_heads)
    return cfg.replace({**cfg.data, "linear_num_key_heads": k_heads,
                        "linear_num_value_heads": cfg.int("linear_num_value_heads", default=None) or heads,
                        "linear_key_head_dim": k_dim,
                        "linear_value_head_dim": cfg.int("linear_value_head_dim", default=None) or 2 * k_dim})
