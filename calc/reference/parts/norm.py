"""LayerNorm and RMSNorm as transformers computes them: in float32, cast back at the end.

An RMSNorm scales by its weight (Gemma's by 1 + weight, `unit_offset`); a LayerNorm may have a scale,
a bias, both or neither (OLMo-1's only normalises). The weight's shape is the width normalised, or
[heads, head_dim] for Cohere's per-head QK-norm (each head normalised over its own channels).

`gated_rms_norm`: the gated RMSNorms of Mamba2, the gated DeltaNet and Kimi Delta Attention, which
multiply by silu(gate) (KDA: sigmoid(gate)) either before normalising (Mamba2, over each of its groups)
or after (the DeltaNet and KDA, over each head).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from calc.parts.norm import Norm as NormSpec

__all__ = ["Norm", "gated_rms_norm"]


class Norm(nn.Module):
    def __init__(self, spec: NormSpec, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.spec = spec
        self.weight = nn.Parameter(torch.empty(shape)) if spec.weight else None
        self.bias = nn.Parameter(torch.empty(shape)) if spec.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, x32 = self.spec, x.float()
        if s.kind == "rmsnorm":
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + s.eps)
        else:
            y = F.layer_norm(x32, x32.shape[-1:], eps=s.eps)
        if self.weight is not None:
            y = y * (1.0 + self.weight.float() if s.unit_offset else self.weight.float())
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, norm: Norm, group: int, gate_first: bool,
                   act: Callable[[torch.Tensor], torch.Tensor] = F.silu) -> torch.Tensor:
    """RMSNorm over each `group` consecutive channels of x [..., C] times `norm`'s weight ([C], or [group]
    shared by every group), gated by act(gate) [..., C] (silu; Kimi Delta Attention's sigmoid): before
    normalising (`gate_first`, Mamba2's MambaRMSNormGated, norm_before_gate=False) or after (Qwen3-Next's
    RMSNormGated, KimiLinearRMSNormGated). In float32, as all compute it; the weight is applied as stored
    (none is zero-centred)."""
    x32, gating = x.float(), act(gate.float())
    if gate_first:
        x32 = x32 * gating
    grouped = x32.unflatten(-1, (-1, group))  # (..., C / group, group)
    scale = norm.weight.float().view(-1, group)  # (C / group, group), or (1, group) when shared
    y = (grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + norm.spec.eps) * scale).flatten(-2)
    return (y if gate_first else y * gating).to(x.dtype)
