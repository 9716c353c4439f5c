"""Towers: the encoders a multimodal checkpoint holds beside its decoder, each with the projector
that maps its output into the decoder's width.

    Model = decoder (ModelSpec's stack) + towers {vision | audio: Tower}

Every vision tower in use is a pre-norm ViT, so one part describes them all as data:

    patch embedding   in_channels · temporal · patch² · d  (+ d bias)   a conv, or Llama-4's linear
    class token       d                                                 Llama-4
    positions         rows · d                                          learned table; 0 with 2-D rotary
    pre norm          (Llama-4's layernorm_pre, Pixtral's ln_pre)
    n_layers × (norm, attention, norm, MLP)                             the decoder's own parts
                + 2 · d output norms                                            Gemma 4 (sandwich)
                + 2 · d layer scales                                            InternViT
    post norm         (SigLIP's post_layernorm, Llama-4's layernorm_post)
    pooling head      a probe, a torch MultiheadAttention (fused in-projection), a norm and an MLP
                                                                        Phi-4-multimodal (SigLIP's head)
    separators        `separators` vectors of the tower's width         Phi-4-multimodal's two HD separators
    image newline     text width                                        LLaVA-OneVision
    projectors        a norm and linear layers each; `repeat` identical ones (Qwen3-VL's DeepStack
                      mergers, one per tapped layer)

What differs between kinds (SigLIP, Qwen2.5-VL / Qwen3-VL, Pixtral, Llama-4) is which of these a
config switches on, read by the tower kind's module (calc/towers/<kind>.py), and how an image
becomes tokens (`calc.towers.images`). Window attention (Qwen2.5-VL) and 2-D rotary change what is
computed, never what is stored. An audio encoder of Conformer layers (Gemma 3n's, Gemma 4's) is its own part,
`calc.towers.conformer.Conformer`, with the same interface (params, layer_params, describe), and so is
Gemma 3n's convolutional vision encoder, `calc.towers.mobilenet.MobileNet` (timm's MobileNet-v5).
"""


import math
from importlib import import_module
from typing import Any, Literal

from calc.errors import GptcalcError
from calc.parts import MLP, Attention, Norm
from calc.parts.base import Field, Part, model_validator, present
from calc.towers.conformer import LABELS as CONFORMER_LABELS
from calc.towers.conformer import Conformer
from calc.towers.mobilenet import LABELS as MOBILENET_LABELS
from calc.towers.mobilenet import MobileNet
from calc.towers.phi4_audio import LABELS as PHI4_AUDIO_LABELS
from calc.towers.phi4_audio import Phi4Audio
from calc.towers.images import (AnyresImages, CanvasImages, CropImages, FixedImages, GridImages, HdImages, NavitImages,
                                PooledImages, RowImages, TileImages)

__all__ = ["LABELS", "READERS", "Conformer", "Linear", "MobileNet", "Phi4Audio", "Projector", "RopeTable", "Tower",
           "biased_attention", "engine_build", "towers_of", "vision_tower"]
ImageRule = (GridImages | FixedImages | RowImages | TileImages | AnyresImages | PooledImages | CanvasImages
             | NavitImages | HdImages | CropImages)


class Linear(Part):
    """One projection d_in -> d_out: d_in·d_out weights, d_out bias; a `kernel` x `kernel` convolution
    (Step-3.7's downsamplers) has kernel² of each weight, and its `stride` and zero `padding` set the
    size of the grid it leaves (the image's journey, calc/analysis/shapes/tower.py)."""

    d_in: int = Field(gt=0)
    d_out: int = Field(gt=0)
    bias: bool = False
    kernel: int = Field(default=1, gt=0)
    stride: int = Field(default=1, gt=0)
    padding: int = Field(default=0, ge=0)

    def side(self, n: int) -> int:
        """A side of n rows or columns after the convolution: floor((n + 2·padding - kernel) / stride) + 1,
        as torch's Conv2d sizes its output."""
        return (n + 2 * self.padding - self.kernel) // self.stride + 1

    def params(self) -> int:
        return self.kernel ** 2 * self.d_in * self.d_out + self.d_out * self.bias


class RopeTable(Part):
    """A cos/sin table vLLM builds for a tower's rotary: a buffer of the module, made at load (or on the first
    forward) and whole on every GPU, which no checkpoint holds: `rows` positions x `width` values, in the model's dtype or
    complex64 (8 B, Llama 4's vision rope). The tower's reader states it (calc/towers/<kind>.py)."""

    rows: int = Field(gt=0)
    width: int = Field(gt=0)
    dtype: Literal["model", "complex64"] = "model"

    def bytes(self, element_bytes: int) -> int:
        """The table's bytes where the model's values take `element_bytes`."""
        return self.rows * self.width * (8 if self.dtype == "complex64" else element_bytes)


class Projector(Part):
    """What maps a tower's output into the decoder: a norm (over `norm_width`) then linear layers;
    `repeat` identical copies (Qwen3-VL's DeepStack mergers). `name` is its component key."""

    name: str
    norm: Norm | None = None
    norm_width: int = Field(default=0, ge=0)
    linears: tuple[Linear, ...] = Field(default=(), strict=False)
    repeat: int = Field(default=1, gt=0)

    def params(self) -> int:
        norm = self.norm.params(self.norm_width) if self.norm else 0
        return self.repeat * (norm + sum(linear.params() for linear in self.linears))

    @property
    def d_out(self) -> int:
        return self.linears[-1].d_out


class Tower(Part):
    """One encoder (a ViT) and its projectors, as the checkpoint stores them."""

    modality: Literal["vision", "audio"] = "vision"
    kind: str = Field(description="which tower: the module under calc/towers that read it")
    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    attention: Attention
    mlp: MLP
    norm: Norm
    in_channels: int = Field(default=3, gt=0)
    patch_size: int = Field(gt=0)
    temporal_patch: int = Field(default=1, gt=0)  # Qwen-VL: frames per patch (an image is repeated)
    patch_bias: bool = False
    class_token: bool = False
    positions: int = Field(default=0, ge=0)  # rows of a learned position table
    # the table's rows as stored where it has two axes (Gemma 4: one table per image axis, (2, size);
    # MoonViT: a (height, width) grid): what a checkpoint's tensor shape says; their product is `positions`
    position_grid: tuple[int, ...] = Field(default=(), strict=False)
    pre_norm: Norm | None = None
    post_norm: Norm | None = None
    pooling_head: bool = False  # Phi-4-multimodal builds SigLIP's attention-pooling head (its output unused)
    separators: int = Field(default=0, ge=0)  # Phi-4-multimodal: learned separator vectors of width d
    projectors: tuple[Projector, ...] = Field(default=(), strict=False)
    images: ImageRule | None = Field(default=None, discriminator="kind")
    layer_scale: bool = False  # InternViT: two learned d-wide scales per layer (lambda_1, lambda_2)
    newline: int = Field(default=0, ge=0)  # LLaVA-OneVision's image_newline: one vector of this (text) width
    post_norms: bool = False  # Gemma 4: a norm on the attention's and on the MLP's output too (sandwich)
    # Gemma 4's `standardize`: the pooled features minus std_bias, times std_scale, two d-wide buffers its
    # checkpoints hold (no parameters: the count is unchanged)
    standardize: bool = False
    window: int = Field(default=0, ge=0)  # Qwen2.5-VL: attention within window x window patches ...
    full_layers: tuple[int, ...] = Field(default=(), strict=False)  # ... but in these layers (computation only)
    # Computation only, for the torch reference (calc.reference.tower): the 2-D rotary's base (Qwen-VL's
    # vision rope_parameters; transformers' default 10000) and the layers whose output a DeepStack merger reads
    rope_theta: float = Field(default=10_000.0, gt=0)
    deepstack_layers: tuple[int, ...] = Field(default=(), strict=False)
    # ... and the encoder outputs the projector reads, concatenated (Mistral-3's vision_feature_layer:
    # 0 the embeddings, i the output of layer i, -1 the last layer's)
    feature_layers: tuple[int, ...] = Field(default=(-1,), strict=False)
    # vLLM's own cos/sin table for the 2-D rotary, which its ViT builds at load (memory, not parameters)
    vllm_rope: RopeTable | None = None
    # ... or on its first forward, inside the profiling run, and keeps from then on (MoonViT's)
    vllm_forward_rope: RopeTable | None = None

    @model_validator(mode="after")
    def _grid(self) -> "Tower":
        if self.position_grid and math.prod(self.position_grid) != self.positions:
            raise ValueError(f"position_grid {self.position_grid} holds {math.prod(self.position_grid)} rows, "
                             f"not positions={self.positions}")
        return self

    def layer_params(self) -> dict[str, int]:
        """One encoder layer: norm, attention, norm, MLP, with the decoder parts' component keys."""
        d = self.d_model
        post = self.norm.params(d) * self.post_norms
        return {"attn_norm": self.norm.params(d), **self.attention.params(d), **present(attn_post_norm=post),
                "mlp_norm": self.norm.params(d), **self.mlp.params(d), **present(mlp_post_norm=post),
                **present(layer_scale=2 * d * self.layer_scale)}

    def params(self) -> dict[str, int]:
        """The tower's components, in the order an image meets them: layer rows summed over layers."""
        d = self.d_model
        rows = present(patch_embedding=self.in_channels * self.temporal_patch * self.patch_size ** 2 * d
                       + d * self.patch_bias,
                       class_embedding=d * self.class_token, position_embedding=self.positions * d,
                       pre_norm=self.pre_norm.params(d) if self.pre_norm else 0)
        rows.update({name: self.n_layers * n for name, n in self.layer_params().items() if n})
        rows.update(present(post_norm=self.post_norm.params(d) if self.post_norm else 0,
                            pooling_head=self._pooling_head(), separators=self.separators * d))
        rows.update({projector.name: projector.params() for projector in self.projectors})
        rows.update(present(image_newline=self.newline))
        return rows

    def _pooling_head(self) -> int:
        """A probe vector, MultiheadAttention's fused in-projection (3d x d, 3d) and out-projection, a
        norm and an MLP of the encoder layers' shape."""
        d = self.d_model
        return (d + 4 * d * d + 4 * d + self.norm.params(d) + sum(self.mlp.params(d).values())) * self.pooling_head

    @property
    def total(self) -> int:
        return sum(self.params().values())

    @property
    def output_width(self) -> int:
        """The width of one embedding the encoder hands the decoder: the last projector's, once per
        projector that feeds it (Qwen3-VL's merger and each DeepStack merger)."""
        main = [p for p in self.projectors if p.name != "deepstack_mergers"][-1]
        return main.d_out * (1 + sum(p.repeat for p in self.projectors if p.name == "deepstack_mergers"))

    @property
    def names(self) -> str:
        """Whose tensor names its checkpoints use (calc.checkpoint.tower_slots): its kind's."""
        return self.kind

    def describe(self) -> str:
        merged = [p for p in self.projectors if p.repeat > 1]
        extra = "".join(f", {p.repeat} {p.name.replace('_', ' ')}" for p in merged)
        return (f"{self.kind}: {self.n_layers} layers of {self.d_model}, {self.attention.n_heads} heads, "
                f"patch {self.patch_size}{extra}")


# Component labels a tower adds to the decoder's.
LABELS = {
    "patch_embedding": "patch embedding", "class_embedding": "class token", "pre_norm": "pre-encoder norm",
    "post_norm": "post-encoder norm", "merger": "patch merger", "deepstack_mergers": "DeepStack mergers",
    "projector": "multimodal projector", "adapter": "vision adapter (pixel shuffle MLP)",
    "image_newline": "image newline", "layer_scale": "layer scale (2 per layer)", **CONFORMER_LABELS,
    **MOBILENET_LABELS, **PHI4_AUDIO_LABELS, "pooling_head": "attention-pooling head",
    "separators": "image separators", "downsamplers": "conv downsamplers",
}

# Outer (multimodal) model_type -> the calc.towers module that reads its towers.
READERS: dict[str, str] = {
    "qwen3_5": "qwen_vl", "qwen3_5_moe": "qwen_vl", "qwen3_vl": "qwen_vl",
    "qwen3_vl_moe": "qwen_vl", "qwen2_5_vl": "qwen_vl", "gemma3": "siglip", "llama4": "llama4",
    "mistral3": "pixtral", "llava_onevision": "llava_onevision", "internvl": "internvl", "gemma4": "gemma4",
    "gemma3n": "gemma3n", "kimi_k25": "moonvit", "phi4_multimodal": "phi4_multimodal",
    "step3p7": "step3p7", "minimax_m3_vl": "minimax_m3",
}


def engine_build(config: dict[str, Any], engine: str) -> dict[str, Any]:
    """An engine's facts about a multimodal config's architecture (calc/spec/sglang.py, calc/spec/llamacpp.py), as
    its reader states them in a module-level mapping named after the engine (SGLANG, LLAMACPP) of model_type to that
    engine's build fields ({} where it states none): the whole checkpoint's class decides what the engine loads."""
    module = READERS.get(config.get("model_type"))  # type: ignore[arg-type]
    facts = getattr(import_module(f"calc.towers.{module}"), engine.upper(), {}) if module else {}
    return facts.get(config["model_type"], {})


def biased_attention(d_model: int, n_heads: int, **layout: Any) -> dict[str, Any]:
    """A ViT encoder's attention as the readers write it: heads of d_model / n_heads, a bias on
    every projection (SigLIP, Llama-4's and Qwen-VL's encoders), plus a reader's own `layout`."""
    return {"n_heads": n_heads, "head_dim": d_model // n_heads, "q_bias": True, "k_bias": True, "v_bias": True,
            "o_bias": True, **layout}


def towers_of(config: dict[str, Any], origin: str, text_width: int) -> dict[str, dict[str, Any]] | None:
    """The towers of a multimodal config.json as Tower fields, or None when its kind is not read here."""
    from calc.arch.config import Config

    module = READERS.get(config.get("model_type"))  # type: ignore[arg-type]
    if module is None:
        return None
    return import_module(f"calc.towers.{module}").towers(Config(config, origin), text_width)


def vision_tower(spec: Any) -> Tower:
    """`spec`'s vision tower, for what an image costs (`--image`): an error line where it has none
    gptcalc reads, or no rule for how its images become tokens."""
    tower = spec.towers.get("vision")
    if tower is None:
        raise GptcalcError(f"--image: {spec.name} has no vision tower gptcalc reads"
                           + (f" ({', '.join(spec.uncounted)} not counted)" if spec.uncounted else ""))
    if tower.images is None:
        raise GptcalcError(f"--image: how {tower.kind} turns an image into tokens is not modelled yet")
    return tower
