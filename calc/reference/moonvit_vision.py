"""Kimi-K2.5's vision tower forward pass (MoonViT and Kimi_K25MultimodalProjection), on
`calc.reference.tower`'s weights and encoder layers.

Computed as transformers' Kimi_K25Model.get_image_features does (models/kimi_k25/modeling_kimi_k25.py),
for one image whose sides are multiples of merge x patch pixels (what navit_resize gives):

    patches    a biased conv of patch x patch, the patches row by row (what transformers is given:
               each patch [C, patch, patch], with the image's grid_thw)
    positions  the learned (height, width) grid resampled bicubically to the patch grid (half-pixel
               centres, as F.interpolate; as stored where the sizes agree); an image is one frame, whose
               sinusoidal time row is zeros
    rotary     2-D (`calc.reference.axial_rope`, "alternating"): d_head / 4 frequencies, each turning
               with the patch's column and, beside it, with its row
    layers     LayerNorm blocks over all patches of the image, then the final LayerNorm
    projector  each m x m block of patches (row by row within it) LayerNorm-ed patch by patch and
               concatenated (m²·d), in_proj, GELU, out_proj
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.reference.axial_rope import AxialRotary, qwen_frequencies
from calc.reference.qwen_vision import grid_of, merge_order

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["KINDS", "features", "transformers_inputs"]

KINDS = frozenset({"moonvit"})


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, torch.Tensor]:
    """get_image_features' inputs: the patches [rows·columns, C, patch, patch] row by row, and the
    image's (frames, rows, columns)."""
    rows, columns = grid_of(tower, pixels)
    p = tower.tower.patch_size
    patches = pixels[0].reshape(-1, rows, p, columns, p).permute(1, 3, 0, 2, 4).reshape(rows * columns, -1, p, p)
    return {"pixel_values": patches, "image_grid_thw": torch.tensor([[1, rows, columns]])}


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one image [1, C, H, W] (module docstring)."""
    t, w = tower.tower, tower.weights
    rows, columns = grid_of(tower, pixels)
    x = F.conv2d(pixels, w.tensor("patch.weight"), w.tensor("patch.bias"), stride=t.patch_size)
    table = w.tensor("positions").permute(2, 0, 1)[None]  # (1, d, height, width)
    if table.shape[-2:] != (rows, columns):
        table = F.interpolate(table, size=(rows, columns), mode="bicubic", align_corners=False)
    x = (x + table).flatten(2).transpose(1, 2)  # (1, patches, d)
    row, column = (axis.flatten() for axis in torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij"))
    rotary = AxialRotary(column, row, qwen_frequencies(t.attention.head_dim, t.rope_theta), layout="alternating")
    x = w["post_norm"](tower.rotary_states(x, rotary)[-1])
    m = t.images.merge_size
    blocks = merge_order(x[0].reshape(rows, columns, -1), m)  # (patches, d), merge block by merge block
    x = w["projector.0.norm"](blocks).reshape(1, -1, m * m * t.d_model)
    return w["projector.0.1"](F.gelu(w["projector.0.0"](x)))

