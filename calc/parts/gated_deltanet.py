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
