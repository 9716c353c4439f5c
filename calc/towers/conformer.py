"""An audio encoder of Conformer layers (Gemma 3n's and Gemma 4's, after the Universal Speech
Model), as data.

transformers models/gemma4/modeling_gemma4.py (Gemma4AudioModel) and models/gemma3n/modeling_gemma3n.py
(Gemma3nAudioEncoder), the same layers:

    subsampling    convolutions without bias (1 -> c0 -> c1 channels; kh x kw each), each with a
                   scale-only norm over its channels; then a linear (what the last one leaves per
                   frame: its channels x frequencies) -> d
    n_layers ×     half-step FFN  (norm, d -> 4d, 4d -> d, norm)
                   attention      (norm; Q, K, V, O and a relative-position key projection, d x d
                                   each; a per-channel scale of head_dim; norm)
                   light conv     (norm, d -> 2d then GLU, a depthwise conv of `conv_kernel` taps,
                                   norm, d -> d)
                   half-step FFN, then an output norm
    output         Gemma 4: a biased linear d -> output width
    projector      embed_audio: a scale-free RMSNorm, then a bias-free linear -> the text width;
                   Gemma 3n's also holds a table of `vocab` audio-token rows and two scaled norms
                   (hard and soft embeddings) before it

Every linear is bias-free but the output one; every other norm is an RMSNorm with a scale. The
relative positions are a sinusoidal buffer, the clipping bounds of `use_clipped_linears` buffers:
no parameters.
"""

from typing import Literal

from calc.parts.base import Field, Part, present

__all__ = ["LABELS", "Conformer"]

LABELS = {
    "subsample_conv": "subsampling convolutions", "subsample_norm": "subsampling norms",
    "input_projection": "subsampled input projection", "ffn_norm": "FFN norms (2 FFNs)",
    "ffn_up": "FFN up (2 FFNs)", "ffn_down": "FFN down (2 FFNs)", "relative_k": "relative position keys",
    "per_dim_scale": "per-channel query scale", "conv_norm": "light conv norms", "conv_in": "light conv in (GLU)",
    "depthwise_conv": "depthwise conv", "conv_out": "light conv out", "out_norm": "layer output norm",
    "output_projection": "output projection", "audio_embedding": "audio token table and its two norms",
}


class Conformer(Part):
    """One Conformer audio encoder and its projector, as the checkpoint stores them."""

    kind: Literal["conformer"] = "conformer"
    # whose tensor names its checkpoints use (calc.checkpoint.conformer_slots.CONFORMER_LAYOUTS): the same
    # layers are Gemma4AudioModel's and Gemma3nAudioEncoder's under different names
    names: Literal["gemma4_audio", "gemma3n_audio"]
    modality: Literal["audio"] = "audio"
    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    conv_kernel: int = Field(gt=0)
    convs: tuple[tuple[int, int, int, int], ...] = Field(strict=False)  # subsampling: (in, out, kh, kw) each
    subsample_width: int = Field(gt=0)  # the input projection's in-features
    out_width: int = Field(default=0, ge=0)  # Gemma 4's output_proj_dims; 0: no output projection
    vocab: int = Field(default=0, ge=0)  # Gemma 3n's audio-token table rows
    text_width: int = Field(gt=0)
    # Computation only, for the torch reference (calc.reference.conformer), as Gemma4AudioConfig and
    # Gemma3nAudioConfig default them. Attention in blocks of `chunk` frames over a horizon of
    # `context_left - 1` frames before and `context_right` after: Gemma 3n's frames see all of it, Gemma 4's
    # one frame less each side (`whole_horizon`); the relative-position table's rows count down from the
    # past horizon to minus the future one (Gemma 3n, `horizon_table`) or from half the block context to 0
    # (Gemma 4: the same rows for its defaults); Gemma 4's keys are scaled (`key_scale`). Scores soft-capped at `logit_cap`; each half-step FFN's
    # output times `residual_weight`; the norms' epsilon; the FFNs' and conv's activation.
    chunk: int = Field(default=12, gt=0)
    context_left: int = Field(default=13, gt=0)
    context_right: int = Field(default=0, ge=0)
    whole_horizon: bool = False
    horizon_table: bool = False
    key_scale: bool = True
    logit_cap: float = Field(default=50.0, gt=0)
    residual_weight: float = Field(default=0.5, strict=False)
    eps: float = Field(default=1e-6, gt=0)
    activation: str = "silu"
    # The subsampling, as computed: each convolution's (time, frequency) stride; the time axis padded one
    # frame each side (Gemma 4) or kernel - 1 at the end (Gemma 3n, causal), frequencies one each side;
    # each convolution's norm a LayerNorm (Gemma 4) or Gemma 3n's cumulative group norm, of this epsilon;
    # after the layers, every `reduction`-th frame kept (Gemma 3n's conf_reduction_factor)
    strides: tuple[tuple[int, int], ...] = Field(default=((2, 2), (2, 2)), strict=False)
    causal_subsampling: bool = False
    cumulative_norm: bool = False
    subsample_eps: float = Field(default=1e-6, gt=0)
    reduction: int = Field(default=1, gt=0)

    def layer_params(self) -> dict[str, int]:
        """One Conformer layer: its two FFNs, attention, light conv and output norm."""
        d = self.d_model
        return {"ffn_norm": 4 * d, "ffn_up": 2 * 4 * d * d, "ffn_down": 2 * 4 * d * d, "attn_norm": 2 * d,
                "q": d * d, "k": d * d, "v": d * d, "attn_out": d * d, "relative_k": d * d,
                "per_dim_scale": d // self.n_heads, "conv_norm": 2 * d, "conv_in": 2 * d * d,
                "depthwise_conv": d * self.conv_kernel, "conv_out": d * d, "out_norm": d}

    def params(self) -> dict[str, int]:
        """The encoder's components in the order audio meets them: layer rows summed over layers."""
        d, width = self.d_model, self.out_width or self.d_model
        rows = {"subsample_conv": sum(i * o * kh * kw for i, o, kh, kw in self.convs),
                "subsample_norm": sum(o for _, o, _, _ in self.convs), "input_projection": self.subsample_width * d}
        rows.update({name: self.n_layers * n for name, n in self.layer_params().items()})
        rows.update(present(output_projection=d * self.out_width + self.out_width,
                            audio_embedding=self.vocab * d + 2 * d * bool(self.vocab)))
        rows["projector"] = width * self.text_width
        return rows

    @property
    def total(self) -> int:
        return sum(self.params().values())

    def describe(self) -> str:
        return (f"conformer: {self.n_layers} layers of {self.d_model}, {self.n_heads} heads, "
                f"conv kernel {self.conv_kernel}")
