"""Mistral-3's vision tower: Pixtral plus Mistral-3's patch merger and projector.

Read off transformers (models/pixtral/modeling_pixtral.py, models/mistral3/modeling_mistral3.py): a
bias-free Conv2d patch embedding, an RMSNorm before the encoder (ln_pre), RMSNorm blocks with
bias-free Q, K, V, O (head_dim = hidden_size / heads) and a bias-free gated MLP (hidden_act: SiLU in
the released configs, PixtralVisionConfig's default GELU), 2-D rotary (no position table), no norm
after. Mistral3MultiModalProjector: an RMSNorm over the vision width (the text config's epsilon), the
patch merger (merge² neighbouring patches concatenated, one bias-free matrix back to the vision
width), then linear_1 (vision width x the number of `vision_feature_layer`s -> text width) and
linear_2 (text -> text), biased if `multimodal_projector_bias`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, rope, with_defaults
from calc.arch.config import Config

__all__ = ["towers"]

# Mistral3Config's default vision_config (models/mistral3/configuration_mistral3.py) and its own keys.
DEFAULTS = {"hidden_act": "gelu",
            "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
            "num_channels": 3, "image_size": 1540, "patch_size": 14}
OUTER = {"spatial_merge_size": 2, "multimodal_projector_bias": False, "vision_feature_layer": -1}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), DEFAULTS)
    cfg = with_defaults(cfg, OUTER)
    d, heads, patch = vision.int("hidden_size"), vision.int("num_attention_heads"), vision.int("patch_size")
    merge, bias = cfg.int("spatial_merge_size"), cfg.bool("multimodal_projector_bias")
    layers = cfg.raw("vision_feature_layer")
    layers = layers if isinstance(layers, list) else [layers]
    rms = {"kind": "rmsnorm", "eps": 1e-5}
    # the projector's norm takes the text model's epsilon (MistralConfig's default 1e-6)
    text_eps = Config(cfg.dict("text_config"), f"{cfg.origin}: text_config").float("rms_norm_eps", default=1e-6)
    linears = [{"d_in": d * merge ** 2, "d_out": d}, {"d_in": d * len(layers), "d_out": text_width, "bias": bias},
               {"d_in": text_width, "d_out": text_width, "bias": bias}]
    return {"vision": {
        "kind": "pixtral", "d_model": d, "n_layers": vision.int("num_hidden_layers"),
        "attention": {"n_heads": heads, "head_dim": d // heads},
        "mlp": {"d_ff": vision.int("intermediate_size"), "gated": True, "activation": activation(vision, "hidden_act")},
        "norm": rms, "in_channels": vision.int("num_channels"), "patch_size": patch, "pre_norm": rms,
        "projectors": [{"name": "projector", "norm": {**rms, "eps": text_eps}, "norm_width": d, "linears": linears}],
        "rope_theta": rope(vision, d // heads)["theta"], "feature_layers": layers,
        "images": {"kind": "rows", "patch_size": patch, "merge_size": merge, "longest_edge": vision.int("image_size")},
    }}

