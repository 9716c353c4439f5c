"""LFM2's gated short convolution, as transformers' Lfm2ShortConv computes it (its slow path).

in_proj gives three d-wide streams B, C and x; the depthwise causal conv (no activation) runs over
B·x, its output is multiplied by C, and out_proj maps it back. The only state is the conv's
window: the last kernel - 1 values of B·x per channel, [B, d, K - 1].
"""

from __future__ import annotations

from typing import Any

import torch

from calc.parts.short_conv import ShortConv as ShortConvSpec
from calc.reference.parts.base import Part
from calc.reference.parts.stateful import causal_conv, keep_states

__all__ = ["ShortConv"]


class ShortConv(Part):
    ROLES = frozenset({"conv_in", "conv", "conv_out"})

    def __init__(self, spec: ShortConvSpec) -> None:
        super().__init__()
        self.spec = spec
        self.roles = {"attn_out": "conv_out"}

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "ShortConv":
        return cls(block.attention)

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        w, trace = self.weights, ctx.trace
        bcx = w["conv_in"](x)  # (B, T, 3d)
        trace("conv_in", bcx)
        b, c, h = bcx.chunk(3, dim=-1)  # (B, T, d) each: B, C, x
        h = b * h
        trace("conv_gate_in", h)
        h, window = causal_conv(h, w.tensor("conv.weight"), w.tensor("conv.bias"), ctx)  # (B, T, d)
        keep_states(ctx, x.shape[1], window)
        trace("conv", h)
        y = c * h
        trace("conv_gate_out", y)
        y = w["conv_out"](y)  # (B, T, d)
        trace("conv_out", y)
        return y
