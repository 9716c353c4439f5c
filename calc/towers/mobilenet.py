"""Gemma 3n's vision tower: timm's MobileNet-v5 encoder (`mobilenetv5_300m_enc`), a convolutional
network, not a ViT, so a part of its own (like the Conformer) with the towers' interface.

transformers builds it through timm (TimmWrapperModel, models/timm_wrapper) from `vision_config`'s
`architecture`; its layers are timm 1.0.31's (timm/models/mobilenetv5.py, _efficientnet_blocks.py,
layers/attention2d.py). Every conv is bias-free but the stem's, every norm an RmsNorm2d with one
scale per channel, and the blocks are written in timm's block notation (`ARCHITECTURES`):

    stem          conv 3 -> 64, 3x3, with bias; norm
    er_k{k}_e{e}_c{c}        EdgeResidual: conv c_in -> c_in·e (k x k); norm; 1x1 conv -> c; norm
    uir_a{a}_k{k}_e{e}_c{c}  UniversalInvertedResidual: a depthwise a x a conv and norm (a > 0),
                             1x1 conv c_in -> c_in·e and norm, a depthwise k x k conv and norm (k > 0),
                             1x1 conv -> c and norm, a layer scale of c
    mqa_k{k}_h{h}_v{v}_d{d}_c{c}  MobileAttention: norm; multi-query attention (query c_in -> h·d; one
                             key and one value head c_in -> d each, after a depthwise k x k conv and
                             a norm where the keys and values are strided, v > 1; output h·d -> c);
                             a layer scale of c
    msfa          the feature maps `fused_maps` names (timm's msfa_indices over [stem, stage 1, ...,
                  stage 4]; by default the last two stages', 640 + 1280) upsampled (nearest) to the
                  first one's grid and concatenated, a uir with neither depthwise conv (expansion 2, no
                  layer scale) to `width` (2048, fixed by timm), brought to `output_grid` a side
                  (msfa_output_resolution, 16 by default); norm

Every channel count of the released architecture is a multiple of 8, so timm's make_divisible
leaves c_in·e as it is. Gemma3nMultimodalEmbedder (`embed_vision`, models/gemma3n/modeling_gemma3n.py)
then holds a table of `vocab` hard vision-token rows and two scaled norms over the vision width,
and a bias-free projection into the text width (its last norm has no scale).
"""


from typing import Literal

from calc.parts.base import Field, Part, model_validator
from calc.towers.images import FixedImages

__all__ = ["ARCHITECTURES", "LABELS", "ROWS", "MobileNet", "block_options", "block_params"]

_PAIRS_640 = ("mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640")
_PAIRS_1280 = ("mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280")
# timm 1.0.31 timm/models/mobilenetv5.py lines 789-885 (_gen_mobilenet_v5, any variant but mobilenetv5_base):
# four stages of block strings, as written there.
ARCHITECTURES: dict[str, tuple[tuple[str, ...], ...]] = {"mobilenetv5_300m_enc": (
    ("er_r1_k3_s2_e4_c128", "er_r1_k3_s1_e4_c128", "er_r1_k3_s1_e4_c128"),
    ("uir_r1_a3_k5_s2_e6_c256", "uir_r1_a5_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256", "uir_r1_a5_k0_s1_e4_c256",
     "uir_r1_a3_k0_s1_e4_c256"),
    ("uir_r1_a5_k5_s2_e6_c640", *("uir_r1_a5_k0_s1_e4_c640",) * 7, "uir_r1_a0_k0_s1_e1_c640", *_PAIRS_640 * 14),
    ("uir_r1_a5_k5_s2_e6_c1280", *_PAIRS_1280 * 19),
)}

# Block kind (the string's first field) -> its component key.
ROWS = {"er": "edge_residual", "uir": "inverted_residual", "mqa": "mobile_attention"}
LABELS = {"stem": "stem conv", "edge_residual": "edge residual blocks", "inverted_residual": "inverted residual blocks",
          "mobile_attention": "multi-query attention blocks", "msfa": "multi-scale fusion adapter",
          "vision_embedding": "vision token table and its two norms"}


def block_options(block: str) -> tuple[str, dict[str, int]]:
    """timm's block string (`uir_r1_a3_k5_s2_e6_c256`): its kind and its numeric options by letter."""
    kind, *options = block.split("_")
    return kind, {option[0]: int(option[1:]) for option in options}


def block_params(block: str, c_in: int, layer_scale: bool = True) -> tuple[int, int]:
    """One block's parameters and its output channels, from its string and its input channels."""
    kind, o = block_options(block)
    c = o["c"]
    if kind == "er":
        mid = c_in * o["e"]
        return c_in * mid * o["k"] ** 2 + mid + mid * c + c, c
    scale = c * layer_scale
    if kind == "uir":
        mid = c_in * o["e"]
        start = (c_in * o["a"] ** 2 + c_in) * bool(o["a"])
        middle = (mid * o["k"] ** 2 + mid) * bool(o["k"])
        return start + c_in * mid + mid + middle + mid * c + c + scale, c
    heads, d, strided = o["h"], o["d"], o.get("v", 1) > 1
    down = 2 * (c_in * o["k"] ** 2 + c_in) * strided  # the keys' and the values' depthwise conv and norm
    return c_in + c_in * heads * d + down + 2 * c_in * d + heads * d * c + scale, c


class MobileNet(Part):
    """One MobileNet-v5 encoder and Gemma 3n's vision embedder, as the checkpoint stores them."""

    kind: Literal["mobilenetv5"] = "mobilenetv5"
    modality: Literal["vision"] = "vision"
    architecture: str = Field(description="timm's model name: which ARCHITECTURES entry")
    in_channels: int = Field(default=3, gt=0)
    stem: int = Field(default=64, gt=0)
    stages: tuple[tuple[str, ...], ...] = Field(strict=False)
    width: int = Field(default=2048, gt=0)  # the fusion adapter's output: MobileNetV5Encoder.num_features
    fusion_expansion: int = Field(default=2, gt=0)
    # The fusion adapter's inputs, by their index over the feature maps [stem, stage 1, ..., stage n] in the
    # network's order (MobileNetV5Encoder's msfa_indices made absolute), and the side of the grid it leaves
    # (msfa_output_resolution): timm's defaults, or what vision_config.model_args sets (calc/towers/gemma3n.py)
    fused_maps: tuple[int, ...] = Field(strict=False, min_length=1)
    output_grid: int = Field(gt=0)
    d_model: int = Field(gt=0)  # the embedder's vision width (vision_config.hidden_size)
    eps: float = Field(default=1e-6, gt=0)  # the embedder's RMSNorms (rms_norm_eps): computation only
    vocab: int = Field(ge=0)  # hard vision-token rows
    text_width: int = Field(gt=0)
    images: FixedImages | None = None  # every image 768 x 768 -> 16 x 16 = 256 tokens (calc/towers/gemma3n.py)

    @model_validator(mode="after")
    def _fused(self) -> "MobileNet":
        maps = self.fused_maps
        if list(maps) != sorted(set(maps)) or not 0 <= maps[0] <= maps[-1] <= len(self.stages):
            raise ValueError(f"fused_maps {maps}: expected increasing indices of the {len(self.stages) + 1} "
                             "feature maps (the stem's, then each stage's)")
        return self

    @property
    def names(self) -> str:
        """Whose tensor names its checkpoints use (calc.checkpoint.tower_slots.layout_of)."""
        return self.kind

    def feature_channels(self) -> list[int]:
        """The channels of each feature map timm numbers (its feature_info): the stem's, then each stage's
        last block's."""
        return [self.stem, *(block_options(stage[-1])[1]["c"] for stage in self.stages)]

    @property
    def fused_channels(self) -> int:
        """The channels the fusion adapter reads: its feature maps side by side."""
        channels = self.feature_channels()
        return sum(channels[i] for i in self.fused_maps)

    @property
    def output_width(self) -> int:
        """Each soft token leaves the embedder in the text width."""
        return self.text_width

    @property
    def n_layers(self) -> int:
        return sum(len(stage) for stage in self.stages)

    def layer_params(self) -> dict[str, int]:
        """No two blocks alike: no per-layer row."""
        return {}

    def params(self) -> dict[str, int]:
        """The encoder's components in the order an image meets them, then the embedder's."""
        rows = {"stem": self.in_channels * self.stem * 9 + 2 * self.stem}
        rows.update(dict.fromkeys(ROWS.values(), 0))
        c = self.stem
        for stage in self.stages:
            for block in stage:
                n, c = block_params(block, c)
                rows[ROWS[block_options(block)[0]]] += n
        fused = self.fused_channels
        mid = fused * self.fusion_expansion
        rows["msfa"] = fused * mid + mid + mid * self.width + self.width + self.width
        rows["vision_embedding"] = self.vocab * self.d_model + 2 * self.d_model
        rows["projector"] = self.d_model * self.text_width
        return rows

    @property
    def total(self) -> int:
        return sum(self.params().values())

    def describe(self) -> str:
        kinds = [block_options(block)[0] for stage in self.stages for block in stage]
        counts = ", ".join(f"{kinds.count(k)} {LABELS[row].removesuffix(' blocks')}" for k, row in ROWS.items())
        return f"mobilenetv5 ({self.architecture}): {self.n_layers} blocks in {len(self.stages)} stages ({counts})"
