"""Lightning attention, the linear attention of MiniMax-Text-01 and MiniMax-M1 (`minimax`'s linear_attention layers).

Softmax-free attention with a fixed decay per head (ALiBi-like slopes, scaled down layer by layer:
buffers, no parameters): each head keeps S = Σ decay^(t-s) k_s ⊗ v_s and reads o_t = q_t·S. With
d = d_model, h heads of hd and W = h·hd (transformers' MiniMaxLightningAttention):

    la_qkv  = d·3W      q, k, v (one matrix, SiLU after it)
    la_norm = W         an RMSNorm over all heads' outputs
    la_gate = d·W       the output gate: sigmoid(x·W_G) times the normed output
    la_out  = W·d

Per sequence it keeps one hd x hd state per head (h·hd·hd), whatever the length; no conv.
"""

from __future__ import annotations

from typing import Literal

from calc.parts.base import Field, Part, present
from calc.parts.cache import CacheSpec, StateDtype, StateSpec
from calc.parts.transient import Graph, tensor

__all__ = ["LABELS", "LightningAttention"]


class LightningAttention(Part):
    kind: Literal["lightning"] = "lightning"
    n_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    state_dtype: StateDtype = "model"  # transformers keeps it in the values' dtype
    block: int = Field(default=256, gt=0)  # block_size: the recurrence runs block by block, exact inside each

    @property
    def width(self) -> int:
        return self.n_heads * self.head_dim

    def params(self, d_model: int) -> dict[str, int]:
        d, w = d_model, self.width
        return present(la_qkv=d * 3 * w, la_norm=w, la_gate=d * w, la_out=w * d)

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        return {"la_qkv": (d_model, 1), "la_gate": (d_model, 1), "la_out": (self.width, 1)}

    def cache(self, d_model: int) -> CacheSpec:
        """One hd x hd state per head (MiniMaxCache's linear_cache), split by head under TP."""
        state = StateSpec("recurrent", self.n_heads * self.head_dim * self.head_dim, 1, self.n_heads,
                          dtype=self.state_dtype)
        return CacheSpec(states=(state,))

    def transient(self, g: Graph) -> int:
        """llama.cpp's lightning layer (src/models/minimax-01.cpp:284-420), whose widest graph is the one it reserves
        with the whole ubatch as one sequence (src/llama-context.cpp:716-722: the decay between every two of a
        sequence's tokens grows with their square): the decay input (n_tokens x n_tokens per head, :233) and
        its exp (:330, the input feeds every layer, so not in place), the heads' scores qk (:348), beside
        the activated qkv (:297), q times its decay and its product with the old state (:333-339) and the two
        decays per head. With n_seqs sequences, the states gathered (build_rs), the old state decayed and the
        new K·V (:374-386), one hd x hd per head and sequence, beside qkv."""
        n, heads, w = g.n_tokens, self.n_heads, self.width
        qkv = g.per_token(3 * w)
        one_sequence = 3 * tensor(n * n * heads) + qkv + 2 * g.per_token(w) + 2 * g.per_token(heads)
        return max(one_sequence, 3 * tensor(heads * self.head_dim * self.head_dim * g.n_seqs) + qkv)

    def describe(self) -> str:
        return f"lightning attention ({self.n_heads} heads of {self.head_dim}, a decayed K⊗V state per head)"


LABELS = {
    "la_qkv": "lightning Q, K, V",
    "la_norm": "lightning norm",
    "la_gate": "lightning output gate",
    "la_out": "lightning out",
}
