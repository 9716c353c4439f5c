"""Step-3.7's vision tower (Step3p7VisionModel) and its projector, as transformers builds them.

Read off models/step3p7/modeling_step3p7.py and configuration_step3p7.py: a bias-free Conv2d patch
embedding, a learned position table of (image_size / patch_size)² rows, a pre-encoder LayerNorm,
LayerNorm blocks with biased Q, K, V, O (2-D axial rotary of rope_parameters' base: computation only),
a biased two-matrix MLP of int(hidden_size · mlp_ratio) and two learned d-wide layer scales (lambda_1,
lambda_2), no post norm;
then two biased 3x3 stride-2 convolutions (d -> 2d -> 4d, `downsampler1`, `downsampler2`) and one
linear 4d -> the text width (`multi_modal_projector`, biased where `projector_bias`). The Hub config's
names (`width`, `layers`, `heads`, `ls_init_value`) are read as the config class reads them. An image
becomes a global view of image_size and local crops of 504 (image_processing_step3p7.py: the
processor's patch_size, and its max_image_size 3024), each through both downsamplers (stride 4):
calc/towers/images.py CropImages.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, rope, with_defaults
from calc.arch.config import Config
from calc.towers import biased_attention

__all__ = ["towers"]

# Step3p7VisionConfig's defaults (configuration_step3p7.py) and Step3p7Config.projector_bias.
DEFAULTS = {"hidden_size": 1536, "num_hidden_layers": 47, "num_attention_heads": 16, "num_channels": 3,
            "image_size": 728, "patch_size": 14, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
            "mlp_ratio": 8960 / 1536}
CROP, MAX_SIDE, STRIDE = 504, 3024, 4  # Step3p7ImageProcessor.patch_size, max_image_size, downsampler_stride
# Step3p7VisionModel.downsampler1 and 2: nn.Conv2d(kernel_size=3, stride=2, padding=1), with biases
DOWNSAMPLER = {"bias": True, "kernel": 3, "stride": 2, "padding": 1}
ALIASES = {"width": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads"}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = _vision(cfg)
    d, heads, patch = vision.int("hidden_size"), vision.int("num_attention_heads"), vision.int("patch_size")
    layernorm = {"kind": "layernorm", "eps": vision.float("layer_norm_eps")}
    return {"vision": {
        "kind": "step3p7", "d_model": d, "n_layers": vision.int("num_hidden_layers"),
        "attention": biased_attention(d, heads),
        "mlp": {"d_ff": int(d * vision.float("mlp_ratio")), "bias": True, "activation": activation(vision, "hidden_act")},
        "norm": layernorm, "in_channels": vision.int("num_channels"), "patch_size": patch,
        "rope_theta": rope(vision, d // heads)["theta"],
        "positions": (vision.int("image_size") // patch) ** 2, "pre_norm": layernorm, "layer_scale": True,
        "projectors": [{"name": "downsamplers", "linears": [{"d_in": d, "d_out": 2 * d, **DOWNSAMPLER},
                                                            {"d_in": 2 * d, "d_out": 4 * d, **DOWNSAMPLER}]},
                       {"name": "projector", "linears": [{"d_in": 4 * d, "d_out": text_width,
                                                          "bias": cfg.bool("projector_bias", default=False)}]}],
        "images": {"kind": "crops", "global_size": vision.int("image_size"), "crop": CROP, "patch_size": patch,
                   "stride": STRIDE, "max_side": MAX_SIDE},
    }}


def _vision(cfg: Config) -> Config:
    """The vision_config under the config class's names (an alias wins, as its __post_init__ pops it),
    with its defaults; intermediate_size is not read: the class recomputes it from mlp_ratio."""
    data = dict(cfg.dict("vision_config"))
    for alias, name in ALIASES.items():
        if data.get(alias) is not None:
            data[name] = data.pop(alias)
    return with_defaults(Config(data, f"{cfg.origin}: vision_config"), DEFAULTS)
