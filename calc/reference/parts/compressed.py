"""DeepSeek-V4's attention (DeepseekV4Attention in transformers' modeling_deepseek_v4.py): queries
through a latent, one head that is both key and value, a sliding window, and in CSA / HCA layers
the compressor's entries beside the window (calc.reference.parts.compressor).

Queries: q_a, its RMSNorm (the latent the indexer also reads), q_b, an RMSNorm over each head
without a scale, rotary on the trailing channels. K = V: kv, its RMSNorm, rotary. The cache keeps
the window's K = V rows once (its values slot is zero-wide: the same rows serve as values). Each
query reads the window's keys and the compressor entries it may (HCA: every closed window;
CSA: those the indexer picks), scores scaled by head_dim^-1/2, a learned sink per head. Since the
values were rotated with the keys, the output's rotary channels are turned back at the query's
position; then each of o_groups head groups is projected to o_lora_rank (o_a, one matrix per
group) and the concatenation to the model's width (o_b).
"""

from __future__ import annotations

from typing import Any

import torch

from calc.parts.compressed import CompressedAttention as CompressedSpec
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.attention import causal_mask, softmax_with_sinks
from calc.reference.parts.base import Part
from calc.reference.parts.compressor import compress, rotate_tail, select, visible
from calc.reference.parts.norm import Norm
from calc.reference.parts.rope import Rotary

__all__ = ["CompressedAttention"]


class CompressedAttention(Part):
    ROLES = frozenset({"q_a", "q_a_norm", "q_b", "kv", "kv_norm", "o_a", "o_b", "sinks", "comp_kv", "comp_gate",
                       "comp_bias", "comp_norm", "idx_q", "idx_kv", "idx_gate", "idx_bias", "idx_norm",
                       "idx_weights"})

    def __init__(self, spec: CompressedSpec, n_positions: int) -> None:
        super().__init__()
        self.spec = spec
        self.rotary = Rotary(spec.rope, n_positions)
        # q_b_norm: DeepseekV4UnweightedRMSNorm, over each head, the model's epsilon
        self.head_norm = Norm(NormSpec.model_construct(kind="rmsnorm", weight=False, bias=False, eps=spec.norm.eps), ())
        self.roles = {"attn_out": "o_b"}

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "CompressedAttention":
        return cls(block.attention, n_positions)

    def norm_spec(self, role: str) -> NormSpec:
        """q_a_norm, kv_norm and the compressors' norms: the layer's RMSNorm."""
        return self.spec.norm

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, w, trace = self.spec, self.weights, ctx.trace
        B, T, _ = x.shape
        q_latent = w["q_a_norm"](w["q_a"](x))  # (B, T, r)
        trace("q_a_norm", q_latent)
        q = self.head_norm(w["q_b"](q_latent).view(B, T, s.n_heads, s.head_dim).transpose(1, 2))
        q = rotate_tail(self.rotary, q, ctx.positions)  # (B, h, T, c)
        trace("q_heads", q)
        kv = rotate_tail(self.rotary, w["kv_norm"](w["kv"](x)).view(B, 1, T, s.head_dim), ctx.positions)
        trace("kv", kv)
        keys, first = kv, 0
        if ctx.cache is not None:  # K = V: the rows are kept once, as keys
            keys, _, first = ctx.cache.append(ctx.layer, kv, kv[..., :0], s.window)
        allowed = causal_mask(ctx.positions, keys.shape[2], s.window, None, first)  # (T, keys)
        if s.ratio:
            entries = compress(w, "comp", x, ctx, "compressor", s.ratio, s.head_dim, s.overlap, self.rotary)
            trace("compressed", entries)
            seen = (select(w, s, x, q_latent, ctx, self.rotary) if s.indexer is not None
                    else visible(ctx.positions, entries.shape[1], s.ratio).expand(B, T, -1))  # (B, T, N)
            keys = torch.cat((keys.expand(B, -1, -1, -1), entries.unsqueeze(1)), dim=2)  # (B, 1, keys + N, c)
            allowed = torch.cat((allowed.expand(B, T, -1), seen), dim=-1)
        scores = (q @ keys.transpose(-2, -1)) * s.head_dim ** -0.5  # (B, h, T, keys [+ N])
        scores = scores.masked_fill(~allowed.view(-1, 1, T, allowed.shape[-1]), float("-inf"))
        trace("scores", scores)
        y = softmax_with_sinks(scores, w.tensor("sinks")).to(keys.dtype) @ keys  # (B, h, T, c)
        y = rotate_tail(self.rotary, y, ctx.positions, sign=-1.0).transpose(1, 2)  # (B, T, h, c)
        trace("attn_heads_out", y)
        return self._output(y)

    def _output(self, y: torch.Tensor) -> torch.Tensor:
        """[B, T, h, c] -> [B, T, d]: each head group through its own o_a block, then o_b."""
        s, w = self.spec, self.weights
        B, T = y.shape[:2]
        groups = y.reshape(B, T, s.o_groups, -1)  # (B, T, g, h·c / g)
        blocks = w["o_a"].weight.view(s.o_groups, s.o_lora_rank, -1)  # (g, o, h·c / g)
        return w["o_b"](torch.einsum("btgi,goi->btgo", groups, blocks).reshape(B, T, -1))  # (B, T, g·o) -> (B, T, d)
