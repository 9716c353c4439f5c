"""MiniMax-M3's block indexer's steps (calc.parts.block_indexer), in the order transformers'
MiniMaxM3VLIndexer.forward computes them: its queries and its one key from the layer's input, each
normed per head (and rotated, shape unchanged), the key cached, then every held key scored. Choosing
the blocks (a max over each block's keys, a top-k) moves no matmul; the attention's scores are then
counted over every held key, as the reference's masked scores are."""

from __future__ import annotations

from calc.analysis.shapes.attention import cache_step
from calc.analysis.shapes.core import Dims, Rows, Step, matmul_flops
from calc.analysis.shapes.norm import norm_step
from calc.parts import Attention

__all__ = ["block_indexer_steps"]


def block_indexer_steps(d: Dims, a: Attention, rows: Rows, past: str, held: str) -> list[Step]:
    i = a.indexer
    d = d.named(h_idx=i.n_heads, d_idx=i.head_dim, **{"h_idx·d_idx": i.n_heads * i.head_dim})
    q, k = d.shape("B", d.new, "h_idx·d_idx"), d.shape("B", d.new, "d_idx")
    q_heads, keys_t = d.shape("B", "h_idx", d.new, "d_idx"), d.shape("B", "d_idx", held)
    scores = d.shape("B", "h_idx", d.new, held)
    steps = [
        d.linear("block_idx_q", "indexer Q ·W_idx_q", d.hidden, d.shape("d_model", "h_idx·d_idx"), q,
                 rows.take("block_idx_q"), f"{i.n_heads} indexer heads of {i.head_dim}, from the layer's input"),
        d.linear("block_idx_k", "indexer K ·W_idx_k", d.hidden, d.shape("d_model", "d_idx"), k, rows.take("block_idx_k"),
                 "one key per token, for every indexer head; cached beside K and V"),
        norm_step(d, i.norm, "block_idx_q_norm", "indexer Q norm", d.shape("B", d.new, "h_idx", "d_idx"),
                  rows.take("block_idx_q_norm"), "over each indexer head"),
        norm_step(d, i.norm, "block_idx_k_norm", "indexer K norm", k, rows.take("block_idx_k_norm")),
    ]
    if d.decode:
        steps.append(cache_step(d, "block_idx_k", d.shape("B", past, "d_idx"), k, d.shape("B", held, "d_idx"), None,
                                "the indexer key"))
    return steps + [
        d.step("block_idx_scores", "indexer scores = Q_idx·K_idx", scores, (q_heads, keys_t),
               flops=matmul_flops(q_heads, keys_t),
               note=f"every held key scored by each indexer head; the best of each block of {i.block_size} keys "
                    f"ranks it, and each KV group reads its top {i.topk_blocks} blocks (its own forced in)",
               formula=f"2·B·h_idx·{d.new}·d_idx·{held}"),
    ]
