"""DeepSeek-V4's compressors: every `ratio` tokens become one entry, a softmax-gated sum of their
projections (DeepseekV4HCACompressor, DeepseekV4CSACompressor, DeepseekV4Indexer in transformers'
modeling_deepseek_v4.py), and the lightning indexer that picks the entries each query reads.

A compressor projects each token to kv and gate (k series of `width` each) and adds its position
bias [ratio, k·width] to the gate. One series (HCA): entry w is the sum over window w's tokens of
kv · softmax(gate) (the softmax over the window's positions, per channel). Two series (CSA, the
indexer: `overlap`): entry w mixes window w - 1's first series with window w's second over 2·ratio
slots, so consecutive entries share a window; window 0 of a sequence has no predecessor (weight 0).
Each entry is RMS-normed and rotated on its trailing rotary channels at its first token's position.

With a cache the layer keeps, per compressor (`name`: "compressor", "indexer"), what
DeepseekV4CSACache keeps: the tokens whose window has not closed (kv and gate), the entries so far,
and with overlap the last closed window's first series (kv and gate); the next window starts at
entries x ratio. Without a cache the tokens past the last full window are dropped, as transformers does.
"""

from __future__ import annotations

from typing import Any

import torch

from calc.reference.parts.rope import Rotary

__all__ = ["compress", "rotate_tail", "select", "visible"]


def rotate_tail(rotary: Rotary, x: torch.Tensor, positions: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
    """x [..., T, D] with its last rotary_dim channels rotated (V4 lays a head out as [nope | rope]),
    in float32; `sign` -1 turns them back (the attention output's de-rotation)."""
    cos, sin = rotary.cos_sin(positions, torch.float32)
    rd = rotary.width
    nope, rope = x[..., :-rd], x[..., -rd:]
    return torch.cat((nope, rotary.apply(rope.float(), cos, sign * sin).to(x.dtype)), dim=-1)


def _state(ctx: Any, name: str) -> torch.Tensor | None:
    return ctx.cache.state(ctx.layer, name) if ctx.cache is not None else None


def _windows(kv: torch.Tensor, gate: torch.Tensor, ctx: Any, name: str, ratio: int) -> tuple[
        torch.Tensor, torch.Tensor, int, dict[str, torch.Tensor]]:
    """(the closed windows' kv and gate [B, n·ratio, k·width], how many entries came before them, the
    states to keep): the waiting tokens first, the tokens past the last full window kept waiting."""
    waiting_kv, waiting_gate = _state(ctx, f"{name}.kv"), _state(ctx, f"{name}.gate")
    if waiting_kv is not None:
        kv, gate = torch.cat((waiting_kv, kv), dim=1), torch.cat((waiting_gate, gate), dim=1)
    usable = kv.shape[1] // ratio * ratio
    entries = _state(ctx, f"{name}.entries")
    before = 0 if entries is None else entries.shape[1]
    return kv[:, :usable], gate[:, :usable], before, {f"{name}.kv": kv[:, usable:], f"{name}.gate": gate[:, usable:]}


def _overlapped(kv: torch.Tensor, gate: torch.Tensor, width: int, ctx: Any, name: str,
                keep: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, n, ratio, 2·width] -> [B, n, 2·ratio, width]: the previous window's first series, then this
    window's second; before the sequence's first window zeros with gate -inf (softmax weight 0)."""
    B, n, ratio, _ = kv.shape
    prior_kv, prior_gate = _state(ctx, f"{name}.overlap_kv"), _state(ctx, f"{name}.overlap_gate")
    if prior_kv is None:
        prior_kv = kv.new_zeros((B, 1, ratio, width))
        prior_gate = gate.new_full((B, 1, ratio, width), float("-inf"))
    first_kv = torch.cat((prior_kv.to(kv.dtype).view(B, 1, ratio, width), kv[:, :-1, :, :width]), dim=1)
    first_gate = torch.cat((prior_gate.to(gate.dtype).view(B, 1, ratio, width), gate[:, :-1, :, :width]), dim=1)
    keep[f"{name}.overlap_kv"], keep[f"{name}.overlap_gate"] = kv[:, -1, :, :width], gate[:, -1, :, :width]
    return (torch.cat((first_kv, kv[..., width:]), dim=2), torch.cat((first_gate, gate[..., width:]), dim=2))


def compress(w: Any, prefix: str, x: torch.Tensor, ctx: Any, name: str, ratio: int, width: int, overlap: bool,
             rotary: Rotary) -> torch.Tensor:
    """Every entry so far [B, N, width] after the tokens x [B, T, d]; the compressor's tensors are
    `{prefix}_kv`, `{prefix}_gate`, `{prefix}_bias`, `{prefix}_norm` in `w` (and its trace steps)."""
    kv, gate = w[f"{prefix}_kv"](x), w[f"{prefix}_gate"](x)  # (B, T, k·width) each
    ctx.trace(f"{prefix}_kv", kv)
    ctx.trace(f"{prefix}_gate", gate)
    kv, gate, before, keep = _windows(kv, gate, ctx, name, ratio)
    B, n = x.shape[0], kv.shape[1] // ratio
    pooled = kv.new_zeros((B, 0, width))
    if n:
        kv = kv.view(B, n, ratio, -1)
        gate = gate.view(B, n, ratio, -1).float() + w.tensor(f"{prefix}_bias").float()  # the bias is kept in fp32
        if overlap:
            kv, gate = _overlapped(kv, gate, width, ctx, name, keep)
        pooled = (kv * gate.softmax(dim=2, dtype=torch.float32).to(kv.dtype)).sum(dim=2)  # (B, n, width)
    ctx.trace(f"{prefix}_pool", pooled)
    normed = w[f"{prefix}_norm"](pooled)
    ctx.trace(f"{prefix}_norm", normed)
    positions = torch.arange(before, before + n, device=x.device) * ratio  # each entry's first token
    previous = _state(ctx, f"{name}.entries")
    entries = rotate_tail(rotary, normed, positions)
    entries = entries if previous is None else torch.cat((previous, entries), dim=1)
    if ctx.cache is not None:
        ctx.cache.keep(ctx.layer, x.shape[1], **keep, **{f"{name}.entries": entries})
        ctx.trace(f"{prefix}_cache", entries)
    return entries


def visible(positions: torch.Tensor, entries: int, ratio: int) -> torch.Tensor:
    """[T, N]: entry w summarises positions w·ratio .. (w + 1)·ratio - 1, so the query at p reads it
    once all of them are seen: w < (p + 1) // ratio."""
    return torch.arange(entries, device=positions.device)[None, :] < ((positions + 1) // ratio)[:, None]


def select(w: Any, spec: Any, x: torch.Tensor, q_latent: torch.Tensor, ctx: Any, rotary: Rotary) -> tuple[
        torch.Tensor, torch.Tensor]:
    """([B, T, N] True where the lightning indexer lets a query read one of the N compressor entries,
    the picks [B, T, k]): its own compressed keys scored by the sum over heads h of
    weight_h · ReLU(q_h · k) / sqrt(i), the best `topk` of those visible kept (DeepseekV4Indexer,
    DeepseekV4IndexerScorer)."""
    i, (B, T, _) = spec.indexer, x.shape
    keys = compress(w, "idx", x, ctx, "indexer", spec.ratio, i.head_dim, True, rotary)  # (B, N, i)
    q = w["idx_q"](q_latent)  # (B, T, n_i·i)
    ctx.trace("idx_q", q)
    q = rotate_tail(rotary, q.view(B, T, i.n_heads, i.head_dim).transpose(1, 2), ctx.positions).transpose(1, 2)
    weights = w["idx_weights"](x)  # (B, T, n_i)
    ctx.trace("idx_weights", weights)
    scores = torch.relu(q.float() @ keys.transpose(-1, -2).float().unsqueeze(1)) * i.head_dim ** -0.5  # (B, T, n_i, N)
    ctx.trace("idx_scores", scores)
    scores = (scores * (weights.float() * i.n_heads ** -0.5).unsqueeze(-1)).sum(dim=2)  # (B, T, N)
    allowed = visible(ctx.positions, keys.shape[1], spec.ratio)
    picked = scores.masked_fill(~allowed, float("-inf")).topk(min(i.topk, keys.shape[1]), dim=-1).indices
    chosen = torch.zeros((B, T, keys.shape[1]), dtype=torch.bool, device=x.device).scatter_(-1, picked, True)
    return chosen & allowed, picked
