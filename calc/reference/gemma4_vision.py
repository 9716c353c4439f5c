"""Gemma 4's vision tower forward pass (Gemma4VisionModel and embed_vision), on
`calc.reference.tower`'s weights and encoder layers.

Computed as transformers' Gemma4Model.get_image_features does (models/gemma4/modeling_gemma4.py,
image_processing_gemma4.py), for one image whose sides are multiples of pool x patch pixels (what
the processor resizes to), unpadded:

    patches    the processor's patches row by row, each patch² x channels wide with the channels last
               (convert_image_to_patches), at (x, y) = (column, row)
    embedding  2·(pixels - 0.5) times the bias-free input_proj, + the x table's row x + the y table's row y
    rotary     2-D (`calc.reference.axial_rope`, "split"): d_head / 4 frequencies turn with x in the
               head's first half and with y in its second
    layers     sandwich RMSNorms, Q and K RMS-normed per head, V normed without a scale, scores not
               scaled (scaling 1.0), every patch seeing every other
    pooler     each pool x pool block of patches averaged into one soft token (row by row), times √d;
               with `standardize`, minus std_bias, times std_scale
    project    embed_vision: an RMSNorm without a scale, then the bias-free matrix into the text width
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.parts.norm import Norm as NormSpec
from calc.reference.axial_rope import AxialRotary, qwen_frequencies
from calc.reference.parts.norm import Norm
from calc.towers import Tower

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["KINDS", "features", "image_size", "transformers_inputs"]

KINDS = frozenset({"gemma4"})


def image_size(t: Tower) -> tuple[int, int]:
    """(width, height) of the image `verify --load` runs: the square of the rule's largest image, cut
    to what each axis' position table reaches, in whole pool x pool blocks."""
    block = t.images.pool * t.patch_size
    side = min(t.images.largest().width, t.position_grid[-1] * t.patch_size) // block * block
    return side, side


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, torch.Tensor]:
    """get_image_features' inputs: the processor's patches [1, patches, patch²·C] and their (x, y)."""
    patches, positions = _patches(tower, pixels)
    return {"pixel_values": patches[None], "image_position_ids": positions[None]}


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one image [1, C, H, W] (module docstring)."""
    t, w = tower.tower, tower.weights
    patches, positions = _patches(tower, pixels)
    x, y = positions.unbind(-1)
    table = w.tensor("positions")  # (2, rows an axis, d): the x table, the y table
    h = 2 * (patches - 0.5) @ w.tensor("patch.weight").T + table[0][x] + table[1][y]
    rotary = AxialRotary(x, y, qwen_frequencies(t.attention.head_dim, t.rope_theta), layout="split")
    h = tower.rotary_states(h[None], rotary)[-1]  # (1, patches, d)
    rows, columns = pixels.shape[-2] // t.patch_size, pixels.shape[-1] // t.patch_size
    grid = h.transpose(1, 2).reshape(1, t.d_model, rows, columns)
    h = F.avg_pool2d(grid.float(), t.images.pool).flatten(2).transpose(1, 2) * t.d_model ** 0.5
    if t.standardize:
        h = (h - w.tensor("std_bias")) * w.tensor("std_scale")
    unscaled = Norm(NormSpec.model_construct(kind="rmsnorm", weight=False, bias=False, eps=t.norm.eps), ())
    return w["projector.0.0"](unscaled(h))


def _patches(tower: "VisionTower", pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([patches, patch²·C], [patches, 2]) of one image [1, C, H, W]: Gemma4ImageProcessor's patches
    row by row, each (patch row, patch column, channel), and each one's (column, row)."""
    t = tower.tower
    p, block = t.patch_size, t.images.pool * t.patch_size
    _, channels, height, width = pixels.shape
    if height % block or width % block:
        raise ValueError(f"a {width}x{height} image is not a multiple of {block} pixels a side")
    rows, columns = height // p, width // p
    patches = pixels[0].reshape(channels, rows, p, columns, p).permute(1, 3, 2, 4, 0).reshape(rows * columns, -1)
    row, column = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
    return patches, torch.stack((column.flatten(), row.flatten()), dim=-1)
