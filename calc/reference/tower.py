"""The reference vision tower: a runnable torch encoder and projector built from a `Tower`.

Every tensor comes from `calc.checkpoint.tower_slots.tower_roles`, under the names transformers 5
holds it by (`model.vision_tower.encoder.layers.3.self_attn.q_proj.weight`), so a checkpoint's tower
tensors, made canonical by the checkpoint's name table, load with `load_state_dict(strict=True)`. An
encoder layer is the decoder's own `Layer` (the same attention, MLP and norms) run with a context
that is not causal: every patch sees every other.

Built, as each model's get_image_features computes its projected features:

    SigLIP + Gemma 3 (models/siglip/modeling_siglip.py, models/gemma3/modeling_gemma3.py)
      patches   conv of patch x patch, stride patch (with bias) -> [N, (side/patch)², d], + the position table
      encoder   n_layers x (LayerNorm, attention over all patches, LayerNorm, GELU-tanh MLP), post LayerNorm
      project   the patch grid average-pooled to mm_tokens_per_image, Gemma's RMSNorm (1 + w), x W [d, text]
    InternViT + InternVL (models/internvl/modeling_internvl.py)
      patches   the conv, a class token in front, + the position table (class row included)
      encoder   n_layers x (x + λ1·attention(norm(x)), then + λ2·MLP(norm(x))), QK-norm where configured
      project   the class token dropped ("default" feature selection), the grid pixel-shuffled by 1/2
                (4d wide), LayerNorm, linear, GELU, linear

Every other tower kind (window attention and 2-D rotary, Pixtral's and Llama 4's rotary, anyres
packing) is counted, cached and checked in checkpoints, and refused here by name.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from calc.checkpoint.names import Slot
from calc.checkpoint.tower_slots import layout_of, tower_block, tower_roles
from calc.errors import GptcalcError
from calc.reference.model import Context
from calc.reference.parts.base import build_weights, initialise, no_trace, place
from calc.reference.parts.block import Layer, make_norm
from calc.towers import Tower

__all__ = ["VisionTower", "buildable"]


def buildable(tower: Tower) -> str | None:
    """Why the reference cannot build `tower` (None: it can)."""
    gemma3 = tower.kind == "siglip" and len(tower.projectors) == 1 and tower.projectors[0].norm is not None
    return None if gemma3 or tower.kind == "internvl" else (
        f"the torch reference builds SigLIP with Gemma 3's projector and InternVL only; {tower.kind} towers "
        "are counted and checked in checkpoints, not run")


class VisionTower(nn.Module):
    """One tower's encoder and projector, its parameters at their Hugging Face paths."""

    def __init__(self, name: str, tower: Tower, device: str | torch.device = "cpu") -> None:
        super().__init__()
        if (why := buildable(tower)) is not None:
            raise GptcalcError(why)
        self.tower, lay = tower, layout_of(tower)
        roles = tower_roles(name, tower)
        stack = f"{lay['root']}.{lay['layers']}"
        block = tower_block(tower)
        scales = tuple(lay.get("layer_scale", ())) if tower.layer_scale else ()
        with torch.device(device):
            self.layers = [place(self, f"{stack}.{i}", Layer(block, _layer(roles, i, f"{stack}.{i}.", scales), lay, 1))
                           for i in range(tower.n_layers)]
            outer = {role: slot for role, slot in roles.items()
                     if not role.startswith("layer.") or role.rpartition(".")[2] in scales}
            self.weights = build_weights(self, outer, make_norm(self._norm_spec), conv1d=False)
        self.scales = [[self.weights.tensor(f"layer.{i}.{scale}") for scale in scales] for i in range(tower.n_layers)]
        if device != "meta":
            initialise(self, roles)

    def _norm_spec(self, role: str) -> object:
        """The spec of the norm at `role`: the post norm, or a projector's."""
        if role == "post_norm":
            return self.tower.post_norm
        return next(p.norm for p in self.tower.projectors if role.startswith(f"{p.name}."))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """Image features [N, tokens, text width] of pixels [N, channels, H, W]."""
        t, w = self.tower, self.weights
        x = F.conv2d(pixels, w.tensor("patch.weight"), w.tensor("patch.bias"), stride=t.patch_size)
        x = x.flatten(2).transpose(1, 2)  # (N, patches, d)
        if t.class_token:
            x = torch.cat((w.tensor("class").reshape(1, 1, -1).expand(x.shape[0], 1, -1), x), dim=1)
        table = w["positions"].weight if isinstance(w["positions"], nn.Module) else w.tensor("positions")
        x = x + table.reshape(-1, t.d_model)[: x.shape[1]]
        ctx = Context(torch.arange(x.shape[1], device=x.device), None, no_trace, causal=False)
        for ctx.layer, layer in enumerate(self.layers):
            x = self._scaled(layer, x, ctx, self.scales[ctx.layer]) if t.layer_scale else layer(x, ctx)
        if "post_norm" in w:
            x = w["post_norm"](x)
        return self._internvl_projector(x) if t.kind == "internvl" else self._gemma3_projector(x)

    @staticmethod
    def _scaled(layer: Layer, x: torch.Tensor, ctx: Context, scales: list[torch.Tensor]) -> torch.Tensor:
        """InternViT's layer: each sublayer's output times its learned per-channel scale before the add."""
        x = x + scales[0] * layer.parts["attn"](layer.norms["attn_in"](x), ctx)
        return x + scales[1] * layer.parts["mlp"](layer.norms["mlp_in"](x), ctx)

    def _gemma3_projector(self, x: torch.Tensor) -> torch.Tensor:
        """Gemma3MultiModalProjector: the side x side patch grid average-pooled to √tokens a side, then
        the RMSNorm and the [vision, text] matrix."""
        projector, w = self.tower.projectors[0], self.weights
        N, patches, d = x.shape
        side, pooled = math.isqrt(patches), math.isqrt(self.tower.images.tokens_per_image)
        grid = x.transpose(1, 2).reshape(N, d, side, side)
        x = F.avg_pool2d(grid, side // pooled).flatten(2).transpose(1, 2)  # (N, tokens, d)
        return w[f"{projector.name}.0.norm"](x) @ w.tensor(f"{projector.name}.0.0")

    def _internvl_projector(self, x: torch.Tensor) -> torch.Tensor:
        """InternVLModel.get_image_features: the class token dropped, each 2 x 2 of the patch grid
        shuffled into one 4d-wide token (InternVLModel.pixel_shuffle), then the projector."""
        projector, w = self.tower.projectors[0], self.weights
        x = x[:, 1:]
        N, patches, d = x.shape
        side, r = math.isqrt(patches), math.isqrt(projector.norm_width // d)  # r = 1 / downsample_ratio
        x = x.reshape(N, side, side // r, d * r).permute(0, 2, 1, 3)  # (N, side/r, side, r·d)
        x = x.reshape(N, side // r, side // r, d * r * r).permute(0, 2, 1, 3).reshape(N, -1, d * r * r)
        x = F.gelu(w[f"{projector.name}.0.0"](w[f"{projector.name}.0.norm"](x)))
        return w[f"{projector.name}.0.1"](x)


def _layer(roles: dict[str, Slot], i: int, prefix: str, scales: tuple[str, ...] = ()) -> dict[str, Slot]:
    """Encoder layer i's slots, by their layer roles and named relative to the layer (its layer
    scales left to the tower, which applies them)."""
    own = f"layer.{i}."
    return {role[len(own):]: replace(slot, name=slot.name[len(prefix):]) for role, slot in roles.items()
            if role.startswith(own) and role[len(own):] not in scales}
