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
