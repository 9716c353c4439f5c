"""LLaVA-OneVision's vision tower: SigLIP, a two-layer projector and the image newline.

Read off transformers (models/llava_onevision/modeling_llava_onevision.py): the tower is
`AutoModel.from_config(vision_config)`, a SigLIP vision model (calc/towers/siglip.py's encoder;
LlavaOnevisionConfig's own vision defaults are SigLIP-so400m cut to 26 layers at 384 px, no
attention-pooling head). LlavaOnevisionMultiModalProjector: linear_1 (vision width x the number of
`vision_feature_layer`s -> text width), the activation, linear_2 (text -> text), both biased if
`multimodal_projector_bias` (default true). LlavaOnevisionModel.image_newline: one learned vector
of the text width, appended after each row of an image's tokens.

Image tokens are not ruled here: the processor's "anyres_max_9" tiling (a best-fit grid of
image_grid_pinpoints, the base view, rows unpadded to the original aspect, then pooled down when
above 9 tiles' worth) is not transcribed yet, so `memory --image` says this tower has no rule.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import with_defaults
from calc.arch.config import Config
from calc.towers.siglip import DEFAULTS as SIGLIP, encoder, vision_config

__all__ = ["towers"]

# LlavaOnevisionConfig (models/llava_onevision/configuration_llava_onevision.py): the vision_config it
# builds when a config has none (a vision_config mapping gets SiglipVisionConfig's own defaults,
# head included: transformers' SubConfigSpec.create_subconfig), and its own keys.
DEFAULTS = {**SIGLIP, "hidden_size": 1152, "intermediate_size": 4304, "patch_size": 14, "image_size": 384,
            "num_hidden_layers": 26, "num_attention_heads": 16, "vision_use_head": False}
OUTER = {"multimodal_projector_bias": True, "vision_feature_layer": -1}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = vision_config(cfg, SIGLIP if "vision_config" in cfg.data else DEFAULTS)
    cfg = with_defaults(cfg, OUTER)
    d, bias = vision.int("hidden_size"), cfg.bool("multimodal_projector_bias")
    layers = cfg.raw("vision_feature_layer")
    taps = len(layers) if isinstance(layers, list) else 1
    return {"vision": {
        **encoder(vision),
        "projectors": [{"name": "projector", "linears": [{"d_in": d * taps, "d_out": text_width, "bias": bias},
                                                         {"d_in": text_width, "d_out": text_width, "bias": bias}]}],
        "newline": text_width,
    }}
