"""Gemma 3n's MobileNet-v5 vision tower (calc/towers/mobilenet.py), tensor by tensor, so `verify` and
`inspect` account for its checkpoint tensors as they do for a ViT's or a Conformer's.

Names are timm's module paths (timm 1.0.31: MobileNetV5Encoder's `conv_stem`, `blocks.{stage}.{block}`
with EdgeResidual's conv_exp/bn1/conv_pwl/bn2, UniversalInvertedResidual's dw_start/pw_exp/dw_mid/
pw_proj (each a ConvNormAct: `.conv`, `.bn`) and layer_scale.gamma, MobileAttention's norm,
attn.query/key/value/output and layer_scale.gamma, `msfa`) under transformers' TimmWrapperModel
(`model.vision_tower.timm_model`), and Gemma3nMultimodalEmbedder's under `model.embed_vision`:
read off Gemma3nForConditionalGeneration built on the meta device with timm installed
(tests/test_towers.py checks every name and shape there). Targets are MobileNet.params()' keys
under the tower's name (`vision.msfa`).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.slots import Slot
from calc.towers.mobilenet import ROWS, MobileNet, block_options

__all__ = ["MOBILENET_LAYOUTS", "mobilenet_roles"]

MOBILENET_LAYOUTS: dict[str, dict[str, Any]] = {
    # Gemma 3n holds and saves the decoder under `model.language_model.` (no conversion mapping for gemma3n)
    "mobilenetv5": {"root": "model.vision_tower.timm_model", "embedder": "model.embed_vision",
                    "renames": (("model.language_model.", "model."),)},
}


class _Named:
    """Collects one tower's slots by role, each named in full."""

    def __init__(self, name: str) -> None:
        self.name, self.slots = name, {}

    def add(self, role: str, path: str, shape: tuple[int, ...], target: str, init: str = "normal",
            kind: str = "param") -> None:
        self.slots[role] = Slot(path, shape, f"{self.name}.{target}", (), init, kind)

    def conv(self, path: str, c_in: int, c_out: int, kernel: int, target: str, depthwise: bool = False,
             norm: bool = True) -> None:
        """A bias-free conv (one input channel per output in a depthwise one) and its RMSNorm's scale."""
        self.add(f"{path}.weight", f"{path}.weight", (c_out, 1 if depthwise else c_in, kernel, kernel), target)
        if norm:
            self.add(f"{path}.norm", f"{path.removesuffix('.conv')}.bn.weight", (c_out,), target, "ones", "norm")


def mobilenet_roles(name: str, tower: MobileNet, lay: dict[str, Any]) -> dict[str, Slot]:
    """Every tensor of one MobileNet-v5 tower and its embedder, by its full name."""
    s, root = _Named(name), lay["root"]
    stem = f"{root}.conv_stem.conv"
    s.conv(stem, tower.in_channels, tower.stem, 3, "stem")
    s.add(f"{stem}.bias", f"{stem}.bias", (tower.stem,), "stem", "zeros")
    c = tower.stem
    for i, stage in enumerate(tower.stages):
        for j, block in enumerate(stage):
            c = _block(s, f"{root}.blocks.{i}.{j}", block, c)
    fused, width = tower.fused_channels, tower.width
    mid = fused * tower.fusion_expansion
    s.conv(f"{root}.msfa.ffn.pw_exp.conv", fused, mid, 1, "msfa")
    s.conv(f"{root}.msfa.ffn.pw_proj.conv", mid, width, 1, "msfa")
    s.add(f"{root}.msfa.norm", f"{root}.msfa.norm.weight", (width,), "msfa", "ones", "norm")
    embedder, d = lay["embedder"], tower.d_model
    s.add(f"{embedder}.embedding", f"{embedder}.embedding.weight", (tower.vocab, d), "vision_embedding",
          kind="embedding")
    for norm in ("hard_embedding_norm", "soft_embedding_norm"):
        s.add(f"{embedder}.{norm}", f"{embedder}.{norm}.weight", (d,), "vision_embedding", "ones", "norm")
    s.add(f"{embedder}.projection", f"{embedder}.embedding_projection.weight", (tower.text_width, d), "projector",
          kind="linear")
    return s.slots


def _block(s: _Named, path: str, block: str, c_in: int) -> int:
    """One block's tensors (its timm string read as MobileNet counts it); its output channels."""
    kind, o = block_options(block)
    target, c = ROWS[kind], o["c"]
    if kind == "er":
        s.conv(f"{path}.conv_exp", c_in, c_in * o["e"], o["k"], target, norm=False)
        s.add(f"{path}.bn1", f"{path}.bn1.weight", (c_in * o["e"],), target, "ones", "norm")
        s.conv(f"{path}.conv_pwl", c_in * o["e"], c, 1, target, norm=False)
        s.add(f"{path}.bn2", f"{path}.bn2.weight", (c,), target, "ones", "norm")
        return c
    if kind == "uir":
        mid = c_in * o["e"]
        if o["a"]:
            s.conv(f"{path}.dw_start.conv", c_in, c_in, o["a"], target, depthwise=True)
        s.conv(f"{path}.pw_exp.conv", c_in, mid, 1, target)
        if o["k"]:
            s.conv(f"{path}.dw_mid.conv", mid, mid, o["k"], target, depthwise=True)
        s.conv(f"{path}.pw_proj.conv", mid, c, 1, target)
    else:
        heads, d = o["h"], o["d"]
        s.add(f"{path}.norm", f"{path}.norm.weight", (c_in,), target, "ones", "norm")
        s.conv(f"{path}.attn.query.proj", c_in, heads * d, 1, target, norm=False)
        for head in ("key", "value"):
            if o.get("v", 1) > 1:
                s.conv(f"{path}.attn.{head}.down_conv", c_in, c_in, o["k"], target, depthwise=True, norm=False)
                s.add(f"{path}.attn.{head}.norm", f"{path}.attn.{head}.norm.weight", (c_in,), target, "ones", "norm")
            s.conv(f"{path}.attn.{head}.proj", c_in, d, 1, target, norm=False)
        s.conv(f"{path}.attn.output.proj", heads * d, c, 1, target, norm=False)
    s.add(f"{path}.layer_scale", f"{path}.layer_scale.gamma", (c,), target, "ones")
    return c
