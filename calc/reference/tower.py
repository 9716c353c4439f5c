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
    Qwen2.5-VL, Qwen3-VL, Qwen3.5 (2-D rotary, window attention, patch and DeepStack mergers):
                `calc.reference.qwen_vision`, on these same weights and layers
    Pixtral + Mistral 3's projector (2-D rotary, the patch merger): `calc.reference.pixtral_vision`
    Llama 4 (2-D rotary, the class token last, the pixel-shuffle adapter): `calc.reference.llama4_vision`
    Gemma 4 (two-axis position tables, 2-D rotary, sandwich norms, the pooler): `calc.reference.gemma4_vision`
    Kimi-K2.5's MoonViT (the position grid resampled, 2-D rotary, the patch merger): `calc.reference.moonvit_vision`
    MiniMax-M3 (3-D partial rotary, CLIP layers, the two-stage projector): `calc.reference.minimax_m3_vision`
    Step-3.7 (crops and a global view, 2-D rotary, layer scales, the conv downsamplers):
                `calc.reference.step3p7_vision`

    SigLIP + LLaVA-OneVision's projector and anyres packing (tiles, unpadding, the anyres_max shrink, newlines):
                `calc.reference.llava_vision`

The audio Conformers (Gemma 4's, Gemma 3n's) run in `calc.reference.conformer`; a tower this module
cannot run (a LLaVA-OneVision rule it does not follow) is refused by name.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from calc.checkpoint.names import Slot
from calc.checkpoint.tower_slots import layout_of, tower_block, tower_roles
from calc.errors import GptcalcError
from calc.reference import (gemma4_vision, llama4_vision, llava_vision, minimax_m3_vision, moonvit_vision,
                             pixtral_vision, qwen_vision, step3p7_vision)
from calc.reference.model import Context
from calc.reference.parts.base import build_weights, initialise, no_trace, place
from calc.reference.parts.block import Layer, make_norm
from calc.towers import Tower

__all__ = ["VisionTower", "buildable", "runner_of"]

# Tower kinds computed by a module of their own (features, transformers_inputs) on these weights.
RUNNERS = {kind: module for module in (qwen_vision, pixtral_vision, llama4_vision, gemma4_vision, moonvit_vision,
                                         minimax_m3_vision, step3p7_vision)
           for kind in module.KINDS}


def buildable(tower: Tower) -> str | None:
    """Why the reference cannot build `tower` (None: it can)."""
    gemma3 = tower.kind == "siglip" and len(tower.projectors) == 1 and tower.projectors[0].norm is not None
    if tower.kind == "siglip" and tower.newline:
        return llava_vision.unbuildable(tower)
    return None if gemma3 or tower.kind == "internvl" or tower.kind in RUNNERS else (
        f"the torch reference builds SigLIP with Gemma 3's or LLaVA-OneVision's projector, InternVL, the "
        f"Qwen-VL towers, Pixtral, Llama 4, Gemma 4, MoonViT, MiniMax-M3 and Step-3.7 only; {tower.kind} towers are "
        "counted and checked in checkpoints, not run")


def runner_of(tower: Tower) -> Any:
    """The module computing `tower` (features, transformers_inputs), or None: this one's own forward.
    SigLIP with an image newline is LLaVA-OneVision's tower (anyres packing)."""
    return llava_vision if tower.kind == "siglip" and tower.newline else RUNNERS.get(tower.kind)


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
        """The spec of the norm at `role`: the pre or post norm, or a projector's."""
        if role in ("pre_norm", "post_norm"):
            return getattr(self.tower, role)
        return next(p.norm for p in self.tower.projectors if role.startswith(f"{p.name}."))

    def transformers_inputs(self, pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the model's get_image_features takes for these pixels: the pixels, or what a tower
        kind's own module says (a Qwen tower's flattened patches and grid_thw)."""
        runner = runner_of(self.tower)
        return {"pixel_values": pixels} if runner is None else runner.transformers_inputs(self, pixels)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """Image features [N, tokens, text width] of pixels [N, channels, H, W] (N = 1 for a kind with
        a module of its own)."""
        t, w = self.tower, self.weights
        if (runner := runner_of(t)) is not None:
            return runner.features(self, pixels)
        x = self.hidden_states(pixels)[-1]
        if "post_norm" in w:
            x = w["post_norm"](x)
        return self._internvl_projector(x) if t.kind == "internvl" else self._gemma3_projector(x)

    def hidden_states(self, pixels: torch.Tensor) -> list[torch.Tensor]:
        """A learned-position ViT's hidden states [N, patches (+ class), d] of pixels [N, C, H, W]: the
        embeddings (the conv, the class token in front, the position table), then each layer's output."""
        t, w = self.tower, self.weights
        x = F.conv2d(pixels, w.tensor("patch.weight"), w.tensor("patch.bias"), stride=t.patch_size)
        x = x.flatten(2).transpose(1, 2)  # (N, patches, d)
        if t.class_token:
            x = torch.cat((w.tensor("class").reshape(1, 1, -1).expand(x.shape[0], 1, -1), x), dim=1)
        table = w["positions"].weight if isinstance(w["positions"], nn.Module) else w.tensor("positions")
        return self._encoded(x + table.reshape(-1, t.d_model)[: x.shape[1]])

    def rotary_states(self, x: torch.Tensor, rotary: object) -> list[torch.Tensor]:
        """A rotary ViT's hidden states (Pixtral's, Llama 4's, MiniMax-M3's, Step-3.7's) from its embeddings
        x [N, positions, d]: every layer's attention turned by `rotary`."""
        for layer in self.layers:
            layer.parts["attn"].rotary = rotary
        return self._encoded(x)

    def _encoded(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The embeddings x [N, positions, d], then each layer's output: every position seeing every other,
        each sublayer scaled where the tower has layer scales (InternViT's, Step-3.7's)."""
        ctx = Context(torch.arange(x.shape[1], device=x.device), None, no_trace, causal=False)
        states = [x]
        for ctx.layer, layer in enumerate(self.layers):
            x = states[-1]
            states.append(self._scaled(layer, x, ctx, self.scales[ctx.layer]) if self.tower.layer_scale else layer(x, ctx))
        return states

    @staticmethod
    def _scaled(layer: Layer, x: torch.Tensor, ctx: Context, scales: list[torch.Tensor]) -> torch.Tensor:
        """InternViT's and Step-3.7's layer: each sublayer's output times its learned per-channel scale
        before the add."""
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
        r = math.isqrt(projector.norm_width // self.tower.d_model)  # r = 1 / downsample_ratio
        x = llama4_vision.pixel_shuffle(x, r)
        x = F.gelu(w[f"{projector.name}.0.0"](w[f"{projector.name}.0.norm"](x)))
        return w[f"{projector.name}.0.1"](x)


def _layer(roles: dict[str, Slot], i: int, prefix: str, scales: tuple[str, ...] = ()) -> dict[str, Slot]:
    """Encoder layer i's slots, by their layer roles and named relative to the layer (its layer
    scales left to the tower, which applies them)."""
    own = f"layer.{i}."
    return {role[len(own):]: replace(slot, name=slot.name[len(prefix):]) for role, slot in roles.items()
            if role.startswith(own) and role[len(own):] not in scales}
