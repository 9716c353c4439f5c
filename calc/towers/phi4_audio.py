"""Phi-4-multimodal's audio encoder (transformers models/phi4_multimodal/modeling_phi4_multimodal.py:
Phi4MultimodalAudioModel inside Phi4MultimodalAudioEmbedding), as data. A Conformer like Gemma's in
outline, but every linear, conv and LayerNorm has a bias and the pieces differ, so a part of its own:

    subsampling    (NeMo) conv 1 -> c, 3x3 stride 2; then log2(time_reduction) - 1 times a depthwise
                   3x3 stride-2 conv and a pointwise 1x1 conv, c channels; then a linear from c x the
                   frequencies left (input_size halved as often, rounding up) -> d
    relative bias  a table of 2 x bias_max_distance buckets (bias_max_distance when symmetric) x heads
    n_layers ×     FFN in  (LayerNorm, d -> 2·d_ff, d_ff -> d: a GLU)
                   LayerNorm; attention (Q, K, V, O, d x d each)
                   conv module (LayerNorm; GLU pointwise conv d -> 2e and its two e-wide biases b1, b2;
                                a depthwise conv of `kernel` taps (x multiplier) and a pointwise conv to
                                d_sep; a pointwise conv d -> e)
                   FFN out; LayerNorm
    projectors     two pairs of linears (d·downsample_rate -> text width, text width -> text width):
                   one for speech, one for speech beside an image

The global mean and inverse standard deviation of the input features are buffers, not parameters.
"""

from typing import Literal

from calc.parts.base import Field, Part

__all__ = ["LABELS", "Phi4Audio"]

LABELS = {"relative_bias": "relative position bias table", "glu_conv": "GLU pointwise conv (with b1, b2)",
          "pointwise_conv": "pointwise conv", "attention": "attention (Q, K, V, O, biased)",
          "vision_speech_projector": "projector beside an image"}


class Phi4Audio(Part):
    """One Phi-4-multimodal audio encoder and its two projectors, as the checkpoint stores them."""

    kind: Literal["phi4_conformer"] = "phi4_conformer"
    modality: Literal["audio"] = "audio"
    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    d_ff: int = Field(gt=0)
    conv_kernel: int = Field(gt=0)
    depthwise_multiplier: int = Field(default=1, gt=0)
    separable_out: int = Field(gt=0)  # depthwise_separable_out_channel
    glu_out: int = Field(gt=0)  # ext_pw_out_channel
    conv_channels: int = Field(gt=0)  # nemo_conv_channels
    subsample_convs: int = Field(gt=0)  # log2(time_reduction): stride-2 steps
    input_size: int = Field(default=80, gt=0)  # filterbank features in (the stored global mean and deviation)
    frequencies: int = Field(gt=0)  # what the subsampling leaves of input_size (nemo_final_size)
    bias_buckets: int = Field(gt=0)
    downsample_rate: int = Field(default=1, gt=0)
    text_width: int = Field(gt=0)

    @property
    def names(self) -> str:
        return self.kind

    def layer_params(self) -> dict[str, int]:
        """One Conformer layer: two FFNs, attention, conv module, their norms."""
        d, ff, e, m = self.d_model, self.d_ff, self.glu_out, self.depthwise_multiplier
        return {"ffn_norm": 2 * 2 * d, "ffn_up": 2 * (d * 2 * ff + 2 * ff), "ffn_down": 2 * (ff * d + d),
                "attn_norm": 2 * d, "attention": 4 * (d * d + d), "conv_norm": 2 * d,
                "glu_conv": d * 2 * e + 2 * e + 2 * e, "depthwise_conv": d * m * self.conv_kernel + d * m,
                "pointwise_conv": d * m * self.separable_out + self.separable_out, "conv_out": d * e + e,
                "out_norm": 2 * d}

    def params(self) -> dict[str, int]:
        """The encoder's components in the order audio meets them: layer rows summed over layers."""
        c, d, text = self.conv_channels, self.d_model, self.text_width
        rows = {"subsample_conv": 9 * c + c + (self.subsample_convs - 1) * (9 * c + c + c * c + c),
                "input_projection": c * self.frequencies * d + d,
                "relative_bias": self.bias_buckets * self.n_heads}
        rows.update({name: self.n_layers * n for name, n in self.layer_params().items()})
        projector = d * self.downsample_rate * text + text + text * text + text
        rows.update(projector=projector, vision_speech_projector=projector)
        return rows

    @property
    def total(self) -> int:
        return sum(self.params().values())

    def describe(self) -> str:
        return (f"phi4 conformer: {self.n_layers} layers of {self.d_model}, {self.n_heads} heads, "
                f"conv kernel {self.conv_kernel}")
