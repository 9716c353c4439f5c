"""Mistral-3's vision tower forward pass (Pixtral and Mistral3MultiModalProjector), on
`calc.reference.tower`'s weights and encoder layers.

Computed as transformers' PixtralVisionModel and Mistral3Model.get_image_features do
(models/pixtral/modeling_pixtral.py, models/mistral3/modeling_mistral3.py), for one image whose
sides are multiples of patch x merge pixels (what the processor resizes to):

    patches    a bias-free conv of patch x patch, the patches row by row, then ln_pre (RMSNorm)
    rotary     2-D (`calc.reference.axial_rope`): the head's even frequencies turn with the patch's
               row, the odd ones with its column
    layers     attention over all patches of the image
    features   the hidden states of `feature_layers` concatenated (vision_feature_layer, -1: the last)
    projector  RMSNorm over the vision width; the patch merger: each m x m block of patches one vector
               of m²·d, channel by channel (each channel's m² patches together, as nn.functional.unfold
               lists them), times merging_layer back to d; linear_1, GELU, linear_2
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.reference.axial_rope import AxialRotary, pixtral_frequencies

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["KINDS", "features", "transformers_inputs"]

KINDS = frozenset({"pixtral"})


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, torch.Tensor]:
    """get_image_features' inputs: the pixels and each image's (height, width)."""
    return {"pixel_values": pixels, "image_sizes": torch.tensor([list(pixels.shape[-2:])])}


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one image [1, C, H, W] (module docstring)."""
    t, w = tower.tower, tower.weights
    x = F.conv2d(pixels, w.tensor("patch.weight"), stride=t.patch_size)  # (1, d, rows, columns)
    rows, columns = x.shape[-2:]
    x = w["pre_norm"](x.flatten(2).transpose(1, 2))  # (1, patches, d)
    row, column = (axis.flatten() for axis in torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij"))
    rotary = AxialRotary(row, column, pixtral_frequencies(t.attention.head_dim, t.rope_theta))
    states = tower.rotary_states(x, rotary)
    x = torch.cat([states[i] for i in t.feature_layers], dim=-1)
    return _project(tower, x, rows, columns)


def _project(tower: "VisionTower", x: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """Mistral3MultiModalProjector: norm, the patch merger, linear_1, GELU, linear_2."""
    w, m = tower.weights, tower.tower.images.merge_size
    norm, merger, first, second = (w[f"projector.0.{part}"] for part in ("norm", "0", "1", "2"))
    x = norm(x)[0]
    d = x.shape[-1]
    blocks = x.reshape(rows // m, m, columns // m, m, d).permute(0, 2, 4, 1, 3)  # (.., .., d, m, m)
    x = merger(blocks.reshape(1, -1, d * m * m))
    return second(F.gelu(first(x)))
