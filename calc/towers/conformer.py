"""An audio encoder of Conformer layers (Gemma 4's, after the Universal Speech Model), as data.

transformers models/gemma4/modeling_gemma4.py (Gemma4AudioModel):

    subsampling    two 3x3 stride-2 convolutions without bias (1 -> c0 -> c1 channels), each with a
                   bias-free LayerNorm over its channels; then a linear (c0 / 4)·c1 -> d
    n_layers ×     half-step FFN  (norm, d -> 4d, 4d -> d, norm)
                   attention      (norm; Q, K, V, O and a relative-position key projection, d x d
                                   each; a per-channel scale of head_dim; norm)
                   light conv     (norm, d -> 2d then GLU, a depthwise conv of `conv_kernel` taps,
                                   norm, d -> d)
                   half-step FFN, then an output norm
    output         a biased linear d -> output width
    projector      embed_audio: a scale-free RMSNorm, then a bias-free linear -> the text width

Every linear is bias-free but the output one; every norm is an RMSNorm with a scale but the
subsampling's LayerNorms (scale only) and the projector's (none). The relative positions are a
sinusoidal buffer, the clipping bounds of `use_clipped_linears` buffers: no parameters.
"""

from typing import Literal

from calc.parts.base import Field, Part

__all__ = ["LABELS", "Conformer"]

LABELS = {
    "subsample_conv": "subsampling convolutions", "subsample_norm": "subsampling norms",
    "input_projection": "subsampled input projection", "ffn_norm": "FFN norms (2 FFNs)",
    "ffn_up": "FFN up (2 FFNs)", "ffn_down": "FFN down (2 FFNs)", "relative_k": "relative position keys",
    "per_dim_scale": "per-channel query scale", "conv_norm": "light conv norms", "conv_in": "light conv in (GLU)",
    "depthwise_conv": "depthwise conv", "conv_out": "light conv out", "out_norm": "layer output norm",
    "output_projection": "output projection",
}


class Conformer(Part):
    """One Conformer audio encoder and its projector, as the checkpoint stores them."""

    kind: Literal["conformer"] = "conformer"
    modality: Literal["audio"] = "audio"
    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    conv_kernel: int = Field(gt=0)
    channels: tuple[int, int] = Field(strict=False)  # the subsampling convolutions' output channels
    out_width: int = Field(gt=0)  # output_proj_dims
    text_width: int = Field(gt=0)

    def layer_params(self) -> dict[str, int]:
        """One Conformer layer: its two FFNs, attention, light conv and output norm."""
        d = self.d_model
        return {"ffn_norm": 4 * d, "ffn_up": 2 * 4 * d * d, "ffn_down": 2 * 4 * d * d, "attn_norm": 2 * d,
                "q": d * d, "k": d * d, "v": d * d, "attn_out": d * d, "relative_k": d * d,
                "per_dim_scale": d // self.n_heads, "conv_norm": 2 * d, "conv_in": 2 * d * d,
                "depthwise_conv": d * self.conv_kernel, "conv_out": d * d, "out_norm": d}

    def params(self) -> dict[str, int]:
        """The encoder's components in the order audio meets them: layer rows summed over layers."""
        c0, c1 = self.channels
        rows = {"subsample_conv": 9 * c0 + 9 * c0 * c1, "subsample_norm": c0 + c1,
                "input_projection": c0 // 4 * c1 * self.d_model}
        rows.update({name: self.n_layers * n for name, n in self.layer_params().items()})
        rows.update({"output_projection": self.d_model * self.out_width + self.out_width,
                     "projector": self.out_width * self.text_width})
        return rows

    @property
    def total(self) -> int:
        return sum(self.params().values())

    def describe(self) -> str:
        return (f"conformer: {self.n_layers} layers of {self.d_model}, {self.n_heads} heads, "
                f"conv kernel {self.conv_kernel}")
