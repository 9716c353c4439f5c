"""The Qwen vision towers' forward pass (Qwen2.5-VL, Qwen3-VL, Qwen3.5), on `calc.reference.tower`'s
weights and encoder layers.

Computed as transformers' Qwen2_5_VisionTransformerPretrainedModel and Qwen3VLVisionModel do
(models/qwen2_5_vl, qwen3_vl modeling_*.py; transformers/vision_utils.py), for one image:

    patches    the image repeated to temporal_patch frames, cut into patch² squares listed merge block
               by merge block (the m x m patches one merged token takes are adjacent: the processor's
               order, Qwen2VLImageProcessor), each C·T·P·P wide, times the Conv3d's kernel (+ bias)
    positions  Qwen3: the learned √rows x √rows table bilinearly resized to the patch grid (align corners)
    rotary     2-D (`calc.reference.axial_rope`): d_head / 4 frequencies turn with the patch's row, the
               same with its column
    layers     attention over all patches; Qwen2.5-VL's windowed layers (all but full_layers) attend only
               within squares of `window` patches a side (the last row and column of squares cut short)
    mergers    m x m patches concatenated (m²d), normed before (over d) or after (over m²d), linear, GELU,
               linear; Qwen3-VL's DeepStack mergers read the output of `deepstack_layers`

The features returned are the merger's tokens followed by each DeepStack merger's: what
get_image_features gives as pooler_output and deepstack_features.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.reference.axial_rope import AxialRotary, qwen_frequencies
from calc.reference.model import Context
from calc.reference.parts.base import no_trace

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["KINDS", "features", "grid_of", "merge_order", "merge_size", "patchify", "transformers_inputs"]

KINDS = frozenset({"qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, torch.Tensor]:
    """get_image_features' inputs: the processor's flattened patches and the image's (frames, rows,
    columns) of patches."""
    rows, columns = grid_of(tower, pixels)
    return {"pixel_values": patchify(tower, pixels), "image_grid_thw": torch.tensor([[1, rows, columns]])}


def grid_of(tower: "VisionTower", pixels: torch.Tensor) -> tuple[int, int]:
    """(rows, columns) of patches of an image [1, C, H, W]; each a multiple of the merge size."""
    p, m = tower.tower.patch_size, merge_size(tower)
    _, _, height, width = pixels.shape
    if height % (p * m) or width % (p * m):
        raise ValueError(f"a {width}x{height} image is not a multiple of {p * m} pixels a side")
    return height // p, width // p


def patchify(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """The processor's flattened patches [rows·columns, C·T·P·P] of one image [1, C, H, W]."""
    t, m = tower.tower, merge_size(tower)
    rows, columns = grid_of(tower, pixels)
    p, frames = t.patch_size, t.temporal_patch
    x = pixels[0].unsqueeze(1).expand(-1, frames, -1, -1)  # (C, T, H, W): the image fills every frame
    x = x.reshape(t.in_channels, frames, rows // m, m, p, columns // m, m, p)
    return x.permute(2, 5, 3, 6, 0, 1, 4, 7).reshape(rows * columns, -1)


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one image [1, C, H, W] (module docstring)."""
    t, w, m = tower.tower, tower.weights, merge_size(tower)
    rows, columns = grid_of(tower, pixels)
    bias = w.tensor("patch.bias") if t.patch_bias else None
    x = F.linear(patchify(tower, pixels), w.tensor("patch.weight").reshape(t.d_model, -1), bias)
    grid = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
    row, column = (merge_order(axis, m) for axis in grid)  # each patch's row and column, in patch order
    if t.positions:
        x = x + _resized_table(w["positions"].weight, rows, columns, m)
    rotary = AxialRotary(row, column, qwen_frequencies(t.attention.head_dim, t.rope_theta))
    groups = _windows(row, column, t.window) if t.window else None
    deep = []
    x = x.unsqueeze(0)  # (1, patches, d)
    for i, layer in enumerate(tower.layers):
        layer.parts["attn"].rotary = rotary
        x = _run(layer, x, [torch.arange(x.shape[1])] if groups is None or i in t.full_layers else groups)
        if i in t.deepstack_layers:
            deep.append(_merge_tokens(tower, x, "deepstack_mergers", t.deepstack_layers.index(i)))
    return torch.cat([_merge_tokens(tower, x, "merger", 0), *deep], dim=1)


def merge_size(tower: "VisionTower") -> int:
    """The merge size m: m x m patches make one token (the image rule's)."""
    return tower.tower.images.merge_size


def merge_order(grid: torch.Tensor, m: int) -> torch.Tensor:
    """A [rows, columns] grid's entries listed merge block by merge block (the patches' order)."""
    rows, columns = grid.shape[:2]
    blocks = grid.reshape(rows // m, m, columns // m, m, *grid.shape[2:]).transpose(1, 2)
    return blocks.reshape(rows * columns, *grid.shape[2:])


def _resized_table(table: torch.Tensor, rows: int, columns: int, m: int) -> torch.Tensor:
    """Qwen3-VL's learned positions: the square table resized bilinearly (corners aligned) to the
    patch grid, in the patches' order."""
    side = math.isqrt(table.shape[0])
    square = table.reshape(side, side, -1).permute(2, 0, 1).unsqueeze(0)
    grid = F.interpolate(square, size=(rows, columns), mode="bilinear", align_corners=True)[0]
    return merge_order(grid.permute(1, 2, 0), m)


def _windows(row: torch.Tensor, column: torch.Tensor, window: int) -> list[torch.Tensor]:
    """The patches (indices, in patch order) of each window square of `window` patches a side, the
    squares row by row; a merge block never straddles two (window is a multiple of m)."""
    square = (row // window) * (int(column.max()) // window + 1) + column // window
    return [torch.nonzero(square == s).flatten() for s in torch.unique(square)]


def _run(layer: torch.nn.Module, x: torch.Tensor, groups: list[torch.Tensor]) -> torch.Tensor:
    """One encoder layer, its attention within each group of patches: the norms and the MLP act per
    patch, so running the layer on each group alone is attention masked to the groups."""
    out = torch.empty_like(x)
    for group in groups:
        out[:, group] = layer(x[:, group], Context(group, None, no_trace, causal=False))
    return out


def _merge_tokens(tower: "VisionTower", x: torch.Tensor, name: str, i: int) -> torch.Tensor:
    """One merger: each m x m block of patches, normed over d before the merge (the merger) or over
    m²d after it (the DeepStack mergers), then linear, GELU, linear -> [1, tokens, text width]."""
    projector, w = next(p for p in tower.tower.projectors if p.name == name), tower.weights
    norm, first, second = (w[f"{name}.{i}.{part}"] for part in ("norm", "0", "1"))
    merged = projector.linears[0].d_in
    if projector.norm_width == tower.tower.d_model:
        x = norm(x).reshape(1, -1, merged)
    else:
        x = norm(x.reshape(1, -1, merged))
    return second(F.gelu(first(x)))
