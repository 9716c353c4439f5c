"""The Qwen vision towers: Qwen2.5-VL, Qwen3-VL (dense and MoE) and Qwen3.5 (dense and MoE).

Read off transformers' modelling (models/qwen2_5_vl, qwen3_vl, qwen3_5 modeling_*.py):
- a Conv3d patch embedding over temporal_patch_size frames (an image is repeated to fill them):
  with a bias from Qwen3-VL on, without in Qwen2.5-VL;
- Qwen2.5-VL: RMSNorm blocks, a fused QKV and output projection with biases, a gated MLP
  (hidden_act, SiLU) with biases, 2-D rotary only (no position table); window attention on all
  layers but `fullatt_block_indexes` changes the computation (shapes, flops), not the weights;
  merger = RMSNorm(d) then Linear(4d, 4d) + GELU + Linear(4d, out_hidden_size), biased;
- Qwen3-VL and Qwen3.5: LayerNorm blocks, the same biased attention, a plain MLP (hidden_act, tanh
  GELU) with biases, a learned position table (num_position_embeddings rows, bilinearly
  interpolated) beside 2-D rotary; merger = LayerNorm(d) + Linear(m²d, m²d) + Linear(m²d, out), and
  one DeepStack merger per `deepstack_visual_indexes` entry (Qwen3-VL only; the layers it reads kept
  for the torch reference), the same but normalising after the merge (LayerNorm(m²d)).
  Qwen2.5-VL's "in_chans" is not read by transformers 5 (in_channels, default 3).
vLLM's ViT (Qwen2_5_VisionTransformer, Qwen3_VisionTransformer, which Qwen3-VL-MoE and Qwen3.5 reuse) builds
its own rotary table at load, get_rope(head_dim, max_position=8192, partial_rotary_factor 0.5): 8,192 rows of
head_dim / 2 values in the model's dtype (vLLM 0.32 models/qwen2_5_vl.py:682-687, qwen3_vl.py:628-633).
Defaults are each vision config class's (configuration_<type>.py); the image rule's pixel bounds are
the released preprocessor_config.json's (not in config.json).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, rope, with_defaults
from calc.arch.config import Config
from calc.towers import biased_attention

__all__ = ["towers"]

# Qwen2_5_VLVisionConfig, Qwen3VLVisionConfig (Qwen3_5VisionConfig and the MoE ones share its defaults).
_QWEN3 = {"hidden_act": "gelu_pytorch_tanh", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
          "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
          "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]}
DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": {"hidden_act": "silu", "depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "num_heads": 16, "in_channels": 3,
                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
                   "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
    "qwen3_vl": _QWEN3, "qwen3_vl_moe": _QWEN3, "qwen3_5": _QWEN3, "qwen3_5_moe": _QWEN3,
}
DEEPSTACK = ("qwen3_vl", "qwen3_vl_moe")  # Qwen3.5's vision model has no DeepStack mergers (nor reads the key)
# Pixel bounds of the released processors (preprocessor_config.json "min_pixels"/"max_pixels", or
# "size": {"shortest_edge", "longest_edge"}): Qwen/Qwen2.5-VL-7B-Instruct 3136 / 12845056,
# Qwen/Qwen3-VL-8B-Instruct and Qwen/Qwen3.5-27B 65536 / 16777216.
PIXELS = {"qwen2_5_vl": (3136, 12_845_056)}
VLLM_ROPE_ROWS = 8192  # the max_position vLLM's Qwen ViTs pass get_rope
# SGLang keeps its default (breakable) prefill CUDA graphs for Qwen3.5 alone of these (configs/model_config.py
# multimodal_breakable_cuda_graph_supported_model_archs, sgl-project/sglang#30872): calc/spec/sglang.py
SGLANG = {t: {"prefill_graph_allowlists": ("breakable",)} for t in ("qwen3_5", "qwen3_5_moe")}
_QWEN3_PIXELS = (65_536, 16_777_216)


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    model_type = cfg.raw("model_type")
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), DEFAULTS[model_type])
    legacy = model_type == "qwen2_5_vl"
    d, merge = vision.int("hidden_size"), vision.int("spatial_merge_size")
    merged = d * merge ** 2
    out = vision.int("out_hidden_size")
    norm = {"kind": "rmsnorm" if legacy else "layernorm", "eps": 1e-6}
    mlp = {"d_ff": vision.int("intermediate_size"), "gated": legacy, "bias": True,
           "activation": activation(vision, "hidden_act")}
    heads = vision.int("num_heads")
    linears = ({"d_in": merged, "d_out": merged, "bias": True}, {"d_in": merged, "d_out": out, "bias": True})
    projectors = [{"name": "merger", "norm": norm, "norm_width": d, "linears": linears}]
    deepstack = vision.list("deepstack_visual_indexes") if model_type in DEEPSTACK else []
    if deepstack:
        projectors.append({"name": "deepstack_mergers", "norm": norm, "norm_width": merged, "linears": linears,
                           "repeat": len(deepstack)})
    low, high = PIXELS.get(model_type, _QWEN3_PIXELS)
    patch = vision.int("patch_size")
    return {"vision": {
        "kind": model_type, "d_model": d, "n_layers": vision.int("depth"),
        "attention": biased_attention(d, heads, fused_qkv=True),
        "mlp": mlp, "norm": norm,
        "in_channels": vision.int("in_channels"), "patch_size": patch,
        "temporal_patch": vision.int("temporal_patch_size"), "patch_bias": not legacy,
        "positions": 0 if legacy else vision.int("num_position_embeddings"),
        "projectors": projectors,
        "rope_theta": rope(vision, d // heads)["theta"], "deepstack_layers": deepstack,
        "vllm_rope": {"rows": VLLM_ROPE_ROWS, "width": d // heads // 2},
        "images": {"kind": "grid", "patch_size": patch, "merge_size": merge, "min_pixels": low, "max_pixels": high},
        **(_windows(vision, patch, merge) if legacy else {}),
    }}


def _windows(vision: Config, patch: int, merge: int) -> dict[str, Any]:
    """Qwen2.5-VL's window attention: windows of window_size // merge // patch merged tokens a side
    (transformers vision_utils.get_vision_window_index), so that many x merge patches; full attention
    in `fullatt_block_indexes`."""
    full = vision.list("fullatt_block_indexes")
    if not all(isinstance(i, int) for i in full):
        raise vision.error("fullatt_block_indexes", f"expected layer indices, got {full!r}")
    return {"window": vision.int("window_size") // merge // patch * merge, "full_layers": full}

