"""InternVL's vision tower: InternViT and its pixel-shuffle projector.

Read off transformers (models/internvl/modeling_internvl.py): a biased Conv2d patch embedding, a
class token, a learned position table of (image_size / patch_size)² + 1 rows
(`use_absolute_position_embeddings`), blocks of norm (`norm_type`: LayerNorm or RMSNorm), attention
with Q, K, V biased if `attention_bias` and a biased output projection, QK-norm (`use_qk_norm`:
an RMSNorm over the full width, InternViT-6B's), a biased two-matrix GELU MLP, and two learned
layer scales per layer (lambda_1, lambda_2); a LayerNorm after the encoder unless
`use_mean_pooling` (the default: none). InternVLMultiModalProjector: pixel shuffle by
1 / downsample_ratio (2x2 patches -> one), a LayerNorm over that 4·d width (nn.LayerNorm's eps, 1e-5),
linear_1 (-> text width), GELU and linear_2 (text -> text), both biased. `use_mask_token` (a BEiT pre-training token) is refused.

An image becomes up to 12 tiles of image_size by aspect ratio plus a thumbnail, each
(image_size / patch_size)² x downsample_ratio² tokens (256 at 448 / 14 and 0.5; calc/towers/images.py
CanvasImages), as InternVLProcessor asks its image processor (crop_to_patches, 1 to 12 tiles).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, with_defaults
from calc.arch.config import Config

__all__ = ["towers"]

# InternVLVisionConfig and InternVLConfig (models/internvl/configuration_internvl.py).
DEFAULTS = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "attention_bias": False,
            "use_qk_norm": False, "intermediate_size": 4096, "norm_type": "layer_norm", "layer_norm_eps": 1e-6,
            "image_size": 448, "patch_size": 14, "num_channels": 3, "use_mask_token": False,
            "use_absolute_position_embeddings": True, "use_mean_pooling": True, "hidden_act": "gelu"}
OUTER = {"downsample_ratio": 0.5}
NORMS = {"layer_norm": "layernorm", "rms_norm": "rmsnorm"}


def side(vision: Config, key: str) -> int:
    """image_size and patch_size are an int or a square [h, w] pair (InternVLVisionConfig)."""
    value = vision.raw(key)
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise vision.error(key, f"expected a positive integer or a square [n, n], got {value!r}")
    return value


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), DEFAULTS)
    cfg = with_defaults(cfg, OUTER)
    if vision.bool("use_mask_token"):
        raise vision.error("use_mask_token", "true: InternViT's mask token (pre-training only) is not counted")
    norm_type = vision.raw("norm_type")
    if not isinstance(norm_type, str) or norm_type not in NORMS:
        raise vision.error("norm_type", f"{norm_type!r}: InternViT's norms are 'layer_norm' or 'rms_norm'")
    d, heads, patch = vision.int("hidden_size"), vision.int("num_attention_heads"), side(vision, "patch_size")
    eps, bias = vision.float("layer_norm_eps"), vision.bool("attention_bias")
    layernorm = {"kind": "layernorm", "eps": eps}
    shuffled = d * round(1 / cfg.float("downsample_ratio")) ** 2
    qk_norm = {"norm": {"kind": "rmsnorm", "eps": eps}, "scope": "full"} if vision.bool("use_qk_norm") else None
    return {"vision": {
        "kind": "internvl", "d_model": d, "n_layers": vision.int("num_hidden_layers"),
        "attention": {"n_heads": heads, "head_dim": d // heads, "q_bias": bias, "k_bias": bias, "v_bias": bias,
                      "o_bias": True, "qk_norm": qk_norm},
        "mlp": {"d_ff": vision.int("intermediate_size"), "bias": True, "activation": activation(vision, "hidden_act")},
        "norm": {"kind": NORMS[norm_type], "eps": eps}, "in_channels": vision.int("num_channels"),
        "patch_size": patch, "patch_bias": True, "class_token": True, "layer_scale": True,
        "positions": ((side(vision, "image_size") // patch) ** 2 + 1) * vision.bool("use_absolute_position_embeddings"),
        "post_norm": None if vision.bool("use_mean_pooling") else layernorm,
        "projectors": [{"name": "projector", "norm": {"kind": "layernorm"}, "norm_width": shuffled,
                        "linears": [{"d_in": shuffled, "d_out": text_width, "bias": True},
                                    {"d_in": text_width, "d_out": text_width, "bias": True}]}],
        "images": {"kind": "canvas", "tile": side(vision, "image_size"), "patch_size": patch,
                   "shuffle": round(1 / cfg.float("downsample_ratio"))},
    }}
