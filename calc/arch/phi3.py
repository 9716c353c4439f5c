"""Phi-3, Phi-3.5 and Phi-4 (model_type phi3): Llama's block with fused projections.

`qkv_proj` holds Q, K and V side by side and `gate_up_proj` the MLP's gate and up (fused flags:
same counts, other tensor names); no biases anywhere, whatever `attention_bias` says
(Phi3Attention and Phi3MLP hard-code bias=False). Rotary may be partial (`partial_rotary_factor`:
Phi-4-mini rotates 96 of 128 channels) and scaled (longrope; older configs call it "su"). Every
layer may use `sliding_window`. Head untied unless `tie_word_embeddings` (Phi-4-mini ties it).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import LLAMACPP_NO_WINDOW, PHI3_CLASS, attention, gated_mlp, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Phi3Config defaults (models/phi3/configuration_phi3.py) for the keys read here.
DEFAULTS = {"vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
            "num_attention_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False, "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
            "resid_pdrop": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    attn = attention(cfg, q_bias=False, k_bias=False, v_bias=False, o_bias=False, fused_qkv=True,
                     window=cfg.int("sliding_window", default=None))
    if attn["rope"]["scaling"]:  # Phi3Config's own original_max_position_embeddings (4096 unless set) is the one used
        attn["rope"]["scaling"] = {**attn["rope"]["scaling"],
                                   "original_max_position_embeddings": cfg.int("original_max_position_embeddings")}
    # Phi3DecoderLayer: resid_pdrop on each sublayer's output; embd_pdrop is in Phi3Config but no module reads it
    block = {"attention": attn, "mlp": gated_mlp(cfg, bias=False, fused_gate_up=True), "norm": rms,
             "residual_dropout": cfg.float("resid_pdrop")}
    return uniform(cfg, "phi3", block, rms, cfg.bool("tie_word_embeddings"),
                   llamacpp={**PHI3_CLASS["llamacpp"], **LLAMACPP_NO_WINDOW["llamacpp"], "fused_up": True,
                             "mlp_stream_first": True})
