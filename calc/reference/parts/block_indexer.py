"""MiniMax-M3's lightning indexer (MiniMaxM3VLIndexer): which key blocks each head group may read.

Its queries (n heads) and its one key per token come from the layer's input, each normed per head and
rotated with the attention's rotary (on the same first rotary_dim channels); the keys are cached (the
layer's "block_index_keys" state). Every query scores every earlier key (float32 dot products), keeps
each block's best score (max over block_size keys), forces the blocks before its own (local_blocks:
its own block and local_blocks - 1 before it, as transformers' arange(local_blocks) offsets take
them) to the top, and keeps its top_k blocks with a finite score. Indexer head g decides for the
query heads of KV group g (transformers repeats its verdict n_heads / n_index_heads times).
"""

from __future__ import annotations

from typing import Any

import torch

from calc.errors import GptcalcError

__all__ = ["block_mask"]


def block_mask(part: Any, x: torch.Tensor, ctx: Any, visible: torch.Tensor) -> torch.Tensor:
    """[B, n_heads, T, keys]: True where a query head may read a key, for the attention `part` whose
    queries see the keys `visible` says ([T, keys], the causal mask)."""
    s, i, w, trace = part.spec, part.spec.indexer, part.weights, ctx.trace
    if part.rotary is not None and i.head_dim < part.rotary.width:
        raise GptcalcError(f"block indexer: head_dim {i.head_dim} below rotary_dim {part.rotary.width} is not "
                           "implemented by the torch reference")
    trace("block_idx_q", q := w["block_idx_q"](x))  # (B, T, n_i·d_i)
    trace("block_idx_k", k := w["block_idx_k"](x))  # (B, T, d_i)
    B, T, _ = q.shape
    trace("block_idx_q_norm", q := w["block_idx_q_norm"](q.view(B, T, i.n_heads, i.head_dim)))
    trace("block_idx_k_norm", k := w["block_idx_k_norm"](k))
    q, k = q.transpose(1, 2), k[:, None]  # (B, n_i, T, d_i), (B, 1, T, d_i)
    if part.rotary is not None:
        cos, sin = part.rotary.cos_sin(ctx.positions, x.dtype)
        q, k = part.rotary.apply(q, cos, sin), part.rotary.apply(k, cos, sin)
    if ctx.cache is not None:
        kept = ctx.cache.state(ctx.layer, "block_index_keys")
        k = k if kept is None else torch.cat((kept, k), dim=2)
        ctx.cache.states.setdefault(ctx.layer, {})["block_index_keys"] = k
        trace("block_idx_k_cache", k[:, 0])  # (B, keys, d_i)
    trace("block_idx_scores", scores := q.float() @ k.float().transpose(-1, -2))  # (B, n_i, T, keys)
    keys = scores.shape[-1]
    scores = scores.masked_fill(~visible, float("-inf"))
    blocks = -(-keys // i.block_size)
    pooled = torch.nn.functional.pad(scores, (0, blocks * i.block_size - keys), value=float("-inf"))
    pooled = pooled.view(*scores.shape[:-1], blocks, i.block_size).amax(-1)  # (B, n_i, T, blocks)
    own = ctx.positions // i.block_size
    local = (own[:, None] - torch.arange(i.local_blocks, device=own.device)).clamp(min=0)  # (T, local)
    pooled = pooled.scatter(-1, local.expand(*pooled.shape[:2], -1, -1), float("inf"))
    top, index = pooled.topk(min(i.topk_blocks, blocks), dim=-1)
    keep = torch.zeros_like(pooled, dtype=torch.bool).scatter(-1, index, top > float("-inf"))
    keep = keep.repeat_interleave(i.block_size, dim=-1)[..., :keys]
    return keep.repeat_interleave(s.n_heads // i.n_heads, dim=1)
