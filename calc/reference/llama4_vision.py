"""Llama 4's vision tower forward pass (Llama4VisionModel and the multimodal projector), on
`calc.reference.tower`'s weights and encoder layers.

Computed as transformers' models/llama4/modeling_llama4.py does, for one tile of image_size pixels
(the processor cuts an image into such tiles; the position table covers exactly one):

    patches    the tile unfolded into patches row by row (C·P·P each), times the bias-free linear
    class      the class token appended after the patches, then the position table (patches + 1 rows)
    encoder    layernorm_pre, the layers (2-D rotary, `calc.reference.axial_rope`: the class token
               unturned), layernorm_post
    adapter    the class token dropped, 2 x 2 patches pixel-shuffled into one (4d wide), fc1, GELU,
               fc2, GELU (Llama4VisionPixelShuffleMLP)
    projector  multi_modal_projector.linear_1, applied by Llama4ForConditionalGeneration's forward
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from calc.reference.axial_rope import AxialRotary, qwen_frequencies

if TYPE_CHECKING:
    from calc.reference.tower import VisionTower

__all__ = ["KINDS", "features", "pixel_shuffle", "transformers_inputs"]

KINDS = frozenset({"llama4"})


def transformers_inputs(tower: "VisionTower", pixels: torch.Tensor) -> dict[str, torch.Tensor]:
    """get_image_features' input: the tile."""
    return {"pixel_values": pixels}


def pixel_shuffle(x: torch.Tensor, r: int) -> torch.Tensor:
    """[N, side², d] -> [N, (side / r)², r²·d]: each r x r block of the patch grid one token, as
    transformers' pixel_shuffle (Llama 4) and InternVLModel.pixel_shuffle order its channels."""
    N, patches, d = x.shape
    side = math.isqrt(patches)
    x = x.reshape(N, side, side // r, d * r).permute(0, 2, 1, 3)  # (N, side/r, side, r·d)
    return x.reshape(N, side // r, side // r, d * r * r).permute(0, 2, 1, 3).reshape(N, -1, d * r * r)


def features(tower: "VisionTower", pixels: torch.Tensor) -> torch.Tensor:
    """Image features [N, tokens, text width] of tiles [N, C, image_size, image_size]."""
    t, w = tower.tower, tower.weights
    x = F.unfold(pixels, t.patch_size, stride=t.patch_size).transpose(1, 2) @ w.tensor("patch.weight").T
    N, patches, d = x.shape
    x = torch.cat((x, w.tensor("class").reshape(1, 1, d).expand(N, 1, d)), dim=1) + w.tensor("positions")
    x = w["pre_norm"](x)
    side = math.isqrt(patches)
    index = torch.arange(patches)
    none = torch.zeros(1, dtype=index.dtype)
    rotary = AxialRotary(torch.cat((index % side + 1, none)), torch.cat((index // side + 1, none)),
                         qwen_frequencies(t.attention.head_dim, t.rope_theta), layout="interleaved")
    x = tower.rotary_states(x, rotary)[-1]
    x = pixel_shuffle(w["post_norm"](x)[:, :-1], t.images.shuffle)
    x = F.gelu(w["adapter.0.1"](F.gelu(w["adapter.0.0"](x))))
    return w["projector.0.0"](x)
