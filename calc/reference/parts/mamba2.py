"""Mamba2's selective state-space mixer, as transformers' torch path computes it (Mamba2Mixer,
NemotronHMamba2Mixer, BambaMixer, GraniteMoeHybridMambaLayer: the same code).

With H heads of P channels, inner width I = H·P, G groups of N-wide B and C, and a conv of K taps:

    in_proj:  x -> z (the gate, I) | xBC (the conv's input, I + 2·G·N) | dt (one per head, H)
    conv:     xBC -> silu(depthwise causal conv)            then split into x (H x P), B and C (G x N)
    scan:     dt = softplus(dt + dt_bias), A = -exp(A_log); per head h, with its group's B and C,
              S_t = exp(dt_t·A) S_{t-1} + dt_t · x_t ⊗ B_t         (S: P x N, zero at the start)
              y_t = S_t C_t + D · x_t
    norm:     RMSNorm of y·silu(z) over each of the G groups of I / G channels, times its weight
              (the gate first: norm_before_gate=False), or RMSNorm(y)·silu(z) (Falcon-H1's
              norm_before_gate); without the norm (Falcon-H1's option) y·silu(z)
    Falcon-H1 also scales in_proj's five sections (z, x, B, C, dt) by its ssm_multipliers (`proj_scales`).
    out_proj: I -> d

transformers computes the scan in chunks (the SSD form) for a prefill and the recurrence above for
a cached step; both are this recurrence, which is computed here one position at a time in float32
(exact to float rounding; T·H·P·N work, nothing quadratic). The cache keeps the conv window
[B, I + 2GN, K - 1] and S [B, H, P, N]: fixed per sequence, the mixer's `CacheSpec.states`.
The conv's activation is SiLU: the spec has no field for it (transformers reads hidden_act or
mamba_hidden_act, "silu" in every config; the causal-conv1d kernels implement only SiLU).
The spec's `dt_min` floors dt where transformers' chunked scan does (its `time_step_limit`, Zamba2's
time_step_min): in a prefill, and in any step without a kept state, but not in a cached one-token
step, whose recurrent update has no floor. (Nemotron-H's mixer has the same floor; its adapter does
not state it yet, which changes nothing unless softplus(dt + dt_bias) falls below 0.001.)
Not modelled: Mamba2Block's residual_in_fp32, which changes nothing in float32.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from calc.parts.mamba2 import Mamba2 as Mamba2Spec
from calc.reference.parts.norm import gated_rms_norm
from calc.reference.parts.stateful import GatedNormMixer, cached, causal_conv, keep_states

__all__ = ["Mamba2", "selective_scan"]


def selective_scan(x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                   state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The SSM recurrence in float32: x [B, T, H, P], dt [B, T, H] (after softplus), a [H] (negative),
    b and c [B, T, H, N] (each head's group's), state [B, H, P, N]; returns y [B, T, H, P] (without
    the D skip) and the state after the last position."""
    ys = []
    for t in range(x.shape[1]):
        decay = torch.exp(dt[:, t] * a)[..., None, None]  # (B, H, 1, 1)
        state = state * decay + (dt[:, t, :, None] * x[:, t])[..., None] * b[:, t, :, None, :]  # (B, H, P, N)
        ys.append((state * c[:, t, :, None, :]).sum(-1))  # (B, H, P)
    return torch.stack(ys, dim=1), state


class Mamba2(GatedNormMixer):
    ROLES = frozenset({"ssm_in", "ssm_conv", "ssm_dt_bias", "ssm_a_log", "ssm_d", "ssm_norm", "ssm_out"})

    def __init__(self, spec: Mamba2Spec, eps: float) -> None:
        super().__init__(spec, eps)
        self.roles = {"attn_out": "ssm_out"}

    def _section_scales(self, like: torch.Tensor) -> torch.Tensor:
        """in_proj's output width, each section's channels holding its multiplier (compute_mup_vector)."""
        s = self.spec
        widths = (s.d_inner, s.d_inner, s.n_groups * s.d_state, s.n_groups * s.d_state, s.n_heads)
        return torch.cat([like.new_full((n,), scale) for n, scale in zip(widths, s.proj_scales)])

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        H, P, N, G = s.n_heads, s.head_dim, s.d_state, s.n_groups
        projected = w["ssm_in"](x)  # (B, T, I + C + H)
        if s.proj_scales is not None:  # Falcon-H1's mup_vector: z, x, B, C, dt each times its multiplier
            projected = projected * self._section_scales(projected)
        trace("ssm_in", projected)
        z, xbc, dt = projected.split([s.d_inner, s.conv_dim, H], dim=-1)
        xbc, window = causal_conv(xbc, w.tensor("ssm_conv.weight"), w.tensor("ssm_conv.bias"), ctx)
        trace("ssm_conv", xbc)  # (B, T, I + 2GN)
        xbc = F.silu(xbc)
        trace("ssm_act", xbc)
        h, b, c = xbc.split([s.d_inner, G * N, G * N], dim=-1)
        h = h.reshape(B, T, H, P).float()
        b, c = (t.reshape(B, T, G, N).float().repeat_interleave(H // G, dim=2) for t in (b, c))  # (B, T, H, N)
        dt = F.softplus(dt.float() + w.tensor("ssm_dt_bias").float())  # (B, T, H)
        kept = ctx.cache.state(ctx.layer, "recurrent") if ctx.cache is not None else None
        if s.dt_min is not None and (T > 1 or kept is None):  # transformers' chunked scan, not its one-step update
            dt = dt.clamp(min=s.dt_min)
        a = -torch.exp(w.tensor("ssm_a_log").float())  # (H,)
        y, state = selective_scan(h, dt, a, b, c, cached(ctx, "recurrent", (B, H, P, N), h))
        keep_states(ctx, T, window, state, s.state_dtype)  # (B, I + 2GN, K - 1), (B, H, P, N)
        y = (y + w.tensor("ssm_d").float()[:, None] * h).to(x.dtype)  # (B, T, H, P)
        trace("ssm_scan", y)
        y = y.reshape(B, T, s.d_inner)  # (B, T, I)
        if s.gated_norm:
            y = gated_rms_norm(y, z, w["ssm_norm"], s.d_inner // G, gate_first=not s.norm_before_gate)  # (B, T, I)
            trace("ssm_norm", y)
        else:
            y = y * F.silu(z)
            trace("ssm_gate", y)
        y = w["ssm_out"](y)  # (B, T, d)
        trace("ssm_out", y)
        return y
