"""Llama 4's vision tower (models/llama4/modeling_llama4.py).

A bias-free linear patch embedding (Llama4UnfoldConvolution: channels·patch² -> d), a class token,
a learned position table of (image_size / patch_size)² + 1 rows, LayerNorms before and after the
encoder, LayerNorm blocks with biased Q, K, V, O and a biased two-matrix GELU MLP (2-D rotary
besides, no weights). The vision adapter (Llama4VisionPixelShuffleMLP) shuffles 2x2 patches into one
and runs a bias-free MLP: fc1 intermediate_size -> projector_input_dim, fc2 projector_output_dim ->
projector_output_dim; the multimodal projector is one bias-free matrix vision_output_dim -> text width.
An image becomes the processor's best-fit canvas of image_size tiles (at most 16, the image
processor's max_patches) plus a global view, 144 tokens each at 336 / 14 with a 0.5 shuffle
(calc/towers/images.py TileImages).
vLLM's vision attention builds its rotary table at load (get_rope with rope_type "mllama4", max_position
(image_size / patch_size)², dtype complex64, partial_rotary_factor 0.5; vLLM 0.32 models/mllama4.py:302-315),
shared by every layer: one row per patch and one for the class token, head_dim / 2 complex values each
(Llama4VisionRotaryEmbedding._compute_cos_sin_cache, layers/rotary_embedding/llama4_vision_rope.py:30-53).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import rope, with_defaults
from calc.arch.config import Config
from calc.towers import biased_attention

__all__ = ["towers"]

# Llama4VisionConfig (models/llama4/configuration_llama4.py).
MAX_TILES = 16  # Llama4ImageProcessor.max_patches (models/llama4/image_processing_llama4.py)
DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 34, "num_attention_heads": 16, "num_channels": 3,
            "intermediate_size": 5632, "vision_output_dim": 7680, "image_size": 448, "patch_size": 14,
            "norm_eps": 1e-5, "projector_input_dim": 4096, "projector_output_dim": 4096, "pixel_shuffle_ratio": 0.5}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), DEFAULTS)
    d, heads, patch = vision.int("hidden_size"), vision.int("num_attention_heads"), vision.int("patch_size")
    layernorm = {"kind": "layernorm", "eps": vision.float("norm_eps")}
    out = vision.int("projector_output_dim")
    adapter = [{"d_in": vision.int("intermediate_size"), "d_out": vision.int("projector_input_dim")},
               {"d_in": out, "d_out": out}]
    return {"vision": {
        "kind": "llama4", "d_model": d, "n_layers": vision.int("num_hidden_layers"),
        "attention": biased_attention(d, heads),
        "mlp": {"d_ff": vision.int("intermediate_size"), "bias": True},
        "norm": layernorm, "in_channels": vision.int("num_channels"), "patch_size": patch, "class_token": True,
        "positions": (vision.int("image_size") // patch) ** 2 + 1, "pre_norm": layernorm, "post_norm": layernorm,
        "projectors": [{"name": "adapter", "linears": adapter},
                       {"name": "projector", "linears": [{"d_in": vision.int("vision_output_dim"), "d_out": text_width}]}],
        "rope_theta": rope(vision, d // heads)["theta"],
        "vllm_rope": {"rows": (vision.int("image_size") // patch) ** 2 + 1, "width": d // heads // 2,
                      "dtype": "complex64"},
        "images": {"kind": "tiles", "tile": vision.int("image_size"), "patch_size": patch,
                   "shuffle": round(1 / vision.float("pixel_shuffle_ratio")), "max_tiles": MAX_TILES},
    }}
