"""Gemma 3n's towers (transformers models/gemma3n/modeling_gemma3n.py). The audio tower: a Conformer encoder
(Gemma3nAudioEncoder, calc/towers/conformer.py) and its embedder (Gemma3nMultimodalEmbedder: a table
of `vocab_size` audio-token rows, hard and soft embedding norms, a bias-free projection into the text
width, a scale-free norm). The subsampling's two convolutions pad each frequency axis by one on
both sides, so a conv of kernel k and stride s leaves (f + 2 - k) // s + 1 frequencies; the input
projection reads the last one's channels x frequencies.

The vision tower is timm's MobileNet-v5 (TimmWrapperModel builds `vision_config.architecture`,
`mobilenetv5_300m_enc` by default and in E2B's and E4B's configs), counted from timm's own block
table (calc/towers/mobilenet.py), and its embedder (`embed_vision`, as the audio one). Another timm
architecture is refused rather than counted as the released one, and so are `model_args` (what
TimmWrapperModel passes to timm.create_model) but the fusion adapter's two, which are read:
`msfa_indices` (the feature maps it fuses, the last two stages' by default) and
`msfa_output_resolution` (the side of the grid it leaves, 16 by default). An image becomes 256 soft
tokens whatever its size: the processor (SiglipImageProcessor) resizes it to 768 x 768, the default
resolution transformers documents (https://huggingface.co/docs/transformers/v5.0.0rc1/model_doc/gemma3n.md),
the encoder's fusion adapter leaves a 16 x 16 grid, and get_image_features (modeling_gemma3n.py) reshapes
it into vision_soft_tokens_per_image = 256 tokens, which must be its grid's; processing_gemma3n.py
wraps them as Gemma 3 does, "\\n\\n<boi>" ... "<eoi>\\n\\n" (calc/towers/images.py FixedImages).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import with_defaults
from calc.arch.config import Config
from calc.towers.mobilenet import ARCHITECTURES

__all__ = ["towers"]

# Gemma3nVisionConfig and Gemma3nAudioConfig (models/gemma3n/configuration_gemma3n.py).
VISION = {"architecture": "mobilenetv5_300m_enc", "hidden_size": 2048, "vocab_size": 128, "rms_norm_eps": 1e-6}
IMAGE_SIZE = 768  # the processor's resize (SiglipImageProcessor size in gemma-3n's preprocessor_config.json)
SOFT_TOKENS = 256  # Gemma3nConfig.vision_soft_tokens_per_image
# timm 1.0.31 MobileNetV5Encoder.__init__'s defaults (timm/models/mobilenetv5.py lines 466-467), which
# _gen_mobilenet_v5 leaves as they are: the fusion adapter's inputs and output grid
FUSION = {"msfa_indices": [-2, -1], "msfa_output_resolution": 16}
AUDIO = {"vocab_size": 128, "input_feat_size": 128, "hidden_size": 1536, "conf_num_attention_heads": 8,
         "conf_num_hidden_layers": 12, "conf_conv_kernel_size": 5, "sscp_conv_channel_size": [128, 32],
         "sscp_conv_kernel_size": [[3, 3], [3, 3]], "sscp_conv_stride_size": [[2, 2], [2, 2]],
         "conf_attention_chunk_size": 12, "conf_attention_context_left": 13, "conf_attention_context_right": 0,
         "conf_attention_logit_cap": 50.0, "conf_residual_weight": 0.5, "rms_norm_eps": 1e-6,
         "sscp_conv_group_norm_eps": 1e-3, "conf_reduction_factor": 4}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    found = {"vision": _vision, "audio": _audio}
    return {name: read(cfg, text_width) for name, read in found.items()
            if cfg.raw(f"{name}_config", default=None) is not None}


def _vision(cfg: Config, text_width: int) -> dict[str, Any]:
    """The MobileNet-v5 encoder timm builds for `architecture`, and the embedder into the text width."""
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), VISION)
    name = vision.raw("architecture")
    if not isinstance(name, str) or name not in ARCHITECTURES:
        raise vision.error("architecture", f"{name!r}: gptcalc counts timm's {', '.join(ARCHITECTURES)} only")
    stages = ARCHITECTURES[name]
    fusion = _fusion(vision, len(stages) + 1)
    side = fusion["output_grid"]
    tokens = cfg.int("vision_soft_tokens_per_image", default=SOFT_TOKENS)
    if tokens != side * side:
        raise cfg.error("vision_soft_tokens_per_image", f"{tokens}: get_image_features reshapes the fusion "
                                                        f"adapter's {side} x {side} grid, {side * side} tokens")
    return {"kind": "mobilenetv5", "architecture": name, "stages": stages, **fusion,
            "d_model": vision.int("hidden_size"), "vocab": vision.int("vocab_size"), "text_width": text_width,
            "eps": vision.float("rms_norm_eps"),
            "images": {"kind": "fixed", "image_size": IMAGE_SIZE, "patch_size": max(1, IMAGE_SIZE // side),
                       "tokens_per_image": tokens}}


def _fusion(vision: Config, maps: int) -> dict[str, Any]:
    """The fusion adapter's inputs (msfa_indices made absolute over the `maps` feature maps, as timm's
    feature_take_indices does: an int n the last n, a negative index from the end) and output grid,
    from model_args over timm's defaults; any other model_args key is refused."""
    args = vision.dict("model_args")
    if other := sorted(set(args) - set(FUSION)):
        raise vision.error("model_args", f"{other[0]!r} changes the timm model built; gptcalc reads "
                                         f"{' and '.join(FUSION)} only, counting the architecture as released")
    args = Config({**FUSION, **args}, f"{vision.origin}: model_args")
    side = args.int("msfa_output_resolution")
    indices = args.raw("msfa_indices")
    if isinstance(indices, int) and not isinstance(indices, bool):
        indices = list(range(maps - indices, maps)) if 0 < indices <= maps else None
    elif isinstance(indices, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
        indices = [i + maps if i < 0 else i for i in indices]
    if not indices or any(not 0 <= i < maps for i in indices) or len(set(indices)) < len(indices) or side <= 0:
        raise args.error("msfa_indices", f"{args.raw('msfa_indices')!r} and msfa_output_resolution {side}: expected "
                                         f"distinct indices of the {maps} feature maps (stem and stages) and a "
                                         "positive side")
    return {"fused_maps": sorted(indices), "output_grid": side}


def _audio(cfg: Config, text_width: int) -> dict[str, Any]:
    """The Conformer encoder and its embedder, with Gemma3nAudioConfig's defaults."""
    audio = with_defaults(Config(dict(cfg.dict("audio_config")), f"{cfg.origin}: audio_config"), AUDIO)
    channels, kernels, strides = (audio.list(key) for key in ("sscp_conv_channel_size", "sscp_conv_kernel_size",
                                                              "sscp_conv_stride_size"))
    pairs = all(isinstance(p, list) and len(p) == 2 and all(isinstance(n, int) and n > 0 for n in p)
                for p in (*kernels, *strides))
    if not (len(channels) == len(kernels) == len(strides) == 2 and pairs):
        raise audio.error("sscp_conv_channel_size", "expected two subsampling convolutions, each kernel and "
                                                    "stride a [time, frequency] pair")
    convs, frequencies = [], audio.int("input_feat_size")
    for before, out, (kh, kw), (_, stride) in zip([1, *channels], channels, kernels, strides):
        convs.append((before, out, kh, kw))
        frequencies = (frequencies + 2 - kw) // stride + 1
    return {
        "kind": "conformer", "names": "gemma3n_audio", "d_model": audio.int("hidden_size"),
        "n_layers": audio.int("conf_num_hidden_layers"),
        "n_heads": audio.int("conf_num_attention_heads"), "conv_kernel": audio.int("conf_conv_kernel_size"),
        "convs": convs, "subsample_width": channels[-1] * frequencies, "vocab": audio.int("vocab_size"),
        "text_width": text_width, "chunk": audio.int("conf_attention_chunk_size"),
        "context_left": audio.int("conf_attention_context_left"),
        "context_right": audio.int("conf_attention_context_right"),
        "logit_cap": audio.float("conf_attention_logit_cap"), "residual_weight": audio.float("conf_residual_weight"),
        "eps": audio.float("rms_norm_eps"), "whole_horizon": True, "horizon_table": True,
        "key_scale": False,
        "strides": [tuple(stride) for stride in strides], "causal_subsampling": True, "cumulative_norm": True,
        "subsample_eps": audio.float("sscp_conv_group_norm_eps"), "reduction": audio.int("conf_reduction_factor"),
    }
