"""Kimi Delta Attention, as transformers' KimiLinearDeltaAttention computes it (its torch path:
chunk_kimi_delta_attention for a prefill, recurrent_kimi_delta_attention for a cached step, the
same recurrence).

The gated DeltaNet's delta rule (`calc.reference.parts.gated_deltanet.delta_rule`) with H heads of
D, as many key heads as value heads, K = H·D:

    projections: q, k, v (K each, three matrices); conv: silu(depthwise causal conv) over q | k | v
    per head:    q and k L2-normalised, q scaled by D^-1/2; beta = sigmoid(b_proj(x))
                 g = -exp(A_log) · softplus(f_b(f_a(x)) + dt_bias): a log decay per key channel,
                 not per head (KimiLinearForgetGate), so each row of S decays at its own rate
                 S = diag(exp(g_t)) S;  S += k_t ⊗ beta_t (v_t - S^T k_t);  o_t = S^T q_t      (S: D x D)
    norm:        RMSNorm of o over each head's D channels (one weight shared by the heads), times
                 sigmoid(g_b(g_a(x))) after normalising (KimiLinearRMSNormGated)
    o_proj:      K -> d

The recurrence runs in float32; the cache keeps the conv window [B, 3K, L - 1] and S [B, H, D, D]
(in float32: the spec's state_dtype, transformers' update_recurrent_state(... .to(torch.float32))).
The conv's activation is SiLU: the spec has no field for it (transformers reads hidden_act, "silu").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from calc.parts.kda import KimiDeltaAttention as KDASpec
from calc.reference.parts.gated_deltanet import delta_rule, l2_normalised
from calc.reference.parts.norm import gated_rms_norm
from calc.reference.parts.stateful import GatedNormMixer, cached, causal_conv, keep_states

__all__ = ["KimiDeltaAttention"]


class KimiDeltaAttention(GatedNormMixer):
    ROLES = frozenset({"kda_q", "kda_k", "kda_v", "kda_conv", "kda_f_a", "kda_f_b", "kda_dt_bias", "kda_a_log", "kda_b",
                       "kda_g_a", "kda_g_b", "kda_norm", "kda_out"})

    def __init__(self, spec: KDASpec, eps: float) -> None:
        super().__init__(spec, eps)
        self.roles = {"attn_out": "kda_out"}

    def _low_rank(self, x: torch.Tensor, gate: str, trace: Any) -> torch.Tensor:
        """A gate's d -> D -> K projection (the forget gate's f_a, f_b; the output gate's g_a, g_b)."""
        w = self.weights
        low = w[f"kda_{gate}_a"](x)  # (B, T, D)
        trace(f"kda_{gate}_a", low)
        y = w[f"kda_{gate}_b"](low)  # (B, T, K)
        trace(f"kda_{gate}_b", y)
        return y

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        H, D = s.n_heads, s.head_dim
        projected = []
        for role in ("kda_q", "kda_k", "kda_v"):
            projected.append(w[role](x))  # (B, T, K)
            trace(role, projected[-1])
        qkv, window = causal_conv(torch.cat(projected, dim=-1), w.tensor("kda_conv.weight"), None, ctx)
        trace("kda_conv", qkv)  # (B, T, 3K)
        qkv = F.silu(qkv)
        trace("kda_act", qkv)  # q and k are L2-normalised next, per head
        q, k, v = (t.float().reshape(B, T, H, D) for t in qkv.split(s.width, dim=-1))
        q, k = l2_normalised(q) * D ** -0.5, l2_normalised(k)
        f = self._low_rank(x, "f", trace).float() + w.tensor("kda_dt_bias").float()
        g = -torch.exp(w.tensor("kda_a_log").float().view(H, 1)) * F.softplus(f.view(B, T, H, D))  # (B, T, H, D)
        b = w["kda_b"](x)  # (B, T, H)
        trace("kda_b", b)
        beta = torch.sigmoid(b.float())
        state = cached(ctx, "recurrent", (B, H, D, D), v)
        o, state = delta_rule(q, k, v, g, beta, state)
        keep_states(ctx, T, window, state, s.state_dtype)  # (B, 3K, L - 1), (B, H, D, D)
        o = o.to(x.dtype)  # (B, T, H, D)
        trace("kda_scan", o)
        gate = self._low_rank(x, "g", trace)
        y = gated_rms_norm(o, gate.view_as(o), w["kda_norm"], D, gate_first=False, act=torch.sigmoid)
        trace("kda_norm", y)  # (B, T, H, D)
        y = w["kda_out"](y.reshape(B, T, s.width))  # (B, T, d)
        trace("kda_out", y)
        return y
