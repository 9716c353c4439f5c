"""Multi-head latent attention (DeepSeek-V2/V3), as transformers' DeepseekV3Attention computes it.

Queries: q_proj, or q_a -> its norm -> q_b; each head's query is qk_nope_head_dim channels without
rotary and qk_rope_head_dim with. Keys and values: kv_a_proj_with_mqa gives the kv_lora_rank latent
(normalised) and one shared rotary key; the cache holds exactly those two, and kv_b expands the
latent into each head's non-rotary key and its value at every step. Scores are scaled by
qk_head_dim^-0.5, times YaRN's mscale² when the rope scaling sets mscale_all_dim (transformers'
yarn_apply_mscale for DeepSeek).
"""

from __future__ import annotations

from typing import Any

import torch

from calc.parts.mla import MLA as MLASpec
from calc.reference.parts.attention import attend, split_heads
from calc.reference.parts.base import Part
from calc.reference.parts.norm import Norm
from calc.reference.parts.rope import Rotary, yarn_mscale

__all__ = ["MLA"]


class MLA(Part):
    def __init__(self, spec: MLASpec, n_positions: int) -> None:
        super().__init__()
        self.spec = spec
        self.rotary = Rotary(spec.rope, n_positions) if spec.rope else None
        self.scale = spec.qk_head_dim ** -0.5
        scaling = (spec.rope.scaling or {}) if spec.rope else {}
        if scaling.get("mscale_all_dim") and self.rotary is not None and self.rotary.kind != "default":
            self.scale *= yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
        self.roles = {"attn_out": "o"}

    def norm(self, role: str) -> Norm:
        """A latent norm; one with no parameters still normalises."""
        return self.weights.get(role) or Norm(self.spec.norm, ())

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        q = w["q"](x) if s.q_lora_rank is None else w["q_b"](self.norm("q_a_norm")(w["q_a"](x)))  # (B, T, h*qk)
        q = split_heads(q, s.n_heads)  # (B, h, T, qk)
        q_nope, q_rot = q.split([s.qk_nope_head_dim, s.qk_rope_head_dim], dim=-1)
        latent, k_rot = w["kv_a"](x).split([s.kv_lora_rank, s.qk_rope_head_dim], dim=-1)
        latent = self.norm("kv_a_norm")(latent).view(B, 1, T, s.kv_lora_rank)
        k_rot = k_rot.view(B, 1, T, s.qk_rope_head_dim)
        if self.rotary is not None:
            cos, sin = self.rotary.cos_sin(ctx.positions, q.dtype)
            q_rot, k_rot = self.rotary.apply(q_rot, cos, sin), self.rotary.apply(k_rot, cos, sin)
        if ctx.cache is not None:
            latent, k_rot = ctx.cache.append(ctx.layer, latent, k_rot)  # (B, 1, T_total, r), (B, 1, T_total, rd)
        keys = latent.shape[2]
        kv = w["kv_b"](latent[:, 0]).view(B, keys, s.n_heads, -1).transpose(1, 2)  # (B, h, T_total, nope + v)
        k_nope, v = kv.split([s.qk_nope_head_dim, s.v_head_dim], dim=-1)
        k = torch.cat((k_nope, k_rot.expand(B, s.n_heads, keys, -1)), dim=-1)
        q = torch.cat((q_nope, q_rot), dim=-1)
        scores = q @ k.transpose(-2, -1) * self.scale  # (B, h, T, T_total)
        trace("scores", scores)
        y = attend(self, scores, v, ctx, s.window)  # (B, h, T, v)
        y = y.transpose(1, 2).reshape(B, T, -1)
        return w["o"](y)
