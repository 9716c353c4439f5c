"""LFM2's gated short convolution (`conv` layers of Liquid's LFM2 and LFM2-MoE).

A token mixer of three d-wide projections (B, C and x), a depthwise causal conv of L taps over
B·x, the product with C, and an output projection (transformers' Lfm2ShortConv), d = d_model:

    conv_in  = d·3d (+ 3d bias)      conv = d·L (+ d bias)      conv_out = d·d (+ d bias)

Per sequence it keeps the conv's last L - 1 inputs, d·(L-1) elements, whatever the length.
"""

from __future__ import annotations

from typing import Literal

from calc.parts.base import Field, Part, present
from calc.parts.cache import CacheSpec, StateSpec
from calc.parts.transient import Graph, tensor

__all__ = ["LABELS", "ShortConv"]


class ShortConv(Part):
    kind: Literal["short_conv"] = "short_conv"
    kernel: int = Field(gt=0)  # conv_L_cache
    bias: bool = False  # conv_bias: on both projections and the conv

    def params(self, d_model: int) -> dict[str, int]:
        d = d_model
        return present(conv_in=d * 3 * d, conv_in_bias=3 * d * self.bias, conv=d * self.kernel, conv_bias=d * self.bias,
                       conv_out=d * d, conv_out_bias=d * self.bias)

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        return {"conv_in": (d_model, 1), "conv_out": (d_model, 1)}

    def cache(self, d_model: int) -> CacheSpec:
        return CacheSpec(states=(StateSpec("conv", d_model, self.kernel - 1, d_model),))

    def transient(self, g: Graph) -> int:
        """LFM2's short conv (src/models/lfm2.cpp): in_proj's three d-wide views, B·x, the conv over the window
        and C·conv."""
        d, n = g.d_model, g.n_tokens
        return tensor(3 * d * n) + tensor(d * n) + tensor(d * (n + self.kernel - 1)) + tensor(d * n)

    def describe(self) -> str:
        return f"short conv ({self.kernel} taps)"


LABELS = {
    "conv_in": "conv in (B, C, x)",
    "conv_in_bias": "conv in bias",
    "conv": "short conv",
    "conv_bias": "short conv bias",
    "conv_out": "conv out",
    "conv_out_bias": "conv out bias",
}
