"""Step-3.7's vision tower forward pass (Step3p7VisionModel, its downsamplers and projector), on
`calc.reference.tower`'s weights and encoder layers.

Computed as transformers' Step3p7Model.get_image_features does (models/step3p7/modeling_step3p7.py),
for one image, cut into views as Step3p7ImageProcessor._get_image_patches plans them (`CropImages`):

    views      the global view (the image resized to image_size²) and, where the rule cuts it, the
               image resized to whole windows, cut row by row, each window resized to crop² (the
               processor resizes with its own bilinear filter, here F.interpolate's: both models are
               given the same views); a near-degenerate image is zero-padded to a square first
    patches    a bias-free conv of patch x patch, the patches row by row, plus the position table,
               resampled bilinearly to the view's patch grid where it is another size (a crop)
    encoder    the pre-encoder LayerNorm, then the layers: 2-D rotary (`calc.reference.axial_rope`:
               each patch's column turns the first d_head / 4 frequencies, its row the next, over the
               whole head), each sublayer's output times its layer scale before the add
    downsample the patch grid through the two biased 3 x 3 stride-2 convolutions (d -> 2d -> 4d)
    projector  the biased linear to the text width
    order      the crops' tokens first (crop by crop), then the global view's
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.reference.axial_rope import AxialRotary, qwen_frequencies
from calc.towers import Tower

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["KINDS", "features", "image_size", "transformers_inputs"]

KINDS = frozenset({"step3p7"})


def image_size(tower: Tower) -> tuple[int, int]:
    """(width, height) of the image `verify --load` runs: one row of two crops beside the global view."""
    return 2 * tower.images.crop, tower.images.crop


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, object]:
    """get_image_features' inputs: the global view, and the crops with their count where there are any."""
    whole, crops = _views(tower.tower, pixels)
    if crops is None:
        return {"pixel_values": whole}
    return {"pixel_values": whole, "pixel_values_local": crops, "num_local_patches": [crops.shape[0]]}


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [1, tokens, text width] of one image [1, C, H, W] (module docstring)."""
    whole, crops = _views(tower.tower, pixels)
    views = [crops] * (crops is not None) + [whole]
    return torch.cat([_encode(tower, view).flatten(0, 1) for view in views])[None]


def _views(tower: Tower, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[1, C, H, W] -> the global view [1, C, image_size, image_size] and the crops [crops, C, crop,
    crop] row by row (None: the rule cuts none)."""
    rule = tower.images
    height, width = pixels.shape[-2:]
    if rule.squared(width, height):  # zero-padded to a square, the image at the top left
        side = max(width, height)
        pixels, width, height = F.pad(pixels, (0, side - width, 0, side - height)), side, side
    whole = _resized(pixels, rule.global_size, rule.global_size)
    cols, rows, window = rule.windows(width, height)
    if not window:
        return whole, None
    # each side snapped to whole windows (a side shorter than one window kept: one window of it)
    canvas_w, canvas_h = (cols * window if width >= window else width, rows * window if height >= window else height)
    canvas = _resized(pixels, canvas_h, canvas_w)[0]
    cuts = [canvas[:, top:top + window, left:left + window]
            for top in range(0, canvas_h, window) for left in range(0, canvas_w, window)]
    return whole, torch.cat([_resized(cut[None], rule.crop, rule.crop) for cut in cuts])


def _resized(pixels: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bilinear resize, the pixels as they are where the size already is (F.interpolate's identity)."""
    return F.interpolate(pixels, size=(height, width), mode="bilinear", align_corners=False)


def _encode(tower: "VisionTower", views: torch.Tensor) -> torch.Tensor:
    """Step3p7VisionModel and the projector on views [N, C, s, s] of one size: [N, tokens, text width]."""
    t, w = tower.tower, tower.weights
    x = F.conv2d(views, w.tensor("patch.weight"), stride=t.patch_size)  # (N, d, rows, columns)
    rows, columns = x.shape[-2:]
    side = math.isqrt(t.positions)
    table = w.tensor("positions").reshape(side, side, -1).permute(2, 0, 1)[None]  # (1, d, side, side)
    if (rows, columns) != (side, side):
        table = F.interpolate(table, size=(rows, columns), mode="bilinear", align_corners=False)
    x = w["pre_norm"]((x + table).flatten(2).transpose(1, 2))  # (N, patches, d)
    row, column = (axis.flatten() for axis in torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij"))
    rotary = AxialRotary(column, row, qwen_frequencies(t.attention.head_dim, t.rope_theta))
    x = tower.rotary_states(x, rotary)[-1]
    grid = x.transpose(1, 2).reshape(x.shape[0], t.d_model, rows, columns)
    downsamplers, projector = t.projectors
    for i, conv in enumerate(downsamplers.linears):
        grid = F.conv2d(grid, w.tensor(f"downsamplers.0.{i}.weight"), w.tensor(f"downsamplers.0.{i}.bias"),
                        stride=conv.stride, padding=conv.padding)
    return w["projector.0.0"](grid.flatten(2).transpose(1, 2))
