"""Gemma 3n's towers (transformers models/gemma3n/modeling_gemma3n.py). The audio tower: a Conformer encoder
(Gemma3nAudioEncoder, calc/towers/conformer.py) and its embedder (Gemma3nMultimodalEmbedder: a table
of `vocab_size` audio-token rows, hard and soft embedding norms, a bias-free projection into the text
width, a scale-free norm). The subsampling's two convolutions pad each frequency axis by one on
both sides, so a conv of kernel k and stride s leaves (f + 2 - k) // s + 1 frequencies; the input
projection reads the last one's channels x frequencies.

The vision tower is timm's MobileNet-v5 (TimmWrapperModel builds `vision_config.architecture`,
`mobilenetv5_300m_enc` by default and in E2B's and E4B's configs), counted from timm's own block
table (calc/towers/mobilenet.py), and its embedder (`embed_vision`, as the audio one). Another timm
architecture, or `model_args` that change the one built, is refused rather than counted as the
released one. An image becomes 256 soft tokens whatever its size: the processor
(SiglipImageProcessor) resizes it to 768 x 768, the default resolution transformers documents
(https://huggingface.co/docs/transformers/v5.0.0rc1/model_doc/gemma3n.md), the encoder's fusion
adapter leaves a 16 x 16 grid, vision_soft_tokens_per_image = 256 of them (modeling_gemma3n.py
get_image_features); processing_gemma3n.py wraps them as Gemma 3 does, "\\n\\n<boi>" ... "<eoi>\\n\\n"
(calc/towers/images.py FixedImages).
"""

from __future__ import annotations

import math
from typing import Any

from calc.arch.common import with_defaults
from calc.arch.config import Config
from calc.towers.mobilenet import ARCHITECTURES

__all__ = ["towers"]

# Gemma3nVisionConfig and Gemma3nAudioConfig (models/gemma3n/configuration_gemma3n.py).
VISION = {"architecture": "mobilenetv5_300m_enc", "hidden_size": 2048, "vocab_size": 128}
IMAGE_SIZE = 768  # the processor's resize (SiglipImageProcessor size in gemma-3n's preprocessor_config.json)
SOFT_TOKENS = 256  # Gemma3nConfig.vision_soft_tokens_per_image
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
    if vision.raw("model_args", default=None):
        raise vision.error("model_args", "changes the timm model built; gptcalc counts the architecture as released")
    tokens = cfg.int("vision_soft_tokens_per_image", default=SOFT_TOKENS)
    side = math.isqrt(tokens)
    if side * side != tokens or IMAGE_SIZE % side:
        raise cfg.error("vision_soft_tokens_per_image", f"{tokens}: expected a square grid of the 768-pixel image")
    return {"kind": "mobilenetv5", "architecture": name, "stages": ARCHITECTURES[name],
            "d_model": vision.int("hidden_size"), "vocab": vision.int("vocab_size"), "text_width": text_width,
            "images": {"kind": "fixed", "image_size": IMAGE_SIZE, "patch_size": IMAGE_SIZE // side,
                       "tokens_per_image": tokens}}


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
