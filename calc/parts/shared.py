"""A block stored once and applied at several depths: Zamba2's shared transformer blocks.

Before the Mamba2 mixer of each of its `hybrid` layers, Zamba2 (transformers' modeling_zamba2) runs
one of `num_mem_blocks` transformer blocks whose weights every such layer shares, in turn (A, B, A,
B, ...). A shared block reads the residual stream and the token embedding side by side
(`in_width` = 2·d): an RMSNorm over that width, attention reading it and writing d, an RMSNorm and a
gated MLP, with no residual add of its own. Each application adds weights of its own: low-rank
adapters of rank r (in·r + r·out) beside the MLP's gate/up projection (always) and beside the Q, K
and V projections (`use_shared_attention_adapter`), and a bias-free d × d linear that turns the
block's output into what the Mamba layer adds to its input.

Weights and work count differently, and that is the design: a copy's parameters are counted once
(`SharedBlock.params`, the model's `shared` rows), an application's adapters and linear once per
layer that applies it (`Shared.params`, that layer's rows); what an application computes and caches
is per application, because each is its own attention over its own keys (transformers keeps one
cache entry per hybrid layer), so `Shared.cache` is the copy's attention's cache.
"""


from typing import Literal

from calc.parts import attention, mlp, norm
from calc.parts.attention import Attention
from calc.parts.base import Field, Part, model_validator, present
from calc.parts.cache import CacheSpec
from calc.parts.mlp import MLP
from calc.parts.norm import Norm

__all__ = ["LABELS", "PREFIX", "Shared", "SharedBlock"]

PREFIX = "shared_block_"  # a stored copy's component keys, apart from the layers' own (and MoE's shared_mlp_*)
Adapted = Literal["q", "k", "v", "mlp"]


class SharedBlock(Part):
    """One stored copy: norm (over `in_width`), attention (`in_width` in, d out), norm, MLP."""

    attention: Attention
    mlp: MLP
    norm: Norm
    in_width: int = Field(gt=0)  # what its attention reads: Zamba2's [residual stream, embedding], 2·d

    @model_validator(mode="after")
    def _check(self) -> "SharedBlock":
        """The form the checkpoint names, shapes and terms follow (Zamba2's): anything else is refused, not misread."""
        a = self.attention
        if any((a.q_bias, a.k_bias, a.v_bias, a.o_bias, a.qk_norm, a.sinks, a.output_gate, a.augment, a.kv_shared,
                a.k_eq_v, a.fused_qkv)):
            raise ValueError("attention: a shared block's is plain Q, K, V and W_O without biases (Zamba2Attention)")
        if not (self.mlp.gated and self.mlp.fused_gate_up):
            raise ValueError("mlp: a shared block's is gated, gate and up one fused matrix (Zamba2MLP's gate_up_proj)")
        return self

    def params(self, d_model: int) -> dict[str, int]:
        """The copy's rows, counted once however many layers apply it."""
        return {PREFIX + key: n for key, n in self.rows(d_model).items()}

    def rows(self, d_model: int) -> dict[str, int]:
        """The copy's rows under its parts' own keys (`attn_norm`, `q`, ..., `mlp_down`)."""
        rows = {"attn_norm": self.norm.params(self.in_width), **self.attention.params(self.in_width)}
        rows["attn_out"] = self.attention.o_dim * d_model  # W_O writes the d-wide stream, not the 2·d input
        rows.update({"mlp_norm": self.norm.params(d_model), **self.mlp.params(d_model)})
        return present(**rows)

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """Each weight matrix's input width and how many there are in the copy (for quantisation layouts)."""
        rows = {**self.attention.matrices(self.in_width), "attn_out": (self.attention.o_dim, 1),
                **self.mlp.matrices(d_model)}
        return {PREFIX + key: value for key, value in rows.items()}

    def describe(self) -> str:
        return (f"norm, attention reading {self.in_width:,} wide: {self.attention.describe()}; norm, "
                f"{self.mlp.describe()}; no residual add")


class Shared(Part):
    """A layer's application of stored copy `name`, with its own adapters and output linear."""

    name: str
    block: SharedBlock
    adapter_rank: int = Field(gt=0)
    adapters: tuple[Adapted, ...] = Field(default=("mlp",), strict=False)
    proj: bool = True  # the bias-free d × d linear after the block

    def adapter_widths(self, d_model: int) -> dict[str, tuple[int, int]]:
        """(input, output) width of each adapted projection: Q, K, V read the block's wide input; the
        MLP's adapter sits beside its gate/up projection."""
        a, m = self.block.attention, self.block.mlp
        widths = {"q": (self.block.in_width, a.q_dim), "k": (self.block.in_width, a.kv_dim),
                  "v": (self.block.in_width, a.v_dim), "mlp": (d_model, m.d_ff * (1 + m.gated))}
        return {key: widths[key] for key in self.adapters}

    def params(self, d_model: int) -> dict[str, int]:
        """This application's own rows: its adapters (in·r + r·out each) and its d × d linear."""
        r = self.adapter_rank
        rows = {f"{PREFIX}{key}_adapter": (i + o) * r for key, (i, o) in self.adapter_widths(d_model).items()}
        return {**rows, **present(**{f"{PREFIX}proj": d_model * d_model * self.proj})}

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """The output linear's input width (the adapters' two small matrices stay 16-bit under a scheme)."""
        return {f"{PREFIX}proj": (d_model, 1)} if self.proj else {}

    def cache(self, d_model: int) -> CacheSpec:
        """What this application keeps: its copy's attention's K and V, its own entry per layer."""
        return self.block.attention.cache(d_model)

    def describe(self) -> str:
        adapted = ", ".join(self.adapters) or "none"
        return f"shared block {self.name} (rank-{self.adapter_rank} adapters on {adapted})"


_COPY = {"attn_norm": norm.LABELS["attn_norm"], **attention.LABELS, "mlp_norm": norm.LABELS["mlp_norm"], **mlp.LABELS}
LABELS = {
    **{PREFIX + key: f"shared block: {text}" for key, text in _COPY.items()},
    f"{PREFIX}q_adapter": "shared block: Q adapter",
    f"{PREFIX}k_adapter": "shared block: K adapter",
    f"{PREFIX}v_adapter": "shared block: V adapter",
    f"{PREFIX}mlp_adapter": "shared block: MLP gate/up adapter",
    f"{PREFIX}proj": "shared block: output linear",
}
