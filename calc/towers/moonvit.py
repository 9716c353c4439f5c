"""Kimi-K2.5's (and K2.6's) vision tower: MoonViT and its patch-merger projector.

Read off transformers (models/kimi_k25/modeling_kimi_k25.py): a biased Conv2d patch embedding (3
channels), a learned position grid of pos_emb_height x pos_emb_width rows (bicubically resampled to
each image; the time axis is a sinusoidal buffer, no weights), 2-D rotary besides; LayerNorm blocks
with biased Q, K, V and output projections and a biased two-matrix MLP (`hidden_act`, GELU's tanh
approximation by default); a final LayerNorm. The projector (Kimi_K25MultimodalProjection): a
LayerNorm (`projection_layer_norm_eps`) over `projection_hidden_size` (the vision width) before the
merge_kernel_size patches are concatenated, then in_proj (m·d -> m·d), GELU and out_proj (-> text
width), both biased; an image becomes tokens by navit_resize (calc/towers/images.py
NavitImages). The configs Moonshot publishes for its own code name the vision keys
vt_hidden_size, vt_intermediate_size, vt_num_attention_heads, vt_num_hidden_layers,
init_pos_emb_height / _width, and mm_hidden_size and projector_ln_eps (the projector's norm width
and epsilon); they are read as transformers' names.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import activation, renamed, rope, with_defaults
from calc.arch.config import Config
from calc.towers import biased_attention

__all__ = ["towers", "transformers_data"]

# Kimi_K25VisionConfig and Kimi_K25Config (models/kimi_k25/configuration_kimi_k25.py).
DEFAULTS = {"patch_size": 14, "pos_emb_height": 64, "pos_emb_width": 64, "num_attention_heads": 16,
            "num_hidden_layers": 27, "hidden_size": 1152, "intermediate_size": 4304, "merge_kernel_size": [2, 2],
            "hidden_act": "gelu_pytorch_tanh"}
OUTER = {"projection_hidden_size": 1152, "projection_layer_norm_eps": 1e-5}
# vLLM's MoonViT builds a rotary table of a 512 x 512 grid whatever the config, head_dim / 2 complex64 values a
# position, on its first forward (so in the profiling run), and keeps it as a buffer: Rope2DPosEmbRepeated(
# qkv_hidden_size // num_heads, 512, 512), _precompute_freqs_cis, get_freqs_cis's register_buffer
# (vllm/model_executor/models/kimi_k25_vit.py:550-552, 266-300 in vLLM 0.32)
VLLM_ROPE_GRID = 512
# SGLang lists KimiK25ForConditionalGeneration for its tc_piecewise prefill CUDA graphs only
# (configs/model_config.py multimodal_piecewise_cuda_graph_supported_model_archs): calc/spec/sglang.py
SGLANG = {"kimi_k25": {"prefill_graph_allowlists": ("tc_piecewise",)}}
# The remote-code config's vision keys -> transformers' (Kimi_K25VisionConfig).
MOONSHOT = {"vt_hidden_size": "hidden_size", "vt_intermediate_size": "intermediate_size",
            "vt_num_attention_heads": "num_attention_heads", "vt_num_hidden_layers": "num_hidden_layers",
            "init_pos_emb_height": "pos_emb_height", "init_pos_emb_width": "pos_emb_width"}
# The projector's keys Moonshot's config keeps in vision_config -> Kimi_K25Config's outer names.
PROJECTOR = {"mm_hidden_size": "projection_hidden_size", "projector_ln_eps": "projection_layer_norm_eps"}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    raw = dict(cfg.dict("vision_config"))
    vision = with_defaults(renamed(Config(raw, f"{cfg.origin}: vision_config"), MOONSHOT), DEFAULTS)
    cfg = with_defaults(cfg, {**OUTER, **moonshot_projector(raw)})
    d, heads = vision.int("hidden_size"), vision.int("num_attention_heads")
    kernel = vision.list("merge_kernel_size")
    if len(kernel) != 2 or not all(isinstance(k, int) and k > 0 for k in kernel):
        raise vision.error("merge_kernel_size", f"expected [height, width] in patches, got {kernel!r}")
    merged = d * kernel[0] * kernel[1]
    layernorm = {"kind": "layernorm", "eps": 1e-5}
    return {"vision": {
        "kind": "moonvit", "d_model": d, "n_layers": vision.int("num_hidden_layers"),
        "attention": biased_attention(d, heads),
        "mlp": {"d_ff": vision.int("intermediate_size"), "bias": True, "activation": activation(vision, "hidden_act")},
        "rope_theta": rope(vision, d // heads)["theta"],
        "norm": layernorm, "patch_size": vision.int("patch_size"), "patch_bias": True,
        "positions": vision.int("pos_emb_height") * vision.int("pos_emb_width"), "post_norm": layernorm,
        "position_grid": [vision.int("pos_emb_height"), vision.int("pos_emb_width")],
        "vllm_forward_rope": {"rows": VLLM_ROPE_GRID ** 2, "width": d // heads // 2, "dtype": "complex64"},
        "projectors": [{"name": "projector", "norm": {"kind": "layernorm", "eps": cfg.float("projection_layer_norm_eps")},
                        "norm_width": cfg.int("projection_hidden_size"),
                        "linears": [{"d_in": merged, "d_out": merged, "bias": True},
                                    {"d_in": merged, "d_out": text_width, "bias": True}]}],
        "images": {"kind": "navit", "patch_size": vision.int("patch_size"), "merge_size": kernel[0]},
    }}


def moonshot_projector(vision: dict[str, Any]) -> dict[str, Any]:
    """The projector's width and norm epsilon as Kimi_K25Config names them, from the keys Moonshot's
    config gives in its vision_config (a value the outer config sets itself wins over these)."""
    return {new: vision[old] for old, new in PROJECTOR.items() if vision.get(old) is not None}


def transformers_data(data: dict[str, Any]) -> dict[str, Any]:
    """A Moonshot config's vision keys under transformers' names (Kimi_K25VisionConfig ignores
    vt_hidden_size and the rest, and would build its defaults), and its projector keys as
    Kimi_K25Config's, so that transformers' model is the one the config describes."""
    vision = data.get("vision_config")
    if not isinstance(vision, dict):
        return data
    return {**moonshot_projector(vision), **data,
            "vision_config": {MOONSHOT.get(key, key): value for key, value in vision.items()}}
