"""MiniMax-M3's vision tower's forward pass, on `calc.reference.tower`'s weights and encoder layers.

Computed as transformers' MiniMaxM3VLVisionModel and MiniMaxM3VLMultiModalProjector do
(models/minimax_m3_vl/modeling_minimax_m3_vl.py; transformers/vision_utils.py), for one image:

    patches    Qwen2-VL's processor's: the image repeated to temporal_patch frames, patch² squares listed
               merge block by merge block (`calc.reference.qwen_vision`), times the bias-free Conv3d kernel
    pre norm   pre_layrnorm, a LayerNorm
    rotary     3-D: each patch's (frame, row, column) turns its own k = d_head // 3 // 2 frequencies
               1 / θ^(2i / 2k), so 6k channels of each head rotate (rotate-half) and the rest pass; an
               image's frame index is 0 (get_vision_position_ids(include_temporal=True))
    layers     CLIP's: LayerNorm, attention over all the image's patches, LayerNorm, the MLP
    projector  each patch through linear_1, GELU, linear_2; then m² adjacent patches side by side through
               merge_linear_1, GELU, merge_linear_2
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.reference.axial_rope import AxialRotary
from calc.reference.qwen_vision import grid_of, merge_order, merge_size, patchify, transformers_inputs

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["KINDS", "features", "transformers_inputs"]

KINDS = frozenset({"minimax_m3_vl"})


class PartialRotary(AxialRotary):
    """cos and sin [patches, 6k] of MiniMaxM3VLVisionRotaryEmbedding: the frame's, row's and column's
    angles side by side, twice; `apply` turns the first 6k channels of a head (rotate-half)."""

    def __init__(self, coordinates: tuple[torch.Tensor, ...], head_dim: int, theta: float) -> None:
        spatial = 2 * (head_dim // 3 // 2)
        inv = 1.0 / theta ** (torch.arange(0, spatial, 2, dtype=torch.float32) / spatial)
        angles = torch.cat([torch.outer(c.float(), inv) for c in coordinates], dim=-1)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin, self.layout = angles.cos(), angles.sin(), "whole"

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        width = cos.shape[-1]
        return torch.cat((super().apply(x[..., :width], cos, sin), x[..., width:]), dim=-1)


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one image [1, C, H, W] (module docstring)."""
    t, w, m = tower.tower, tower.weights, merge_size(tower)
    rows, columns = grid_of(tower, pixels)
    x = w["pre_norm"](F.linear(patchify(tower, pixels), w.tensor("patch.weight").reshape(t.d_model, -1)))
    row, column = (merge_order(axis, m) for axis in torch.meshgrid(torch.arange(rows), torch.arange(columns),
                                                                   indexing="ij"))
    states = tower.rotary_states(x.unsqueeze(0), PartialRotary((torch.zeros_like(row), row, column),
                                                                t.attention.head_dim, t.rope_theta))
    per_patch = w["projector.0.1"](F.gelu(w["projector.0.0"](states[-1])))  # (1, patches, text width)
    merged = per_patch.reshape(1, -1, m * m * per_patch.shape[-1])
    return w["merger.0.1"](F.gelu(w["merger.0.0"](merged)))
