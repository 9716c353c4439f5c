"""LLaVA-OneVision's vision tower forward pass (SigLIP, the projector, anyres packing), on
`calc.reference.tower`'s weights and encoder.

Computed as transformers' LlavaOnevisionModel.get_image_features and pack_image_features do
(models/llava_onevision/modeling_llava_onevision.py), for one image of one tile (image_size
pixels a side), the case whose canvas among image_grid_pinpoints is that tile itself:

    views      the processor's base view (the image resized to a tile: itself) and its one grid tile
    encoder    SigLIP on each view, the hidden states of `feature_layers` concatenated (before the
               post-layernorm), the first token dropped where vision_feature_select_strategy is "default"
    projector  linear_1, GELU, linear_2
    packing    the base view's tokens, then the tile's side x side grid row by row, each row ended by
               the image newline (the grid is the image's own aspect: nothing unpadded, nothing resized)

A larger image (a canvas of several tiles, unpadded and resized to about anyres_max_N tiles) is
counted by `calc.towers.images.AnyresImages`, not run here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.towers import Tower

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["features", "transformers_inputs", "unbuildable"]


def unbuildable(tower: Tower) -> str | None:
    """Why the one-tile run does not fit this tower's rule (None: it does)."""
    rule = tower.images
    if rule is None or (rule.tile, rule.tile) not in rule.pinpoints or rule.drop_first:
        return ("the torch reference runs LLaVA-OneVision's tower on one tile-sized image, which needs an "
                "anyres_max_N rule with a tile x tile canvas among image_grid_pinpoints and the \"full\" "
                "feature selection")
    return None


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, torch.Tensor]:
    """get_image_features' inputs: the image's views [1, views, C, tile, tile] and its (height, width)."""
    return {"pixel_values": _views(pixels)[None], "image_sizes": torch.tensor([list(pixels.shape[-2:])])}


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one tile-sized image [1, C, tile, tile]."""
    t, w = tower.tower, tower.weights
    side = t.images.tile // t.patch_size
    if pixels.shape[-2:] != (t.images.tile, t.images.tile):
        raise ValueError(f"LLaVA-OneVision's reference runs one {t.images.tile} px tile, not {list(pixels.shape[-2:])}")
    states = tower.hidden_states(_views(pixels))
    x = torch.cat([states[i] for i in t.feature_layers], dim=-1)
    x = w["projector.0.1"](F.gelu(w["projector.0.0"](x)))  # (views, side², text width)
    base, grid = x[0], x[1].reshape(side, side, -1)
    newline = w.tensor("newline").reshape(1, 1, -1).expand(side, 1, -1)
    rows = torch.cat((grid, newline), dim=1).reshape(-1, x.shape[-1])  # side x (side + 1) tokens
    return torch.cat((base, rows)).unsqueeze(0)


def _views(pixels: torch.Tensor) -> torch.Tensor:
    """[1, C, tile, tile] -> [2, C, tile, tile]: the base view and the one grid tile."""
    return pixels.expand(2, -1, -1, -1)
