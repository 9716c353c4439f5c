"""Mamba's (version 1) selective state-space mixer, as transformers' torch path computes it
(MambaMixer, FalconMambaMixer, JambaMambaMixer: mamba_selective_scan for a prefill,
mamba_selective_state_update for a cached step, the same recurrence).

With I = d_inner channels, a state of N per channel, a rank-R dt and a conv of K taps:

    in_proj:  x -> x' (I) | z (the gate, I)
    conv:     x' -> silu(depthwise causal conv, with its bias)
    x_proj:   x' -> dt (R) | B (N) | C (N)       (Jamba: each RMS-normed with its weight; Falcon-Mamba:
              each divided by its RMS, no weight, eps `dt_rms_eps`)
    dt_proj:  dt -> I, plus its bias, softplus;  A = -exp(A_log)  [I, N]
    scan:     per channel c:  S_t = exp(dt_t,c · A_c) S_{t-1} + dt_t,c · x'_t,c · B_t     (S: I x N)
              y_t = S_t C_t + D · x'_t
    gate:     y · silu(z), then out_proj: I -> d

The recurrence runs one position at a time in float32 (T·I·N work); the cache keeps the conv
window [B, I, K - 1] and S [B, I, N], fixed per sequence: the mixer's `CacheSpec.states`. The conv's
activation is SiLU: the spec has no field for it (every config's hidden_act is "silu").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from calc.parts.mamba import Mamba as MambaSpec
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import Part
from calc.reference.parts.stateful import cached, causal_conv, keep_states

__all__ = ["Mamba"]


def channel_scan(x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                 state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-channel SSM recurrence in float32: x and dt [B, T, I], a [I, N], b and c [B, T, N],
    state [B, I, N]; returns y [B, T, I] (without the D skip) and the state after the last position."""
    ys = []
    for t in range(x.shape[1]):
        decay = torch.exp(dt[:, t, :, None] * a)  # (B, I, N)
        state = state * decay + (dt[:, t] * x[:, t])[..., None] * b[:, t, None, :]
        ys.append((state * c[:, t, None, :]).sum(-1))  # (B, I)
    return torch.stack(ys, dim=1), state


def _rms(t: torch.Tensor, eps: float) -> torch.Tensor:
    """Falcon-Mamba's weightless RMS normalisation (FalconMambaWeightlessRMSNorm), in float32."""
    f = t.float()
    return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)).type_as(t)


class Mamba(Part):
    ROLES = frozenset({"ssm_in", "ssm_conv", "ssm_x_proj", "ssm_dt_norm", "ssm_b_norm", "ssm_c_norm", "ssm_dt_proj",
                       "ssm_a_log", "ssm_d", "ssm_out"})

    def __init__(self, spec: MambaSpec, eps: float) -> None:
        super().__init__()
        self.spec, self.eps = spec, eps
        self.roles = {"attn_out": "ssm_out"}

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "Mamba":
        """Jamba's dt, B and C norms take the model's rms_norm_eps, the block norm's."""
        return cls(block.attention, block.norm.eps)

    def norm_spec(self, role: str) -> NormSpec:
        return NormSpec.model_construct(kind="rmsnorm", bias=False, eps=self.eps)

    def _normed(self, dt: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Jamba's RMSNorms on dt, B and C, Falcon-Mamba's weightless ones, or none (Mamba)."""
        s, w = self.spec, self.weights
        if s.dt_norms:
            return w["ssm_dt_norm"](dt), w["ssm_b_norm"](b), w["ssm_c_norm"](c)
        if s.dt_rms_eps is not None:
            return tuple(_rms(t, s.dt_rms_eps) for t in (dt, b, c))
        return dt, b, c

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        projected = w["ssm_in"](x)  # (B, T, 2I)
        trace("ssm_in", projected)
        h, z = projected.chunk(2, dim=-1)
        h, window = causal_conv(h, w.tensor("ssm_conv.weight"), w.tensor("ssm_conv.bias"), ctx)
        trace("ssm_conv", h)  # (B, T, I)
        h = F.silu(h)
        trace("ssm_act", h)
        low = w["ssm_x_proj"](h)  # (B, T, R + 2N)
        trace("ssm_x_proj", low)
        dt, b, c = self._normed(*low.split([s.dt_rank, s.d_state, s.d_state], dim=-1))
        dt = w["ssm_dt_proj"](dt)  # (B, T, I), with its bias
        trace("ssm_dt_proj", dt)
        dt = F.softplus(dt.float())
        a = -torch.exp(w.tensor("ssm_a_log").float())  # (I, N)
        hf = h.float()
        y, state = channel_scan(hf, dt, a, b.float(), c.float(),
                                cached(ctx, "recurrent", (B, s.d_inner, s.d_state), hf))
        keep_states(ctx, T, window, state, s.state_dtype)  # (B, I, K - 1), (B, I, N)
        y = (y + w.tensor("ssm_d").float() * hf).to(x.dtype)  # (B, T, I)
        trace("ssm_scan", y)
        y = y * F.silu(z)
        trace("ssm_gate", y)
        y = w["ssm_out"](y)  # (B, T, d)
        trace("ssm_out", y)
        return y
