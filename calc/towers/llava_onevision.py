"""LLaVA-OneVision's vision tower: SigLIP, a two-layer projector and the image newline.

Read off transformers (models/llava_onevision/modeling_llava_onevision.py): the tower is
`AutoModel.from_config(vision_config)`, a SigLIP vision model (calc/towers/siglip.py's encoder;
LlavaOnevisionConfig's own vision defaults are SigLIP-so400m cut to 26 layers at 384 px, no
attention-pooling head). LlavaOnevisionMultiModalProjector: linear_1 (vision width x the number of
`vision_feature_layer`s -> text width), the activation, linear_2 (text -> text), both biased if
`multimodal_projector_bias` (default true). LlavaOnevisionModel.image_newline: one learned vector
of the text width, appended after each row of an image's tokens.

An image becomes tokens by the processor's "anyres_max_N" rule (calc/towers/images.py
AnyresImages): a best-fit canvas of image_grid_pinpoints in image_size tiles, a base view, the grid
unpadded to the image's aspect and shrunk to about N tiles' worth, a newline ending each row.
"""

from __future__ import annotations

import re
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
OUTER = {"multimodal_projector_bias": True, "vision_feature_layer": -1, "vision_aspect_ratio": "anyres_max_9",
         "vision_feature_select_strategy": "full",
         "image_grid_pinpoints": [[384 * h, 384 * w] for h in range(1, 7) for w in range(1, 7)]}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = vision_config(cfg, SIGLIP if "vision_config" in cfg.data else DEFAULTS)
    cfg = with_defaults(cfg, OUTER)
    d, bias = vision.int("hidden_size"), cfg.bool("multimodal_projector_bias")
    layers = cfg.raw("vision_feature_layer")
    layers = layers if isinstance(layers, list) else [layers]
    return {"vision": {
        **encoder(vision),
        "projectors": [{"name": "projector", "linears": [{"d_in": d * len(layers), "d_out": text_width, "bias": bias},
                                                         {"d_in": text_width, "d_out": text_width, "bias": bias}]}],
        "newline": text_width, "images": images(cfg, vision), "feature_layers": layers,
    }}


def images(cfg: Config, vision: Config) -> dict[str, Any] | None:
    """The anyres_max_N rule, or None (no rule: `memory --image` says so) for another aspect mode."""
    mode = re.fullmatch(r"anyres_max_(\d+)", str(cfg.raw("vision_aspect_ratio")))
    if mode is None:
        return None
    return {"kind": "anyres", "tile": vision.int("image_size"), "patch_size": vision.int("patch_size"),
            "pinpoints": [tuple(pair) if isinstance(pair, list) else pair for pair in cfg.list("image_grid_pinpoints")], "max_tiles": int(mode.group(1)),
            "drop_first": cfg.raw("vision_feature_select_strategy") == "default"}
