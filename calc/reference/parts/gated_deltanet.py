"""The gated DeltaNet of Qwen3-Next and Qwen3.5, as transformers' torch path computes it
(Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet: torch_chunk_gated_delta_rule for a prefill,
torch_recurrent_gated_delta_rule for a cached step, the same recurrence).

With H_k key heads of D_k, H_v value heads of D_v (each key head serves r = H_v / H_k consecutive
value heads), K = H_k·D_k and V = H_v·D_v:

    projections: q, k (K each), v (V), the output gate z (V), b and a (one per value head)
    conv:        silu(depthwise causal conv) over q | k | v, then split into heads
    per value head, with its key head's q and k L2-normalised and q scaled by D_k^-1/2:
                 beta = sigmoid(b), g = -exp(A_log) · softplus(a + dt_bias)
                 S = exp(g_t) S;  S += k_t ⊗ beta_t (v_t - S^T k_t);  o_t = S^T q_t      (S: D_k x D_v)
    norm:        RMSNorm of o over each head's D_v channels (one weight shared by the heads), times
                 silu(z) after normalising
    out_proj:    V -> d

`neg_eigval` (OLMo-Hybrid) doubles beta, so the state may flip a direction (an eigenvalue in [-1, 1]).
Qwen3-Next fuses the projections (in_proj_qkvz, in_proj_ba) per key head: for each, its q, k, then
its r value heads' v and z (and its r b's, then r a's), which `_project` takes apart; Qwen3.5
stores in_proj_qkv (q | k | v), in_proj_z, in_proj_b and in_proj_a; OLMo-Hybrid q, k, v apart. The recurrence runs one
position at a time in float32; the cache keeps the conv window [B, 2K + V, L - 1] and S
[B, H_v, D_k, D_v]. The conv's activation is SiLU: the spec has no field for it (transformers
reads hidden_act, "silu" in every config).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from calc.parts.gated_deltanet import GatedDeltaNet as DeltaNetSpec
from calc.reference.parts.norm import gated_rms_norm
from calc.reference.parts.stateful import GatedNormMixer, cached, causal_conv, keep_states

__all__ = ["GatedDeltaNet", "delta_rule"]

L2_EPS = 1e-6  # transformers' l2norm (and FLA's kernels) use this epsilon


def l2_normalised(t: torch.Tensor) -> torch.Tensor:
    return t * torch.rsqrt((t * t).sum(-1, keepdim=True) + L2_EPS)


def delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule in float32: q, k [B, T, H, D_k] (per value head), v [B, T, H, D_v], the log
    decay g [B, T, H, 1] (one per head) or [B, T, H, D_k] (one per key channel: Kimi Delta Attention),
    beta [B, T, H], state [B, H, D_k, D_v]; returns o [B, T, H, D_v] and the state after the last position."""
    outs = []
    for t in range(q.shape[1]):
        state = state * torch.exp(g[:, t])[..., None]  # each row of S (a key channel) decays
        remembered = (state * k[:, t, ..., None]).sum(-2)  # (B, H, D_v): what S already holds for k_t
        delta = (v[:, t] - remembered) * beta[:, t, :, None]
        state = state + k[:, t, ..., None] * delta[..., None, :]
        outs.append((state * q[:, t, ..., None]).sum(-2))  # (B, H, D_v)
    return torch.stack(outs, dim=1), state


class GatedDeltaNet(GatedNormMixer):
    ROLES = frozenset({"gdn_qkvz", "gdn_ba", "gdn_qkv", "gdn_q", "gdn_k", "gdn_v", "gdn_z", "gdn_b", "gdn_a", "gdn_conv",
                       "gdn_dt_bias", "gdn_a_log", "gdn_norm", "gdn_out"})

    def __init__(self, spec: DeltaNetSpec, eps: float) -> None:
        super().__init__(spec, eps)
        self.roles = {"attn_out": "gdn_out"}

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q | k | v [B, T, 2K + V] (the conv's channel order), z [B, T, V], b and a [B, T, H_v]."""
        s, w = self.spec, self.weights
        if "gdn_q" in w:  # OLMo-Hybrid: q, k and v apart
            return torch.cat([w[r](x) for r in ("gdn_q", "gdn_k", "gdn_v")], dim=-1), w["gdn_z"](x), w["gdn_b"](x), w["gdn_a"](x)
        if "gdn_qkvz" not in w:
            return w["gdn_qkv"](x), w["gdn_z"](x), w["gdn_b"](x), w["gdn_a"](x)
        B, T, _ = x.shape
        r = s.n_v_heads // s.n_k_heads
        per_key = w["gdn_qkvz"](x).view(B, T, s.n_k_heads, -1)  # (B, T, H_k, 2 D_k + 2 r D_v)
        q, k, v, z = per_key.split([s.k_head_dim, s.k_head_dim, r * s.v_head_dim, r * s.v_head_dim], dim=-1)
        b, a = w["gdn_ba"](x).view(B, T, s.n_k_heads, 2 * r).split([r, r], dim=-1)
        qkv = torch.cat([t.reshape(B, T, -1) for t in (q, k, v)], dim=-1)
        return qkv, z.reshape(B, T, -1), b.reshape(B, T, -1), a.reshape(B, T, -1)

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        qkv, z, b, a = self._project(x)
        for name, t in (("gdn_qkv", qkv), ("gdn_z", z), ("gdn_b", b), ("gdn_a", a)):
            trace(name, t)
        qkv, window = causal_conv(qkv, w.tensor("gdn_conv.weight"), None, ctx)
        trace("gdn_conv", qkv)  # (B, T, 2K + V)
        qkv = F.silu(qkv)
        trace("gdn_act", qkv)  # q and k are L2-normalised next, per head
        q, k, v = qkv.float().split([s.key_dim, s.key_dim, s.value_dim], dim=-1)
        r = s.n_v_heads // s.n_k_heads
        q, k = (l2_normalised(t.reshape(B, T, s.n_k_heads, s.k_head_dim)).repeat_interleave(r, dim=2)
                for t in (q, k))  # (B, T, H_v, D_k): value head i reads key head i // r
        q = q * s.k_head_dim ** -0.5
        v = v.reshape(B, T, s.n_v_heads, s.v_head_dim)
        beta = torch.sigmoid(b.float()) * (2.0 if s.neg_eigval else 1.0)  # (B, T, H_v); OLMo-Hybrid's in [0, 2]
        g = -torch.exp(w.tensor("gdn_a_log").float()) * F.softplus(a.float() + w.tensor("gdn_dt_bias").float())
        state = cached(ctx, "recurrent", (B, s.n_v_heads, s.k_head_dim, s.v_head_dim), v)
        o, state = delta_rule(q, k, v, g[..., None], beta, state)
        keep_states(ctx, T, window, state, s.state_dtype)  # (B, 2K + V, L - 1), (B, H_v, D_k, D_v)
        o = o.to(x.dtype)  # (B, T, H_v, D_v)
        trace("gdn_scan", o)
        y = gated_rms_norm(o, z.view_as(o), w["gdn_norm"], s.v_head_dim, gate_first=False)  # (B, T, H_v, D_v)
        trace("gdn_norm", y)
        y = w["gdn_out"](y.reshape(B, T, s.value_dim))  # (B, T, d)
        trace("gdn_out", y)
        return y
