"""A multimodal checkpoint's towers, tensor by tensor: where each tower kind keeps its tensors
(data, `TOWER_LAYOUTS`), and the `Slot`s a `Tower` implies, so `verify --checkpoint` and `inspect`
account for every tensor of a VLM checkpoint, header-only.

Names are transformers 5's in-memory ones (read off each ForConditionalGeneration model built on
the meta device, `state_dict().keys()`); an encoder layer is the decoder's `block_slots` under the
tower's own paths, so Q/K/V, biases and norms get the decoder's component keys, each put under the
tower's name (`vision.q`). The component keys are Tower.params()' own, so a tower's rows from a
checkpoint line up with the formulas' (`calc.towers`).

The same model is stored under other names: transformers 5's save_pretrained writes the Hub's
layout back out (its conversion_mapping.py reversed: `language_model.model.*`, `vision_tower.*`,
`multi_modal_projector.*` for Gemma 3, Mistral 3, LLaVA-OneVision and InternVL; `model.layers.*`,
`visual.*` for Qwen2.5-VL), and Qwen3-VL's and Qwen3.5's Hub files keep the in-memory names.
`renames` maps every stored prefix to the canonical name: the decoder's as its text model names it
(`model.layers.*`, `lm_head`, the names `calc.checkpoint.layouts` gives), the tower's in-memory. Where
the Hub names a tower's tensors otherwise inside (Kimi-K2.5's MoonViT fuses Q, K and V), the layout's
`hub` overrides give those names too: a checkpoint is held to one layout or the other, as for a
decoder's experts. A Conformer audio tower is its own table (`calc.checkpoint.conformer_slots`), and so
is Gemma 3n's MobileNet-v5 vision tower (`calc.checkpoint.mobilenet_slots`).
"""

from __future__ import annotations

from typing import Any, Iterable

from calc.checkpoint.conformer_slots import CONFORMER_LAYOUTS, conformer_roles
from calc.checkpoint.mobilenet_slots import MOBILENET_LAYOUTS, mobilenet_roles
from calc.checkpoint.phi4_audio_slots import PHI4_AUDIO_LAYOUTS, phi4_audio_roles
from calc.checkpoint.slots import Slot, _Slots, block_slots
from calc.errors import GptcalcError
from calc.spec.model import Block
from calc.towers import Conformer, MobileNet, Phi4Audio, Tower

__all__ = ["TOWER_LAYOUTS", "canonical_prefix", "layout_of", "renames_of", "tower_block", "tower_roles", "tower_slots",
           "whole_model_names"]

# The save_pretrained / Hub prefixes of Gemma 3, Mistral 3, LLaVA-OneVision and InternVL (their
# conversion_mapping: "^language_model.model" <-> "model.language_model", "^vision_tower" <->
# "model.vision_tower", "^multi_modal_projector" <-> "model.multi_modal_projector", "^image_newline").
_LLAVA_RENAMES = (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
                  ("model.language_model.", "model."), ("vision_tower.", "model.vision_tower."),
                  ("multi_modal_projector.", "model.multi_modal_projector."), ("image_newline", "model.image_newline"))
# Qwen2.5-VL's Hub files: "^visual" and "^model" (not language_model) (its _checkpoint_conversion_mapping).
_QWEN_RENAMES = (("model.language_model.", "model."), ("visual.", "model.visual."))

# Where transformers 5's whole model holds the decoder whose canonical names are the text model's
# (`model.layers.*`, `lm_head`): under `model.language_model.`, Llama 4's under `language_model.`.
_IN_WHOLE = (("model.", "model.language_model."),)

_QWEN3 = {"root": "model.visual", "patch": "patch_embed.proj", "positions": ("pos_embed.weight", 0),
          "layers": "blocks", "attn_in": "norm1", "mlp_in": "norm2", "qkv": "attn.qkv", "o": "attn.proj",
          "up": "mlp.linear_fc1", "down": "mlp.linear_fc2",
          "projectors": {"merger": ("merger.norm", "merger.linear_fc1", "merger.linear_fc2"),
                         "deepstack_mergers": ("deepstack_merger_list.{i}.norm", "deepstack_merger_list.{i}.linear_fc1",
                                               "deepstack_merger_list.{i}.linear_fc2")},
          "renames": _QWEN_RENAMES}
_SIGLIP = {"root": "model.vision_tower", "patch": "embeddings.patch_embedding",
           "positions": ("embeddings.position_embedding.weight", 0), "layers": "encoder.layers",
           "attn_in": "layer_norm1", "mlp_in": "layer_norm2", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
           "v": "self_attn.v_proj", "o": "self_attn.out_proj", "up": "mlp.fc1", "down": "mlp.fc2",
           "post_norm": "post_layernorm", "newline": "~model.image_newline",
           # the Hub's Gemma 3 and LLaVA-OneVision files keep SigLIP's own `vision_model.` inside the tower
           # (transformers' conversion_mapping.py: SiglipVisionModel as CLIPVisionModel, prefix_to_remove="vision_model")
           "renames": (("vision_tower.vision_model.", "model.vision_tower."),
                       ("model.vision_tower.vision_model.", "model.vision_tower."), *_LLAVA_RENAMES),
           # Gemma 3's projector (a norm and a bare [vision, text] matrix) or LLaVA-OneVision's (two linears)
           "projectors": {"projector": ("~model.multi_modal_projector.mm_soft_emb_norm",
                                        "~model.multi_modal_projector.mm_input_projection_weight"),
                          "projector/plain": (None, "~model.multi_modal_projector.linear_1",
                                              "~model.multi_modal_projector.linear_2")}}

# Per tower kind (Tower.kind): the encoder's paths under `root` (layer roles under `{layers}.{i}.`, as
# calc.checkpoint.layouts names a decoder's), `positions` / `class` as (path, leading 1-dims), and each
# projector as (norm, linear, ...) paths, under `root` unless `~`-marked (a full name); a path ending in
# `_weight` is a bare [d_in, d_out] parameter, not an nn.Linear.
TOWER_LAYOUTS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": {**_QWEN3, "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj",
                   "projectors": {"merger": ("merger.ln_q", "merger.mlp.0", "merger.mlp.2")}},
    **{kind: _QWEN3 for kind in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")},
    "siglip": _SIGLIP,
    "pixtral": {"root": "model.vision_tower", "patch": "patch_conv", "pre_norm": "ln_pre", "layers": "transformer.layers",
                "attn_in": "attention_norm", "mlp_in": "ffn_norm", "q": "attention.q_proj", "k": "attention.k_proj",
                "v": "attention.v_proj", "o": "attention.o_proj", "gate": "feed_forward.gate_proj",
                "up": "feed_forward.up_proj", "down": "feed_forward.down_proj", "renames": _LLAVA_RENAMES,
                "projectors": {"projector": ("~model.multi_modal_projector.norm",
                                             "~model.multi_modal_projector.patch_merger.merging_layer",
                                             "~model.multi_modal_projector.linear_1",
                                             "~model.multi_modal_projector.linear_2")}},
    # Llama 4 holds and saves the same names (no conversion mapping)
    "llama4": {"root": "vision_model", "patch": "patch_embedding.linear", "patch_linear": True,
               "class": ("class_embedding", 0), "positions": ("positional_embedding_vlm", 0),
               "pre_norm": "layernorm_pre", "post_norm": "layernorm_post", "layers": "model.layers",
               "attn_in": "input_layernorm", "mlp_in": "post_attention_layernorm", "q": "self_attn.q_proj",
               "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj", "up": "mlp.fc1",
               "down": "mlp.fc2",
               "renames": (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head.")),
               "in_whole": (("model.", "language_model.model."), ("lm_head.", "language_model.lm_head.")),
               "projectors": {"adapter": (None, "vision_adapter.mlp.fc1", "vision_adapter.mlp.fc2"),
                              "projector": (None, "~multi_modal_projector.linear_1")}},
    # Gemma 4 holds and saves the same names (no conversion mapping for gemma4): each linear wrapped in a
    # Gemma4ClippableLinear (`.linear`), a position table of two axes (x, y), sandwich norms, the projector
    # a bare Linear behind a scale-free norm (models/gemma4/modeling_gemma4.py)
    "gemma4": {"root": "model.vision_tower", "patch": "patch_embedder.input_proj", "patch_linear": True,
               "positions": ("patch_embedder.position_embedding_table", 0), "layers": "encoder.layers",
               "attn_in": "input_layernorm", "attn_out": "post_attention_layernorm",
               "mlp_in": "pre_feedforward_layernorm", "mlp_out": "post_feedforward_layernorm",
               **{role: f"{path}.linear" for role, path in (("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"),
                                                           ("v", "self_attn.v_proj"), ("o", "self_attn.o_proj"),
                                                           ("gate", "mlp.gate_proj"), ("up", "mlp.up_proj"),
                                                           ("down", "mlp.down_proj"))},
               "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm", "standardize": ("std_bias", "std_scale"),
               "projectors": {"projector": (None, "~model.embed_vision.embedding_projection")},
               "renames": (("model.language_model.", "model."),)},
    # Kimi-K2.5's MoonViT as transformers 5 holds it (models/kimi_k25/modeling_kimi_k25.py): a (height, width)
    # position grid, the projector beside the tower (`model.mm_projector`). Its Hub files (`hub`, transformers'
    # conversion_mapping.py "kimi_k25" reversed) fuse Q, K, V into `wqkv` (rotary-permuted: the shape is the
    # same) and number norms and MLP linears from 0; save_pretrained writes the same but for a few prefixes
    # (`renames`: the decoder's layers as `blocks`, patch_embed under `encoder`, pre_norm under `model.`).
    "moonvit": {"root": "model.vision_tower", "patch": "patch_embed.proj",
                "positions": ("patch_embed.pos_emb.position_embeddings", 0), "layers": "layers", "attn_in": "norm1",
                "mlp_in": "norm2", "q": "attn.q_proj", "k": "attn.k_proj", "v": "attn.v_proj", "o": "attn.proj",
                "up": "mlp.fc1", "down": "mlp.fc2", "post_norm": "final_layernorm",
                "renames": (("language_model.model.blocks.", "model.layers."), *_LLAVA_RENAMES[:3],
                            ("vision_tower.encoder.patch_embed.", "vision_tower.patch_embed."),
                            ("mm_projector.pre_norm.", "model.mm_projector.pre_norm.")),
                "projectors": {"projector": ("~model.mm_projector.pre_norm", "~model.mm_projector.in_proj",
                                             "~model.mm_projector.out_proj")},
                # `rope_pairs`: the Hub's Q and K rows pair up for rotary as (2i, 2i+1) (the original MoonViT's
                # complex numbers); transformers 5 reorders each head's to (i, i + d_head / 2) (PermuteForRope)
                "hub": {"root": "vision_tower", "rope_pairs": "interleaved", "positions": ("patch_embed.pos_emb.weight", 0),
                        "layers": "encoder.blocks",
                        "attn_in": "norm0", "mlp_in": "norm1", "fused_qkv": True, "qkv": "wqkv", "o": "wo",
                        "up": "mlp.fc0", "down": "mlp.fc1", "post_norm": "encoder.final_layernorm",
                        "projectors": {"projector": ("~model.mm_projector.pre_norm", "~mm_projector.proj.0",
                                                     "~mm_projector.proj.2")}}},
    # MiniMax-M3 as transformers 5 holds it (models/minimax_m3_vl): CLIP layer names without CLIP's encoder
    # level, a bias-free Conv3d, the two projector stages in one module. `renames`: the release's own prefixes
    # (conversion_mapping.py "minimax_m3_vl"); its decoder's block_sparse_moe / index_*_proj names inside the
    # layers are not mapped (the decoder's layout is transformers 5's)
    "minimax_m3_vl": {"root": "model.vision_tower", "patch": "embeddings.proj", "pre_norm": "pre_layrnorm",
                      "layers": "layers", "attn_in": "layer_norm1", "mlp_in": "layer_norm2", "q": "self_attn.q_proj",
                      "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.out_proj", "up": "mlp.fc1",
                      "down": "mlp.fc2",
                      "renames": (*_LLAVA_RENAMES[:3],
                                  ("vision_tower.vision_model.embeddings.patch_embedding.", "model.vision_tower.embeddings.proj."),
                                  ("vision_tower.vision_model.encoder.layers.", "model.vision_tower.layers."),
                                  ("vision_tower.vision_model.pre_layrnorm.", "model.vision_tower.pre_layrnorm."),
                                  ("multi_modal_projector.", "model.multi_modal_projector."),
                                  ("patch_merge_mlp.linear_", "model.multi_modal_projector.merge_linear_")),
                      "projectors": {"projector": (None, "~model.multi_modal_projector.linear_1",
                                                   "~model.multi_modal_projector.linear_2"),
                                     "merger": (None, "~model.multi_modal_projector.merge_linear_1",
                                                "~model.multi_modal_projector.merge_linear_2")}},
    "internvl": {"root": "model.vision_tower", "patch": "embeddings.patch_embeddings.projection",
                 "class": ("embeddings.cls_token", 2), "positions": ("embeddings.position_embeddings", 1),
                 "layers": "encoder.layer", "attn_in": "layernorm_before", "mlp_in": "layernorm_after",
                 "q": "attention.q_proj", "k": "attention.k_proj", "v": "attention.v_proj",
                 "o": "attention.projection_layer", "q_norm": "attention.q_norm", "k_norm": "attention.k_norm",
                 "up": "mlp.fc1", "down": "mlp.fc2", "layer_scale": ("lambda_1", "lambda_2"), "post_norm": "layernorm",
                 "renames": _LLAVA_RENAMES,
                 "projectors": {"projector": ("~model.multi_modal_projector.layer_norm",
                                              "~model.multi_modal_projector.linear_1",
                                              "~model.multi_modal_projector.linear_2")}},
    # Step-3.7's tower as transformers 5 holds it (models/step3p7/modeling_step3p7.py): layer scales, two conv
    # downsamplers, the projector a bare Linear. Its Hub files (`hub`: conversion_mapping.py's "step3p7" and
    # "step3p5_vision" reversed, which save_pretrained writes) keep OpenCLIP's names: Q, K and V fused in
    # torch's MultiheadAttention (`in_proj_weight`, `leaves`), a bare position table, `vit_large_projector`; Q's
    # and K's rows paired for rotary as (2i, 2i+1) (its conversion's PermuteForRope, as MoonViT's).
    "step3p7": {"root": "model.vision_model", "patch": "embeddings.patch_embedding",
                "positions": ("embeddings.position_embedding.weight", 0), "pre_norm": "pre_layernorm", "layers": "layers",
                "attn_in": "layernorm_before", "mlp_in": "layernorm_after", "q": "self_attn.q_proj",
                "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.out_proj", "up": "mlp.fc1",
                "down": "mlp.fc2", "layer_scale": ("lambda_1", "lambda_2"),
                "projectors": {"downsamplers": (None, "downsampler1", "downsampler2"),
                               "projector": (None, "~model.multi_modal_projector")},
                "renames": (("vision_model.", "model.vision_model."),
                            ("vit_large_projector.", "model.multi_modal_projector."), ("model.language_model.", "model.")),
                "hub": {"patch": "conv1", "rope_pairs": "interleaved", "positions": ("positional_embedding", 0),
                        "pre_norm": "ln_pre",
                        "layers": "transformer.resblocks", "attn_in": "ln_1", "mlp_in": "ln_2", "fused_qkv": True,
                        "qkv": "attn.in_proj", "o": "attn.out_proj", "up": "mlp.c_fc", "down": "mlp.c_proj",
                        "layer_scale": ("ls_1.gamma", "ls_2.gamma"), "leaves": {".in_proj.weight": ".in_proj_weight",
                                                                                ".in_proj.bias": ".in_proj_bias"},
                        "projectors": {"downsamplers": (None, "vit_downsampler1", "vit_downsampler2"),
                                       "projector": (None, "~model.multi_modal_projector")}}},
    # Phi-4-multimodal's SigLIP inside the decoder's embedding (Phi4MultimodalImageEmbedding, no conversion mapping:
    # save_pretrained keeps these names), with SigLIP's pooling head, the two HD separators and a two-linear projector
    "phi4_multimodal": {**_SIGLIP, "root": "model.embed_tokens_extend.image_embed.img_processor", "renames": (),
                        "in_whole": (), "pooling_head": "head",
                        "separators": (("~model.embed_tokens_extend.image_embed.global_img_feature_extensor", 2),
                                       ("~model.embed_tokens_extend.image_embed.sub_img_feature_extensor", 3)),
                        "projectors": {"projector": (None, "~model.embed_tokens_extend.image_embed.img_projection_up",
                                                     "~model.embed_tokens_extend.image_embed.img_projection_down")}},
}


def renames_of(towers: dict[str, Tower]) -> tuple[tuple[str, str], ...]:
    """The (stored prefix, canonical prefix) pairs of a spec's towers' checkpoints; () for a text model."""
    return tuple(dict.fromkeys(pair for tower in towers.values() for pair in layout_of(tower).get("renames", ())))


def whole_model_names(names: Iterable[str], towers: dict[str, Tower]) -> dict[str, str]:
    """Canonical names as transformers 5's whole multimodal model holds them: a decoder tensor under
    the language model's prefix; a tower's (in-memory already) and a text model's unchanged."""
    if not towers:
        return {name: name for name in names}
    own = {slot for n, t in towers.items() for slot in tower_slots(n, t)}
    prefixes = layout_of(next(iter(towers.values()))).get("in_whole", _IN_WHOLE)
    return {name: name if name in own else canonical_prefix(name, prefixes) for name in names}


def canonical_prefix(name: str, renames: tuple[tuple[str, str], ...]) -> str:
    """`name` with the first stored prefix it starts with made canonical."""
    for stored, canonical in renames:
        if name.startswith(stored):
            return canonical + name[len(stored):]
    return name


def tower_slots(name: str, tower: Tower, hub: bool = False) -> dict[str, Slot]:
    """Every tensor of one tower, by its full (canonical) name; targets are `{name}.{component}`. `hub`:
    as its Hub files name them where they differ from transformers 5's (the layout's `hub`), else the same."""
    return {slot.name: slot for slot in tower_roles(name, tower, hub).values()}


def tower_roles(name: str, tower: Tower, hub: bool = False) -> dict[str, Slot]:
    """Every tensor of one tower by its role (`patch.weight`, `layer.3.q.weight`, `merger.0.1.weight`),
    each named in full: what the torch reference builds (`calc.reference.tower`); a Conformer's and a
    MobileNet's by their own roles (`calc.checkpoint.conformer_slots`, `calc.checkpoint.mobilenet_slots`)."""
    lay, d = layout_of(tower), tower.d_model
    if isinstance(tower, Conformer):
        return conformer_roles(name, tower, lay)
    if isinstance(tower, MobileNet):
        return mobilenet_roles(name, tower, lay)
    if isinstance(tower, Phi4Audio):
        return phi4_audio_roles(name, tower, lay)
    lay = {**lay, **lay["hub"]} if hub and "hub" in lay else lay
    s = _Slots(lay)
    _embeddings(s, lay, tower)
    layer = block_slots(lay, tower_block(tower, lay.get("fused_qkv", False)), d)
    # a layer scale's role is its in-memory name, whichever layout names the tensor (Step-3.7's Hub `ls_1.gamma`)
    scales = tuple(zip(layout_of(tower).get("layer_scale", ()), lay.get("layer_scale", ()))) if tower.layer_scale else ()
    for i in range(tower.n_layers):
        for role, slot in layer.items():
            s.add(f"layer.{i}.{role}", f"{lay['layers']}.{i}.{slot.name}", slot.shape, slot.target, slot.widths,
                  slot.init, slot.kind)
        for role, scale in scales:
            s.add(f"layer.{i}.{role}", f"{lay['layers']}.{i}.{scale}", (d,), "layer_scale", init="ones")
    if tower.post_norm is not None:
        s.norm("post_norm", tower.post_norm, d, "post_norm")
    for buffer in lay["standardize"] if tower.standardize else ():
        s.add(buffer, buffer, (d,), None, init="buffer")
    if tower.pooling_head:
        _pooling_head(s, lay["pooling_head"], tower)
    for k, (path, ones) in enumerate(lay.get("separators", ())[:tower.separators]):
        s.add(f"separator.{k}", path, (1,) * ones + (d,), "separators")
    for projector in tower.projectors:
        _projector(s, lay, projector)
    if tower.newline:
        s.add("newline", lay["newline"], (tower.newline,), "image_newline")
    root = lay["root"]
    return {role: Slot(_leaf(full, lay), slot.shape, _under(name, slot.target), slot.widths, slot.init, slot.kind)
            for role, slot in s.slots.items()
            for full in [slot.name[1:] if slot.name.startswith("~") else f"{root}.{slot.name}"]}


def _leaf(name: str, lay: dict[str, Any]) -> str:
    """A name whose last part the layout spells otherwise (`leaves`: Step-3.7's Hub `in_proj_weight`)."""
    for end, stored in lay.get("leaves", {}).items():
        if name.endswith(end):
            return name[:-len(end)] + stored
    return name


def tower_block(tower: Tower, fused_qkv: bool = False) -> Block:
    """One encoder layer as a decoder Block: its attention (Q, K, V in one tensor where a Hub layout
    fuses them), MLP and norms (Gemma 4's sandwich: four)."""
    norms = ("attn_in", "attn_out", "mlp_in", "mlp_out") if tower.post_norms else ("attn_in", "mlp_in")
    a = tower.attention
    fields = {field: getattr(a, field) for field in a.model_fields}
    attention = type(a).model_construct(**{**fields, "fused_qkv": True}) if fused_qkv else a
    return Block.model_construct(attention=attention, mlp=tower.mlp, norm=tower.norm, norms=norms)


def layout_of(tower: Any) -> dict[str, Any]:
    """The tensor names of a tower kind, or one error naming the kind whose names are not mapped yet
    (its count, memory and shapes stand; a checkpoint's tensors cannot be matched to it)."""
    layout = {**TOWER_LAYOUTS, **CONFORMER_LAYOUTS, **MOBILENET_LAYOUTS, **PHI4_AUDIO_LAYOUTS}.get(tower.names)
    if layout is None:
        raise GptcalcError(f"the {tower.kind} tower's tensor names are not mapped yet: verify and inspect cannot "
                           f"match its tensors (count, memory and shapes count it: {', '.join(sorted(TOWER_LAYOUTS))} "
                           "are mapped)")
    return layout


def _under(name: str, target: Any) -> Any:
    """A decoder component key put under the tower's name (a fused tensor's each)."""
    if isinstance(target, tuple):
        return tuple(f"{name}.{t}" for t in target)
    return f"{name}.{target}"


def _embeddings(s: _Slots, lay: dict[str, Any], tower: Tower) -> None:
    """Patch embedding (a conv over temporal_patch frames, or Llama 4's linear over flattened patches),
    class token, position table, pre-encoder norm."""
    d, p, c, t = tower.d_model, tower.patch_size, tower.in_channels, tower.temporal_patch
    if lay.get("patch_linear"):
        shape: tuple[int, ...] = (d, c * p * p)
    else:
        shape = (d, c, t, p, p) if t > 1 else (d, c, p, p)
    s.add("patch.weight", f"{lay['patch']}.weight", shape, "patch_embedding")
    if tower.patch_bias:
        s.add("patch.bias", f"{lay['patch']}.bias", (d,), "patch_embedding", init="zeros")
    if tower.class_token:
        path, ones = lay["class"]
        s.add("class", path, (1,) * ones + (d,), "class_embedding")
    if tower.positions:
        path, ones = lay["positions"]
        rows = tower.position_grid or (tower.positions,)  # Gemma 4's and MoonViT's tables have two axes
        s.add("positions", path, (1,) * ones + rows + (d,), "position_embedding",
              kind="embedding" if path.endswith(".weight") else "param")  # an nn.Embedding's table, or a bare one
    if tower.pre_norm is not None:
        s.norm("pre_norm", tower.pre_norm, d, "pre_norm")


def _pooling_head(s: _Slots, path: str, tower: Tower) -> None:
    """SigLIP's attention-pooling head (SiglipMultiheadAttentionPoolingHead): a probe, torch's
    MultiheadAttention (Q, K, V fused in `in_proj_weight`), a norm and an MLP of the encoder layers' shape."""
    d, ff = tower.d_model, tower.mlp.d_ff
    s.add("head.probe", f"{path}.probe", (1, 1, d), "pooling_head")
    s.add("head.in_proj.weight", f"{path}.attention.in_proj_weight", (3 * d, d), "pooling_head", kind="linear")
    s.add("head.in_proj.bias", f"{path}.attention.in_proj_bias", (3 * d,), "pooling_head", init="zeros", kind="linear")
    s.linear("head.out_proj", d, d, "pooling_head", "pooling_head", path=f"{path}.attention.out_proj")
    s.norm("head.norm", tower.norm, d, "pooling_head", f"{path}.layernorm")
    s.linear("head.fc1", d, ff, "pooling_head", "pooling_head", path=f"{path}.mlp.fc1")
    s.linear("head.fc2", ff, d, "pooling_head", "pooling_head", path=f"{path}.mlp.fc2")


def _projector(s: _Slots, lay: dict[str, Any], projector: Any) -> None:
    """A projector's norm and linears, `repeat` copies under their index (Qwen3-VL's DeepStack mergers)."""
    paths = lay["projectors"].get(projector.name)
    if paths is None or (paths[0] is None) != (projector.norm is None):
        paths = lay["projectors"][f"{projector.name}/plain"]
    norm, *linears = paths
    for i in range(projector.repeat):
        if norm is not None:
            s.norm(f"{projector.name}.{i}.norm", projector.norm, projector.norm_width, projector.name,
                   norm.format(i=i))
        for j, (path, linear) in enumerate(zip(linears, projector.linears, strict=True)):
            role, path = f"{projector.name}.{i}.{j}", path.format(i=i)
            if path.endswith("_weight"):
                s.add(role, path, (linear.d_in, linear.d_out), projector.name)
            elif linear.kernel > 1:  # a convolution (Step-3.7's downsamplers): weight [out, in, k, k]
                k = linear.kernel
                s.add(f"{role}.weight", f"{path}.weight", (linear.d_out, linear.d_in, k, k), projector.name, kind="linear")
                if linear.bias:
                    s.add(f"{role}.bias", f"{path}.bias", (linear.d_out,), projector.name, init="zeros", kind="linear")
            else:
                s.linear(role, linear.d_in, linear.d_out, projector.name, linear.bias and projector.name, path=path)
