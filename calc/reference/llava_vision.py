"""LLaVA-OneVision's vision tower forward pass (SigLIP, the projector, anyres packing), on
`calc.reference.tower`'s weights and encoder.

Computed as transformers' LlavaOnevisionModel.get_image_features and pack_image_features do
(models/llava_onevision/modeling_llava_onevision.py), for one image that fits its canvas at scale 1
(one side the canvas', the other at most its: the processor pads it, nothing resized):

    canvas     the pinpoint of image_grid_pinpoints select_best_resolution picks (AnyresImages.canvas)
    views      a base view (the image resized to one tile; the processor resizes with PIL, here a
               bilinear resize: both models are given the same views), then the canvas, the image
               centred on it, cut into tiles row by row
    encoder    SigLIP on each view, the hidden states of `feature_layers` concatenated (before the
               post-layernorm)
    projector  linear_1, GELU, linear_2
    packing    the base view's tokens, then the tiles' feature grid (side x side each, tile rows by
               tile columns) cropped back to the image's aspect (AnyresImages.unpadded, as many rows
               or columns cut from each side), shrunk bilinearly where anyres_max_N says
               (AnyresImages.shrunk), each row ended by the image newline

The "default" feature selection (its first token dropped, a CLS SigLIP has not) is not run, nor are
canvases that are not whole tiles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.towers import Tower

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["features", "image_size", "transformers_inputs", "unbuildable"]


def unbuildable(tower: Tower) -> str | None:
    """Why this tower's rule is not run (None: it is)."""
    rule = tower.images
    if rule is None or rule.drop_first or any(h % rule.tile or w % rule.tile for h, w in rule.pinpoints):
        return ("the torch reference runs LLaVA-OneVision's tower with an anyres_max_N rule, canvases of "
                "whole tiles in image_grid_pinpoints and the \"full\" feature selection")
    return None


def image_size(tower: Tower) -> tuple[int, int]:
    """(width, height) of the image `verify --load` runs: the smallest canvas, its own best fit."""
    height, width = min(tower.images.pinpoints, key=lambda pinpoint: pinpoint[0] * pinpoint[1])
    return width, height


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, torch.Tensor]:
    """get_image_features' inputs: the image's views [1, views, C, tile, tile] and its (height, width)."""
    return {"pixel_values": _views(tower, pixels)[None], "image_sizes": torch.tensor([list(pixels.shape[-2:])])}


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one image [1, C, H, W] (module docstring)."""
    t, w, rule = tower.tower, tower.weights, tower.tower.images
    height, width = pixels.shape[-2:]
    side = rule.tile // rule.patch_size
    states = tower.hidden_states(_views(tower, pixels))
    x = torch.cat([states[i] for i in t.feature_layers], dim=-1)
    x = w["projector.0.1"](F.gelu(w["projector.0.0"](x)))  # (views, side², text width)
    canvas_h, canvas_w = (n // rule.tile for n in rule.canvas(height, width))
    grid = x[1:].reshape(canvas_h, canvas_w, side, side, -1).permute(4, 0, 2, 1, 3)
    grid = grid.reshape(x.shape[-1], canvas_h * side, canvas_w * side)  # (text width, rows, columns)
    rows, columns = rule.unpadded(height, width, *grid.shape[1:])
    top, left = (grid.shape[1] - rows) // 2, (grid.shape[2] - columns) // 2
    grid = grid[:, top:top + rows, left:left + columns]
    if (shrunk := rule.shrunk(rows, columns)) != (rows, columns):
        grid = F.interpolate(grid[None], list(shrunk), mode="bilinear")[0]
    newline = w.tensor("newline")[:, None, None].expand(-1, grid.shape[1], 1)
    packed = torch.cat((grid, newline), dim=-1).flatten(1).T  # rows x (columns + 1) tokens
    return torch.cat((x[0], packed)).unsqueeze(0)


def _views(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """[1, C, H, W] -> [1 + tiles, C, tile, tile]: the base view, then the canvas' tiles row by row."""
    rule = tower.tower.images
    height, width = pixels.shape[-2:]
    canvas_h, canvas_w = rule.canvas(height, width)
    if not (height <= canvas_h and width <= canvas_w and (height == canvas_h or width == canvas_w)):
        raise ValueError(f"a {width}x{height} image does not fit its {canvas_w}x{canvas_h} canvas at scale 1 "
                         "(the reference does not resize)")
    top, left = (canvas_h - height) // 2, (canvas_w - width) // 2
    canvas = F.pad(pixels, (left, canvas_w - width - left, top, canvas_h - height - top))
    tiles = canvas[0].unfold(1, rule.tile, rule.tile).unfold(2, rule.tile, rule.tile)  # (C, rows, cols, tile, tile)
    tiles = tiles.permute(1, 2, 0, 3, 4).reshape(-1, pixels.shape[1], rule.tile, rule.tile)
    base = F.interpolate(pixels, size=(rule.tile, rule.tile), mode="bilinear", align_corners=False)
    return torch.cat((base, tiles))
