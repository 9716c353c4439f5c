"""Phi-4-multimodal's audio tower (calc/towers/phi4_audio.py), one `Slot` per tensor, so `verify` and
`inspect` account for it as for a ViT.

Read off transformers 5.24's Phi4MultimodalAudioEmbedding (models/phi4_multimodal/modeling_phi4_multimodal.py)
built on the meta device, under the decoder's `model.embed_tokens_extend.audio_embed`: NeMo's subsampling
(a 3x3 conv, then per further stride-2 step a depthwise 3x3 and a pointwise 1x1, at their nn.Sequential
indices 0, 2, 3, 5, 6, ...; the activations hold none), its output linear, the relative-position bias
table, the Conformer layers, the two projector pairs; the input's global mean and inverse deviation
are stored buffers. No conversion mapping renames them, so save_pretrained keeps these names.
Targets are Phi4Audio.params()' keys under the tower's name (`audio.attention`).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.slots import Slot
from calc.towers import Phi4Audio

__all__ = ["PHI4_AUDIO_LAYOUTS", "phi4_audio_roles"]

PHI4_AUDIO_LAYOUTS: dict[str, dict[str, Any]] = {
    "phi4_conformer": {"root": "model.embed_tokens_extend.audio_embed", "encoder": "encoder",
                       "projectors": {"projector": ("up_proj_for_speech", "down_proj_for_speech"),
                                      "vision_speech_projector": ("up_proj_for_vision_speech",
                                                                  "down_proj_for_vision_speech")}},
}


def phi4_audio_roles(name: str, tower: Phi4Audio, lay: dict[str, Any]) -> dict[str, Slot]:
    """Every tensor of the audio tower by its role, named in full under the layout's root."""
    slots: dict[str, Slot] = {}
    root = f"{lay['root']}.{lay['encoder']}"

    def add(role: str, path: str, shape: tuple[int, ...], target: str | None, kind: str = "param") -> None:
        full = path[1:] if path.startswith("~") else f"{root}.{path}"
        slots[role] = Slot(full, shape, target and f"{name}.{target}", (), "buffer" if target is None else "normal",
                           "buffer" if target is None else kind)

    def biased(role: str, path: str, shape: tuple[int, ...], target: str) -> None:
        """A weight and its bias [out]; a LayerNorm's two where the weight has one axis."""
        kind = "norm" if len(shape) == 1 else "linear"
        add(f"{role}.weight", f"{path}.weight", shape, target, kind)
        add(f"{role}.bias", f"{path}.bias", shape[:1], target, kind)

    c, d = tower.conv_channels, tower.d_model
    for stat in ("global_mean", "global_invstd"):
        add(stat, f"encoder_embedding.{stat}", (tower.input_size,), None)
    biased("subsample.0", "embed.conv.0", (c, 1, 3, 3), "subsample_conv")
    for step in range(1, tower.subsample_convs):
        biased(f"subsample.{step}.depthwise", f"embed.conv.{3 * step - 1}", (c, 1, 3, 3), "subsample_conv")
        biased(f"subsample.{step}.pointwise", f"embed.conv.{3 * step}", (c, c, 1, 1), "subsample_conv")
    biased("input_projection", "embed.out", (d, c * tower.frequencies), "input_projection")
    add("relative_bias", "relative_attention_bias_layer.bias_values.weight", (tower.bias_buckets, tower.n_heads),
        "relative_bias", "embedding")
    for i in range(tower.n_layers):
        _layer(biased, add, f"layer.{i}", f"encoders.{i}", tower)
    text = tower.text_width
    for target, (up, down) in lay["projectors"].items():
        biased(f"{target}.up", f"~{lay['root']}.{up}", (text, d * tower.downsample_rate), target)
        biased(f"{target}.down", f"~{lay['root']}.{down}", (text, text), target)
    return slots


def _layer(biased: Any, add: Any, role: str, path: str, tower: Phi4Audio) -> None:
    """One Conformer layer: FFN in, attention, conv module, FFN out, output norm (every norm a biased LayerNorm)."""
    d, ff, e, m = tower.d_model, tower.d_ff, tower.glu_out, tower.depthwise_multiplier
    for ffn in ("feed_forward_in", "feed_forward_out"):
        biased(f"{role}.{ffn}.norm", f"{path}.{ffn}.layer_norm", (d,), "ffn_norm")
        biased(f"{role}.{ffn}.up", f"{path}.{ffn}.gate_up_proj", (2 * ff, d), "ffn_up")
        biased(f"{role}.{ffn}.down", f"{path}.{ffn}.down_proj", (d, ff), "ffn_down")
    biased(f"{role}.attn_norm", f"{path}.layer_norm_att", (d,), "attn_norm")
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        biased(f"{role}.{proj}", f"{path}.self_attn.{proj}", (d, d), "attention")
    biased(f"{role}.conv_norm", f"{path}.conv.layer_norm", (d,), "conv_norm")
    biased(f"{role}.glu", f"{path}.conv.glu.ext_pw_conv_1d", (2 * e, d, 1), "glu_conv")
    for gate in ("b1", "b2"):
        add(f"{role}.glu.{gate}", f"{path}.conv.glu.{gate}", (1, e, 1), "glu_conv")
    biased(f"{role}.depthwise", f"{path}.conv.dw_sep_conv_1d.dw_conv", (d * m, 1, tower.conv_kernel), "depthwise_conv")
    biased(f"{role}.pointwise", f"{path}.conv.dw_sep_conv_1d.pw_conv", (tower.separable_out, d * m, 1), "pointwise_conv")
    biased(f"{role}.conv_out", f"{path}.conv.ext_pw_conv_1d", (e, d, 1), "conv_out")
    biased(f"{role}.out_norm", f"{path}.layer_norm", (d,), "out_norm")
