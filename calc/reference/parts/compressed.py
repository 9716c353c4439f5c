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
from calc.reference.parts.attention import band, causal_mask, sink_column, softmax_with_sinks
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
        q_latent = self._query_latent(x, trace)
        q = w["q_b"](q_latent)  # (B, T, h·c)
        trace("q_b", q)
        q = rotate_tail(self.rotary, self.head_norm(q.view(B, T, s.n_heads, s.head_dim).transpose(1, 2)), ctx.positions)
        trace("q_heads", q)  # (B, h, T, c)
        kv, first = self._key_value(x, ctx)  # (B, 1, keys, c) from position `first`
        keys, allowed, picks = kv.shape[2], causal_mask(ctx.positions, kv.shape[2], s.window, None, first), None
        if s.ratio:
            entries = compress(w, "comp", x, ctx, "compressor", s.ratio, s.head_dim, s.overlap, self.rotary)
            seen = visible(ctx.positions, entries.shape[1], s.ratio).expand(B, T, -1)  # (B, T, N)
            if s.indexer is not None:
                seen, picks = select(w, s, x, q_latent, ctx, self.rotary)
            kv = torch.cat((kv.expand(B, -1, -1, -1), entries.unsqueeze(1)), dim=2)  # (B, 1, keys + N, c)
            allowed = torch.cat((allowed.expand(B, T, -1), seen), dim=-1)
        scores = (q @ kv.transpose(-2, -1)) * s.head_dim ** -0.5  # (B, h, T, keys [+ N])
        scores = scores.masked_fill(~allowed.view(-1, 1, T, allowed.shape[-1]), float("-inf"))
        read = lambda t: self._read(t, ctx.positions - first, keys, picks)  # noqa: E731 - for the trace
        trace("scores", read(scores))
        sinks = w.tensor("sinks")
        trace("attn_sinks", torch.cat((read(scores), sink_column(scores, sinks)), dim=-1))
        weights = softmax_with_sinks(scores, sinks).to(kv.dtype)
        trace("attn_weights", read(weights))
        y = weights @ kv  # (B, h, T, c)
        trace("attn_heads_out", y)
        y = rotate_tail(self.rotary, y, ctx.positions, sign=-1.0).transpose(1, 2)  # (B, T, h, c)
        return self._output(y, trace)

    def _query_latent(self, x: torch.Tensor, trace: Any) -> torch.Tensor:
        """The query latent [B, T, r], normed (the indexer reads it too)."""
        latent = self.weights["q_a"](x)
        trace("q_a", latent)
        latent = self.weights["q_a_norm"](latent)
        trace("q_a_norm", latent)
        return latent

    def _key_value(self, x: torch.Tensor, ctx: Any) -> tuple[torch.Tensor, torch.Tensor | int]:
        """(the K = V rows this pass's queries can see [B, 1, keys, c], the position of the first);
        the cache keeps the rows once, as keys (its values slot is zero-wide)."""
        s, w, trace = self.spec, self.weights, ctx.trace
        kv = w["kv"](x)  # (B, T, c)
        trace("kv", kv)
        kv = w["kv_norm"](kv)
        trace("kv_norm", kv)
        kv = rotate_tail(self.rotary, kv.unsqueeze(1), ctx.positions)  # (B, 1, T, c)
        if ctx.cache is None:
            return kv, 0
        kv, _, first = ctx.cache.append(ctx.layer, kv, kv[..., :0], s.window)
        trace("kv_cache", ctx.cache.keys[ctx.layer])
        return kv, first

    def _read(self, t: torch.Tensor, relative: torch.Tensor, keys: int, picks: torch.Tensor | None) -> torch.Tensor:
        """For tracing: [B, h, T, keys + N] -> the columns each query reads, as `shapes` counts them: its
        window's keys (`band`), then the compressed entries (CSA: only the indexer's picks)."""
        window = band(t[..., :keys], relative, self.spec.window)
        entries = t[..., keys:]
        if picks is not None:
            entries = entries.gather(-1, picks.unsqueeze(1).expand(-1, t.shape[1], -1, -1))
        return torch.cat((window, entries), dim=-1)

    def _output(self, y: torch.Tensor, trace: Any) -> torch.Tensor:
        """[B, T, h, c] -> [B, T, d]: each head group through its own o_a block, then o_b."""
        s, w = self.spec, self.weights
        B, T = y.shape[:2]
        blocks = w["o_a"].weight.view(s.o_groups, s.o_lora_rank, -1)  # (g, o, h·c / g)
        low = torch.einsum("btgi,goi->btgo", y.reshape(B, T, s.o_groups, -1), blocks).reshape(B, T, -1)  # (B, T, g·o)
        trace("o_a", low)
        y = w["o_b"](low)
        trace("o_b", y)
        return y
