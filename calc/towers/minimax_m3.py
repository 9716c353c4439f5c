"""MiniMax-M3's vision tower and its two-stage projector (model_type minimax_m3_vl).

Read off transformers 5.24 (models/minimax_m3_vl/modular_minimax_m3_vl.py), whatever the released
vision_config's own model_type ("clip_vision_model") says:
- MiniMaxM3VLVisionEmbeddings: Qwen2.5-VL's Conv3d patch embedding over temporal_patch_size frames,
  no bias; no position table (3-D rotary on part of each head, no parameters);
- pre_layrnorm (LayerNorm), then CLIP encoder layers: LayerNorm, biased Q, K, V, O, LayerNorm, a
  biased two-matrix MLP (hidden_act, exact GELU); no post norm;
- MiniMaxM3VLMultiModalProjector: each patch through Linear(d, projector_hidden_size) + GELU +
  Linear(projector_hidden_size, text width) ("projector"), then spatial_merge_size² neighbours
  concatenated through Linear(m²·text width, projector_hidden_size) + GELU + Linear(..., text width)
  ("merger": merge_linear_1/2, the checkpoint's patch_merge_mlp), all biased.
The released config keeps temporal_patch_size and spatial_merge_size under img_token_compression_config;
transformers' MiniMaxM3VLVisionConfig reads them flat (defaults 2 and 2, the released values).
Images become tokens as Qwen2-VL's processor cuts them (MiniMaxM3VLImageProcessor is one): a grid of
patches, merged m x m, pixels between its size's shortest_edge 3,136 and longest_edge 451,584.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, rope, with_defaults
from calc.arch.config import Config
from calc.towers import biased_attention

__all__ = ["towers"]

# MiniMaxM3VLVisionConfig's defaults (configuration_minimax_m3_vl.py), and MiniMaxM3VLConfig's projector_hidden_size.
DEFAULTS = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_attention_heads": 16,
            "num_channels": 3, "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2,
            "hidden_act": "gelu", "layer_norm_eps": 1e-5}
PROJECTOR_WIDTH = 6144
PIXELS = (4 * 28 * 28, 451_584)  # MiniMaxM3VLImageProcessor.size: shortest_edge, longest_edge
# SGLang lists MiniMaxM3SparseForConditionalGeneration for its tc_piecewise prefill CUDA graphs only
# (configs/model_config.py multimodal_piecewise_cuda_graph_supported_model_archs): calc/spec/sglang.py
SGLANG = {"minimax_m3_vl": {"prefill_graph_allowlists": ("tc_piecewise",)}}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), DEFAULTS)
    d, heads, patch = vision.int("hidden_size"), vision.int("num_attention_heads"), vision.int("patch_size")
    merge = vision.int("spatial_merge_size")
    width = cfg.int("projector_hidden_size", default=PROJECTOR_WIDTH)
    layernorm = {"kind": "layernorm", "eps": vision.float("layer_norm_eps")}

    def two_linears(name: str, d_in: int) -> dict[str, Any]:
        return {"name": name, "linears": [{"d_in": d_in, "d_out": width, "bias": True},
                                          {"d_in": width, "d_out": text_width, "bias": True}]}

    return {"vision": {
        "kind": "minimax_m3_vl", "d_model": d, "n_layers": vision.int("num_hidden_layers"),
        "attention": biased_attention(d, heads),
        "mlp": {"d_ff": vision.int("intermediate_size"), "bias": True, "activation": activation(vision, "hidden_act")},
        "norm": layernorm, "pre_norm": layernorm, "in_channels": vision.int("num_channels"), "patch_size": patch,
        "temporal_patch": vision.int("temporal_patch_size"),
        "projectors": [two_linears("projector", d), two_linears("merger", text_width * merge ** 2)],
        "rope_theta": rope(vision, d // heads)["theta"],
        "images": {"kind": "grid", "patch_size": patch, "merge_size": merge, "min_pixels": PIXELS[0],
                   "max_pixels": PIXELS[1]},
    }}
