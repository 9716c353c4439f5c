"""Multi-head latent attention (DeepSeek-V2/V3), as transformers' DeepseekV3Attention computes it.

Queries: q_proj, or q_a -> its norm -> q_b; each head's query is qk_nope_head_dim channels without
rotary and qk_rope_head_dim with. Keys and values: kv_a_proj_with_mqa gives the kv_lora_rank latent
(normalised) and one shared rotary key; the cache holds exactly those two (a sliding-window
layer's only its last `window` positions), and kv_b expands the latent into each head's non-rotary
key and its value at every step. Scores are scaled by qk_head_dim^-0.5, times YaRN's mscale² when
the rope scaling sets mscale_all_dim (transformers' yarn_apply_mscale for DeepSeek).

DeepSeek-V3.2's sparse attention (DSA; DeepseekV32Indexer, GlmMoeDsaIndexer): an indexer scores
every visible key with h_i small heads, q_i from the normed Q latent (wq_b) and one key per token
(LayerNorm(wk·x), cached beside the latent, [B, keys, d_i]); the first qk_rope_head_dim channels of
both rotate (halves for DeepSeek-V3.2, interleaved pairs for GLM-5, the MLA's own angles):
    index = Σ_h (weights_proj(x)_h · h_i^-1/2) · ReLU(q_i,h · k · d_i^-1/2)
and each query attends only to its `topk` highest-scoring causal keys. GLM-5's "shared" layers have
no indexer and attend to the keys the last indexer chose (`reuse_selection`).
"""

from __future__ import annotations

from typing import Any

import torch

import torch.nn.functional as F

from calc.errors import GptcalcError
from calc.parts.mla import MLA as MLASpec
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.attention import attend, causal_mask, split_heads
from calc.reference.parts.base import Part
from calc.reference.parts.norm import Norm
from calc.reference.parts.rope import Rotary, yarn_mscale

__all__ = ["MLA"]


class MLA(Part):
    ROLES = frozenset({"q", "o", "q_a", "q_a_norm", "q_b", "kv_a", "kv_a_norm", "kv_b", "idx_q", "idx_k", "idx_k_norm",
                       "idx_weights"})
    INDEXER_NORM = NormSpec.model_construct(kind="layernorm", weight=True, bias=True, eps=1e-6, unit_offset=False)

    def __init__(self, spec: MLASpec, n_positions: int) -> None:
        super().__init__()
        self.spec = spec
        self.rotary = Rotary(spec.rope, n_positions) if spec.rope else None
        self.index_rotary = self._index_rotary(n_positions)
        self.scale = spec.qk_head_dim ** -0.5
        scaling = (spec.rope.scaling or {}) if spec.rope else {}
        if scaling.get("mscale_all_dim") and self.rotary is not None and self.rotary.kind != "default":
            self.scale *= yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
        self.roles = {"attn_out": "o"}

    def _index_rotary(self, n_positions: int) -> Rotary | None:
        """The DSA indexer's rotary: MLA's angles, on pairs or halves as the indexer says."""
        s, i = self.spec, self.spec.indexer
        if i is None or self.rotary is None or i.interleaved == s.rope.interleaved:
            return self.rotary if i is not None else None
        fields = {name: getattr(s.rope, name) for name in s.rope.model_fields}
        return Rotary(type(s.rope).model_construct(**{**fields, "interleaved": i.interleaved}), n_positions)

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "MLA":
        return cls(block.attention, n_positions)

    def norm_spec(self, role: str) -> Any:
        """The latent norms' spec; the indexer's key norm is a LayerNorm (eps 1e-6, weight and bias)."""
        return self.INDEXER_NORM if role == "idx_k_norm" else self.spec.norm

    def norm(self, role: str) -> Norm:
        """A latent norm; one with no parameters still normalises."""
        return self.weights.get(role) or Norm(self.spec.norm, ())

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        cos_sin = self.rotary.cos_sin(ctx.positions, x.dtype) if self.rotary is not None else None
        q_nope, q_rot, q_latent = self._query(x, cos_sin, trace)
        if s.indexer is not None:
            ctx.selected = self._select(x, q_latent, ctx)
        elif s.reuse_selection and ctx.selected is None:
            raise GptcalcError("a shared DSA layer needs an indexer layer below it")
        selected = ctx.selected if s.indexer is not None or s.reuse_selection else None
        both = w["kv_a"](x)  # (B, T, r + rd)
        trace("kv_a", both)
        latent, k_rot = both.split([s.kv_lora_rank, s.qk_rope_head_dim], dim=-1)
        trace("kv_latent", latent)
        k_rot = k_rot.view(B, 1, T, s.qk_rope_head_dim)
        if cos_sin is not None:
            k_rot = self.rotary.apply(k_rot, *cos_sin)
        trace("k_rope", k_rot)
        latent = self.norm("kv_a_norm")(latent)
        trace("kv_a_norm", latent)
        if s.latent_scale is not None:  # LongCat-Flash: the latent is cached scaled
            latent = latent * s.latent_scale
        latent = latent.view(B, 1, T, s.kv_lora_rank)
        first = 0
        if ctx.cache is not None:
            # (B, 1, keys, r), (B, 1, keys, rd): the keys visible from position `first` on
            latent, k_rot, first = ctx.cache.append(ctx.layer, latent, k_rot, s.window)
            trace("latent_cache", ctx.cache.keys[ctx.layer][:, 0])  # as kept: (B, kept, r)
            trace("k_rope_cache", ctx.cache.values[ctx.layer])
        keys = latent.shape[2]
        kv = w["kv_b"](latent[:, 0])  # (B, keys, h*(nope + v))
        trace("kv_b", kv)
        kv = kv.view(B, keys, s.n_heads, -1).transpose(1, 2)  # (B, h, keys, nope + v)
        trace("kv_heads", kv)
        k_nope, v = kv.split([s.qk_nope_head_dim, s.v_head_dim], dim=-1)
        if s.qk_nope_head_dim:
            trace("k_nope", k_nope)
        trace("v_heads", v)
        q = torch.cat((q_nope, q_rot), dim=-1)
        trace("query", q)
        k = torch.cat((k_nope, k_rot.expand(B, s.n_heads, keys, -1)), dim=-1)
        trace("key", k)
        scores = q @ k.transpose(-2, -1) * self.scale  # (B, h, T, keys)
        if selected is not None:  # DSA: only the keys the indexer chose
            scores = scores.masked_fill(~selected[:, None], float("-inf"))
        y = attend(self, scores, v, ctx, s.window, first=first)  # (B, h, T, v)
        trace("attn_heads_out", y)
        y = y.transpose(1, 2).reshape(B, T, -1)
        trace("attn_concat", y)
        y = w["o"](y)
        trace("attn_out", y)
        return y

    def _select(self, x: torch.Tensor, q_latent: torch.Tensor, ctx: Any) -> torch.Tensor:
        """DSA's choice [B, T, keys]: True at each query's `topk` best-scoring visible keys (the indexer's
        keys cached as this layer's "indexer_keys" state, [B, keys, d_i])."""
        i, w, trace = self.spec.indexer, self.weights, ctx.trace
        B, T, _ = x.shape
        q = w["idx_q"](q_latent)  # (B, T, h_i·d_i)
        trace("idx_q", q)
        k = w["idx_k"](x)  # (B, T, d_i)
        trace("idx_k", k)
        k = self.norm("idx_k_norm")(k)
        trace("idx_k_norm", k)
        weights = w["idx_weights"](x)  # (B, T, h_i)
        trace("idx_weights", weights)
        q = q.view(B, T, i.n_heads, i.head_dim)
        if self.index_rotary is not None:
            cos, sin = self.index_rotary.cos_sin(ctx.positions, x.dtype)
            q = self.index_rotary.apply(q.transpose(1, 2), cos, sin).transpose(1, 2)
            k = self.index_rotary.apply(k[:, None], cos, sin)[:, 0]
        if ctx.cache is not None:
            kept = ctx.cache.state(ctx.layer, "indexer_keys")
            k = k if kept is None else torch.cat((kept, k), dim=1)  # (B, keys, d_i)
            ctx.cache.states.setdefault(ctx.layer, {})["indexer_keys"] = k
            trace("idx_k_cache", k.transpose(1, 2))
        scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * i.head_dim ** -0.5)
        trace("idx_scores", scores)  # (B, T, h_i, keys)
        index = torch.matmul((weights.float() * i.n_heads ** -0.5).unsqueeze(-2), scores).squeeze(-2)  # (B, T, keys)
        index = index.masked_fill(~causal_mask(ctx.positions, index.shape[-1], None), float("-inf"))
        top = index.topk(min(i.topk, index.shape[-1]), dim=-1).indices
        return torch.zeros_like(index, dtype=torch.bool).scatter(-1, top, True)

    def _query(self, x: torch.Tensor, cos_sin: Any, trace: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Each head's query, its no-position and (rotated) rotary parts, [B, h, T, d_nope] and [B, h, T, d_rope],
        and the normed Q latent [B, T, r_q] (None without one), which DSA's indexer reads."""
        s, w = self.spec, self.weights
        latent = None
        if s.q_lora_rank is None:
            q = w["q"](x)
            trace("q", q)
        else:
            latent = w["q_a"](x)
            trace("q_a", latent)
            latent = self.norm("q_a_norm")(latent)
            trace("q_a_norm", latent)
            q = w["q_b"](latent)  # (B, T, h*qk)
            trace("q_b", q)
        q = split_heads(q, s.n_heads)  # (B, h, T, qk)
        trace("q_heads", q)
        if s.q_scale is not None:  # LongCat-Flash: every query channel, before rotary (which is linear)
            q = q * s.q_scale
        q_nope, q_rot = q.split([s.qk_nope_head_dim, s.qk_rope_head_dim], dim=-1)
        if s.qk_nope_head_dim:
            trace("q_nope", q_nope)
        if cos_sin is not None:
            q_rot = self.rotary.apply(q_rot, *cos_sin)
        trace("q_rope", q_rot)
        return q_nope, q_rot, latent
