"""MiniMax's lightning attention, as transformers' MiniMaxLightningAttention computes it.

With h heads of hd, W = h·hd:

    qkv:   silu(qkv_proj(x)), each head's q, k, v side by side ([.., h, 3·hd])
    scan:  per head, S = λ·S + k_tᵀ v_t, o_t = q_t S   (S: hd x hd, zeros at the start)
    norm:  RMSNorm over all W channels (MiniMaxRMSNorm's default eps, 1e-6: transformers passes none)
    gate:  sigmoid(output_gate(x)) times the normed output, then out_proj: W -> d

The decay λ = exp(-rate) is fixed per head and layer (transformers' buffers, recomputed here):
rate_i = b^(i+1)·(1 - layer / (L - 1 + 1e-5) + 1e-5) for head i of layer `layer` of L, with
b = 2^(-8/h). transformers' prefill computes the same sum block by block (block_size positions
at a time, exact decay tables inside a block), its cached steps one position at a time; this
module runs the recurrence one position at a time for both. The cache keeps S [B, h, hd, hd] in
the values' dtype (MiniMaxCache's linear_cache, the spec's state_dtype), whatever the length.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from calc.parts.lightning import LightningAttention as LightningSpec
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import Part
from calc.reference.parts.stateful import cached, keep_states

__all__ = ["Lightning", "decay"]

NORM = NormSpec.model_construct(kind="rmsnorm", weight=True, bias=False, eps=1e-6, unit_offset=False)


def decay(n_heads: int, layer: int, n_layers: int) -> torch.Tensor:
    """Each head's λ [h, 1, 1] at `layer` of `n_layers` (MiniMaxLightningAttention.get_slope_rate)."""
    base = 1 / (2 ** (8 / n_heads))
    rate = base ** (torch.arange(n_heads, dtype=torch.float32) + 1) * (1 - layer / (n_layers - 1 + 1e-5) + 1e-5)
    return torch.exp(-rate)[:, None, None]


class Lightning(Part):
    ROLES = frozenset({"la_qkv", "la_norm", "la_gate", "la_out"})

    def __init__(self, spec: LightningSpec) -> None:
        super().__init__()
        self.spec = spec
        self.roles = {"attn_out": "la_out"}

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "Lightning":
        return cls(block.attention)

    def norm_spec(self, role: str) -> NormSpec:
        return NORM

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        qkv = w["la_qkv"](x)  # (B, T, 3W)
        trace("la_qkv", qkv)
        qkv = F.silu(qkv)
        trace("la_act", qkv)
        q, k, v = qkv.view(B, T, s.n_heads, 3 * s.head_dim).transpose(1, 2).split(s.head_dim, dim=-1)  # (B, h, T, hd)
        lam = decay(s.n_heads, ctx.layer, ctx.n_layers).to(v.dtype)
        state = cached(ctx, "recurrent", (B, s.n_heads, s.head_dim, s.head_dim), v)
        outs = []
        for t in range(T):
            state = lam * state + k[:, :, t, :, None] * v[:, :, t, None, :]  # (B, h, hd, hd)
            outs.append(q[:, :, t, None, :] @ state)  # (B, h, 1, hd)
        keep_states(ctx, T, None, state, s.state_dtype, model_dtype=x.dtype)  # (B, h, hd, hd)
        o = torch.cat(outs, dim=2).transpose(1, 2)  # (B, T, h, hd)
        trace("la_scan", o)
        o = w["la_norm"](o.reshape(B, T, s.width))  # (B, T, W)
        trace("la_norm", o)
        gate = w["la_gate"](x)  # (B, T, W)
        trace("la_gate", gate)
        y = w["la_out"](torch.sigmoid(gate) * o)  # (B, T, d)
        trace("la_out", y)
        return y
