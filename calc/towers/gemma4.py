"""Gemma 4's vision and audio towers (transformers models/gemma4/modeling_gemma4.py).

Gemma4VisionPatchEmbedder: a bias-free linear patch embedding (3·patch² -> d) and a learned position
table of two axes (x and y), `position_embedding_size` rows each, summed per patch (2-D rotary
besides, no weights). Gemma4VisionEncoderLayer: sandwich RMSNorms (input, post-attention,
pre-feedforward, post-feedforward), bias-free Q, K, V, O with a head_dim RMSNorm on queries and keys
(the one on values has no scale), a gated MLP without biases. No norm after the encoder; the pooler
(pool x pool average, times √d) stores nothing, nor does the standardisation (`standardize`:
std_bias, std_scale, buffers the checkpoint holds, not parameters). embed_vision (Gemma4MultimodalEmbedder): a scale-free RMSNorm, then one
bias-free matrix d -> text width. The audio tower (E2B, E4B) is a Conformer encoder with the same
kind of projector (calc/towers/conformer.py), from `audio_config` with Gemma4AudioConfig's defaults.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, rope, with_defaults
from calc.arch.config import Config

__all__ = ["towers"]

# Gemma4VisionConfig (models/gemma4/configuration_gemma4.py); Gemma4ImageProcessor.max_soft_tokens.
DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16, "num_attention_heads": 12,
            "num_key_value_heads": 12, "head_dim": 64, "rms_norm_eps": 1e-6, "pooling_kernel_size": 3,
            "patch_size": 16, "position_embedding_size": 10 * 1024, "hidden_activation": "gelu_pytorch_tanh"}
SOFT_TOKENS = 280
THETA = 100.0  # Gemma4VisionConfig.default_theta: the 2-D rotary's base
# Gemma4AudioConfig (models/gemma4/configuration_gemma4.py).
AUDIO = {"hidden_size": 1024, "num_hidden_layers": 12, "num_attention_heads": 8, "conv_kernel_size": 5,
         "subsampling_conv_channels": [128, 32], "output_proj_dims": 1536, "attention_chunk_size": 12,
         "attention_context_left": 13, "attention_context_right": 0, "attention_logit_cap": 50.0,
         "residual_weight": 0.5, "rms_norm_eps": 1e-6, "hidden_act": "silu"}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    """The vision tower and the audio tower, each where its config is not null."""
    has = {m: cfg.raw(f"{m}_config", default=None) is not None for m in ("vision", "audio")}
    return {**({"vision": _vision(cfg, text_width)} if has["vision"] else {}),
            **({"audio": _audio(cfg, text_width)} if has["audio"] else {})}


def _audio(cfg: Config, text_width: int) -> dict[str, Any]:
    audio = with_defaults(Config(dict(cfg.dict("audio_config")), f"{cfg.origin}: audio_config"), AUDIO)
    channels = audio.list("subsampling_conv_channels")
    if len(channels) != 2 or not all(isinstance(c, int) and c > 0 for c in channels):
        raise audio.error("subsampling_conv_channels", f"expected two channel counts, got {channels!r}")
    c0, c1 = channels  # two 3 x 3 convolutions; the projection reads (c0 // 4)·c1 (Gemma4AudioSubSampleConvProjection)
    return {"kind": "conformer", "names": "gemma4_audio", "d_model": audio.int("hidden_size"),
            "n_layers": audio.int("num_hidden_layers"),
            "n_heads": audio.int("num_attention_heads"), "conv_kernel": audio.int("conv_kernel_size"),
            "convs": [(1, c0, 3, 3), (c0, c1, 3, 3)], "subsample_width": c0 // 4 * c1,
            "out_width": audio.int("output_proj_dims"), "text_width": text_width,
            "chunk": audio.int("attention_chunk_size"), "context_left": audio.int("attention_context_left"),
            "context_right": audio.int("attention_context_right"), "logit_cap": audio.float("attention_logit_cap"),
            "residual_weight": audio.float("residual_weight"), "eps": audio.float("rms_norm_eps"),
            "subsample_eps": audio.float("rms_norm_eps"),
            "activation": activation(audio, "hidden_act")}


def _vision(cfg: Config, text_width: int) -> dict[str, Any]:
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), DEFAULTS)
    d, patch = vision.int("hidden_size"), vision.int("patch_size")
    rms = {"kind": "rmsnorm", "eps": vision.float("rms_norm_eps")}
    head_dim = vision.int("head_dim")
    # Gemma4VisionAttention: scaling 1.0 (the QK-norms set the scores' size) and a scale-free V-norm
    attention = {"n_heads": vision.int("num_attention_heads"), "n_kv_heads": vision.int("num_key_value_heads"),
                 "head_dim": head_dim, "qk_norm": {"norm": rms, "scope": "head"}, "v_norm": True, "scale": 1.0}
    return {
        "kind": "gemma4", "d_model": d, "n_layers": vision.int("num_hidden_layers"), "attention": attention,
        "mlp": {"d_ff": vision.int("intermediate_size"), "gated": True,
                "activation": activation(vision, "hidden_activation")},
        "norm": rms, "post_norms": True, "patch_size": patch,
        "positions": 2 * vision.int("position_embedding_size"),
        "position_grid": [2, vision.int("position_embedding_size")],
        "rope_theta": rope(vision, head_dim, default_theta=THETA)["theta"],
        "standardize": vision.bool("standardize", default=False),
        "projectors": [{"name": "projector", "linears": [{"d_in": d, "d_out": text_width}]}],
        "images": {"kind": "pooled", "patch_size": patch, "pool": vision.int("pooling_kernel_size"),
                   "max_tokens": cfg.int("vision_soft_tokens_per_image", default=SOFT_TOKENS)},
    }
