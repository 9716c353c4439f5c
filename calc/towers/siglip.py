"""Gemma 3's vision tower: SigLIP plus Gemma 3's multimodal projector.

Read off transformers (models/siglip/modeling_siglip.py, models/gemma3/modeling_gemma3.py): a
biased Conv2d patch embedding, a learned position table of (image_size / patch_size)² rows,
LayerNorm blocks with biased Q, K, V, O and a biased two-matrix GELU MLP (hidden_act, tanh-approximated
by default), a post LayerNorm; the projector (Gemma3MultiModalProjector) is a Gemma RMSNorm over the
vision width (of the vision config's layer_norm_eps) and one bias-free matrix into the text width
(mm_input_projection_weight) after a 4x4 average pool: 4096 patches -> 256 tokens (mm_tokens_per_image). SigLIP's attention-pooling head (`vision_use_head`) is not
built by Gemma 3's configs (false); one that asks for it is refused rather than counted short.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, with_defaults
from calc.arch.config import Config
from calc.towers import biased_attention

__all__ = ["encoder", "towers", "vision_config"]

# SiglipVisionConfig (models/siglip/configuration_siglip.py), Gemma3Config.mm_tokens_per_image.
DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
            "num_channels": 3, "image_size": 224, "patch_size": 16, "layer_norm_eps": 1e-6, "vision_use_head": True,
            "hidden_act": "gelu_pytorch_tanh"}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = vision_config(cfg, DEFAULTS)
    d, side, patch = vision.int("hidden_size"), vision.int("image_size"), vision.int("patch_size")
    return {"vision": {
        **encoder(vision),
        "projectors": [{"name": "projector", "norm": {"kind": "rmsnorm", "unit_offset": True,
                                                      "eps": vision.float("layer_norm_eps")}, "norm_width": d,
                        "linears": [{"d_in": d, "d_out": text_width}]}],
        "images": {"kind": "fixed", "image_size": side, "patch_size": patch,
                   "tokens_per_image": cfg.int("mm_tokens_per_image", default=256)},
    }}


def vision_config(cfg: Config, defaults: dict[str, Any]) -> Config:
    """The SigLIP `vision_config`, with the outer config class's defaults for it; SigLIP's
    attention-pooling head is refused (not counted) rather than left out silently."""
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), defaults)
    if vision.bool("vision_use_head"):
        raise vision.error("vision_use_head", "true: SigLIP's attention-pooling head is not counted by gptcalc "
                                              "(Gemma 3's and LLaVA-OneVision's configs set it false)")
    return vision


def encoder(vision: Config) -> dict[str, Any]:
    """The SigLIP encoder's Tower fields (everything but projectors and the image rule)."""
    d, heads, patch = vision.int("hidden_size"), vision.int("num_attention_heads"), vision.int("patch_size")
    layernorm = {"kind": "layernorm", "eps": vision.float("layer_norm_eps")}
    return {"kind": "siglip", "d_model": d, "n_layers": vision.int("num_hidden_layers"),
            "attention": biased_attention(d, heads),
            "mlp": {"d_ff": vision.int("intermediate_size"), "bias": True, "activation": activation(vision, "hidden_act")},
            "norm": layernorm, "in_channels": vision.int("num_channels"), "patch_size": patch, "patch_bias": True,
            "positions": (vision.int("image_size") // patch) ** 2, "post_norm": layernorm}
