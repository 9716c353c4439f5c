"""A Conformer audio tower's tensors (calc/towers/conformer.py), one `Slot` each, so `verify` and
`inspect` account for Gemma 4's and Gemma 3n's audio encoders as they do for a ViT.

The two encoders hold the same tensors under different names (data, `CONFORMER_LAYOUTS`, keyed by
`Conformer.names`): read off transformers 5.24's Gemma4AudioModel (models/gemma4/modeling_gemma4.py)
and Gemma3nAudioEncoder (models/gemma3n/modeling_gemma3n.py) built on the meta device, neither
renamed by conversion_mapping.py, so the Hub's files and save_pretrained keep them. Gemma 4 wraps
each linear in a Gemma4ClippableLinear (`.linear`) whose four clipping bounds are scalar buffers
(`use_clipped_linears`): stored in its files, no parameters. Targets are Conformer.params()' keys
under the tower's name (`audio.q`), as `calc.checkpoint.tower_slots` does for a ViT.
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.slots import Slot
from calc.towers import Conformer

__all__ = ["CONFORMER_LAYOUTS", "conformer_roles"]

_BOUNDS = ("input_min", "input_max", "output_min", "output_max")

# Paths under `root` (a `~` marks a full name); `ffns`, `attn_norms`: the layer's two of each; `clipped`:
# the suffix of a wrapped linear's weight (Gemma 4) and whether its clipping bounds are stored beside it;
# `mask_marks`: what True means in get_audio_features' input_features_mask (Gemma 3n's encoder takes the
# padded frames, Gemma3nModel.forward inverting the processor's mask; Gemma 4's the valid ones).
CONFORMER_LAYOUTS: dict[str, dict[str, Any]] = {
    "gemma4_audio": {
        "root": "model.audio_tower", "conv": "subsample_conv_projection.layer{j}",
        "input_projection": "subsample_conv_projection.input_proj_linear", "layers": "layers",
        "ffns": ("feed_forward1", "feed_forward2"), "attn_norms": ("norm_pre_attn", "norm_post_attn"),
        "q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "attn_out": "self_attn.post",
        "relative_k": "self_attn.relative_k_proj", "per_dim_scale": "self_attn.per_dim_scale",
        "out_norm": "norm_out", "clipped": ".linear", "output_projection": "output_proj", "mask_marks": "valid",
        "projector": "~model.embed_audio.embedding_projection"},
    "gemma3n_audio": {
        "root": "model.audio_tower", "conv": "subsample_conv_projection.conv_{j}",
        "input_projection": "subsample_conv_projection.input_proj_linear", "layers": "conformer",
        "ffns": ("ffw_layer_start", "ffw_layer_end"), "attn_norms": ("attention.pre_attn_norm", "attention.post_norm"),
        "q": "attention.attn.q_proj", "k": "attention.attn.k_proj", "v": "attention.attn.v_proj",
        "attn_out": "attention.post", "relative_k": "attention.attn.relative_position_embedding.pos_proj",
        "per_dim_scale": "attention.attn.per_dim_scale", "out_norm": "norm", "clipped": "", "mask_marks": "padded",
        "audio_embedding": ("~model.embed_audio.embedding", "~model.embed_audio.hard_embedding_norm",
                            "~model.embed_audio.soft_embedding_norm"),
        "projector": "~model.embed_audio.embedding_projection", "renames": (("model.language_model.", "model."),)},
}


class _Named:
    """Collects one Conformer's slots by role, each named in full under the layout's root."""

    def __init__(self, name: str, lay: dict[str, Any]) -> None:
        self.name, self.lay, self.slots = name, lay, {}

    def add(self, role: str, path: str, shape: tuple[int, ...], target: str | None, init: str = "normal",
            kind: str = "param") -> None:
        full = path[1:] if path.startswith("~") else f"{self.lay['root']}.{path}"
        self.slots[role] = Slot(full, shape, target and f"{self.name}.{target}", (), init,
                                "buffer" if init == "buffer" else kind)

    def norm(self, role: str, path: str, width: int, target: str) -> None:
        self.add(role, f"{path}.weight", (width,), target, "ones", "norm")

    def linear(self, role: str, path: str, n_in: int, n_out: int, target: str, wrapped: bool = True) -> None:
        """A bias-free linear; Gemma 4's inside its clippable wrapper, with the wrapper's four bounds."""
        suffix = self.lay["clipped"] if wrapped else ""
        self.add(role, f"{path}{suffix}.weight", (n_out, n_in), target, kind="linear")
        for bound in _BOUNDS if wrapped and suffix else ():
            self.add(f"{role}.{bound}", f"{path}.{bound}", (), None, "buffer")


def conformer_roles(name: str, tower: Conformer, lay: dict[str, Any]) -> dict[str, Slot]:
    """Every tensor of one Conformer tower by its role (`conv.0`, `layer.3.q`, `projector`), named in full."""
    s, d = _Named(name, lay), tower.d_model
    for j, (c_in, c_out, kh, kw) in enumerate(tower.convs):
        path = lay["conv"].format(j=j)
        s.add(f"conv.{j}", f"{path}.conv.weight", (c_out, c_in, kh, kw), "subsample_conv")
        s.norm(f"conv.{j}.norm", f"{path}.norm", c_out, "subsample_norm")
    s.linear("input_projection", lay["input_projection"], tower.subsample_width, d, "input_projection", wrapped=False)
    for i in range(tower.n_layers):
        _layer(s, f"layer.{i}", f"{lay['layers']}.{i}", tower)
    if tower.out_width:
        s.add("output_projection", f"{lay['output_projection']}.weight", (tower.out_width, d), "output_projection",
              kind="linear")
        s.add("output_projection.bias", f"{lay['output_projection']}.bias", (tower.out_width,), "output_projection",
              "zeros", "linear")
    if tower.vocab:
        table, *norms = lay["audio_embedding"]
        s.add("audio_embedding", f"{table}.weight", (tower.vocab, d), "audio_embedding", kind="embedding")
        for k, path in enumerate(norms):
            s.norm(f"audio_embedding.norm.{k}", path, d, "audio_embedding")
    s.add("projector", f"{lay['projector']}.weight", (tower.text_width, tower.out_width or d), "projector",
          kind="linear")
    return s.slots


def _layer(s: _Named, role: str, path: str, tower: Conformer) -> None:
    """One Conformer layer: half-step FFN, attention, light conv, half-step FFN, output norm."""
    lay, d = s.lay, tower.d_model
    first, second = lay["ffns"]
    _ffn(s, f"{role}.ffn.0", f"{path}.{first}", d)
    pre, post = lay["attn_norms"]
    s.norm(f"{role}.attn_norm.0", f"{path}.{pre}", d, "attn_norm")
    for key, target in (("q", "q"), ("k", "k"), ("v", "v")):
        s.linear(f"{role}.{key}", f"{path}.{lay[key]}", d, d, target)
    s.add(f"{role}.relative_k", f"{path}.{lay['relative_k']}.weight", (d, d), "relative_k", kind="linear")
    s.add(f"{role}.per_dim_scale", f"{path}.{lay['per_dim_scale']}", (d // tower.n_heads,), "per_dim_scale")
    s.linear(f"{role}.attn_out", f"{path}.{lay['attn_out']}", d, d, "attn_out")
    s.norm(f"{role}.attn_norm.1", f"{path}.{post}", d, "attn_norm")
    s.norm(f"{role}.conv_norm.0", f"{path}.lconv1d.pre_layer_norm", d, "conv_norm")
    s.linear(f"{role}.conv_in", f"{path}.lconv1d.linear_start", d, 2 * d, "conv_in")
    s.add(f"{role}.depthwise_conv", f"{path}.lconv1d.depthwise_conv1d.weight", (d, 1, tower.conv_kernel),
          "depthwise_conv")
    s.norm(f"{role}.conv_norm.1", f"{path}.lconv1d.conv_norm", d, "conv_norm")
    s.linear(f"{role}.conv_out", f"{path}.lconv1d.linear_end", d, d, "conv_out")
    _ffn(s, f"{role}.ffn.1", f"{path}.{second}", d)
    s.norm(f"{role}.out_norm", f"{path}.{lay['out_norm']}", d, "out_norm")


def _ffn(s: _Named, role: str, path: str, d: int) -> None:
    """A half-step FFN: norm, d -> 4d, 4d -> d, norm."""
    s.norm(f"{role}.norm.0", f"{path}.pre_layer_norm", d, "ffn_norm")
    s.linear(f"{role}.up", f"{path}.ffw_layer_1", d, 4 * d, "ffn_up")
    s.linear(f"{role}.down", f"{path}.ffw_layer_2", 4 * d, d, "ffn_down")
    s.norm(f"{role}.norm.1", f"{path}.post_layer_norm", d, "ffn_norm")
