"""MiniMax-M3's lightning indexer: block-sparse selection beside a GQA attention (MiniMaxM3VLIndexer).

Per layer, with d = d_model, n = n_heads and i = head_dim of the indexer:

    block_idx_q = d·n·i      block_idx_k = d·i      block_idx_q_norm = block_idx_k_norm = i (per-head norms)

Unlike DeepSeek-V3.2's indexer (calc.parts.mla.Indexer) it reads the layer's input, not a query latent,
has no per-head weights, and selects blocks, not tokens: each query scores every cached key with its
n heads, max-pools the scores over blocks of `block_size` keys and lets one head group of the
attention read its top `topk_blocks` blocks plus the `local_blocks` before its own. It is a selection
branch only (MiniMax-M3's sparse_disable_index_value: no value or output projection). What it keeps
is one index key of width i per token, for all heads (MiniMaxM3VLSparseCacheLayer.idx_keys).
"""

from calc.parts.base import Field, Part
from calc.parts.cache import TokenSpec
from calc.parts.norm import Norm

__all__ = ["LABELS", "BlockIndexer"]


class BlockIndexer(Part):
    n_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    block_size: int = Field(gt=0)  # keys pooled into one scored block
    topk_blocks: int = Field(gt=0)  # blocks each query may read
    local_blocks: int = Field(default=1, ge=0)  # blocks before the query's own, always read
    norm: Norm  # the per-head norm of its queries and keys

    def params(self, d_model: int) -> dict[str, int]:
        i = self.head_dim
        return {"block_idx_q": d_model * self.n_heads * i, "block_idx_k": d_model * i,
                "block_idx_q_norm": self.norm.params(i), "block_idx_k_norm": self.norm.params(i)}

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        return {"block_idx_q": (d_model, 1), "block_idx_k": (d_model, 1)}

    def cache(self) -> TokenSpec:
        """Its one key per token, shared by all its heads: whole on every GPU (DSA's indexer keys' rule)."""
        return TokenSpec(self.head_dim, 0, "block indexer", self.n_heads, 1, self.head_dim, None)

    def describe(self) -> str:
        return (f"block indexer: {self.n_heads} heads of {self.head_dim}, top {self.topk_blocks} blocks of "
                f"{self.block_size} keys + {self.local_blocks} local")


LABELS = {
    "block_idx_q": "block indexer Q",
    "block_idx_k": "block indexer K",
    "block_idx_q_norm": "block indexer Q norm",
    "block_idx_k_norm": "block indexer K norm",
}
