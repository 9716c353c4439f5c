"""What a multimodal model's encoder takes from an engine's memory at start-up: in vLLM its encoder cache
and the encoder's own forward in the profiling run; in SGLang a smaller default mem_fraction_static.

vLLM sizes an encoder budget in encoder embeddings (vllm/v1/core/encoder_cache_manager.py
compute_mm_encoder_budget; vllm/multimodal/encoder_budget.py MultiModalBudget):

    item    = the most embeddings one image gives (the processor's largest image, `ImageRule.largest`)
    compute = max(max_num_batched_tokens, item)
    cache   = max(encoder_cache_size or compute, item)                     (--encoder-cache-size)
    budget  = min(compute, cache)
    items   = max(1, min(budget // item, max_num_seqs x max(1, min(limit, max_model_len // item))))
                                                                           (limit: --limit-mm-per-prompt, 999)

Its profiling run (vllm/v1/worker/gpu_model_runner.py profile_run) runs the encoder on `items`
dummy images of that largest size, keeps their outputs in the encoder cache (`encoder_cache["tmp"]`),
padded with as many more embeddings as the cache exceeds the compute budget (vllm#34051), through the
decoder's profiling forward, and clears them after; so the activation peak that vLLM subtracts
before sizing the KV pool holds

    encoder cache      (items x item + cache - budget) x the width the decoder receives x dtype bytes
    rotary table       a table the tower builds on its first forward and keeps through the run (MoonViT's
                       512 x 512 grid x head_dim / 2 complex64 values: 75,497,472 B for Kimi-K2.5's 72-wide
                       heads, vllm/model_executor/models/kimi_k25_vit.py Rope2DPosEmbRepeated)
    encoder forward    items x patches through the ViT: its residual stream and widest layer's outputs
                       (split tp ways unless --mm-encoder-tp-mode data), above the decoder's forward
                       (an estimate; only the excess over the decoder's forward raises the peak); for
                       Gemma 3n's MobileNet the items images batched through timm's encoder at once
                       (vllm/model_executor/models/gemma3n_mm.py _process_image_input), the peak of
                       its live feature maps (calc/analysis/memory/convnet.py)

The width the decoder receives is the last projector's output; Qwen3-VL's encoder returns its
DeepStack features beside the merger's (vllm/model_executor/models/qwen3_vl.py: the visual model's
output is [tokens, out_hidden_size x (1 + DeepStack levels)]). Only images are profiled here (a
model whose videos give more embeddings than its largest image is profiled with videos).

SGLang runs no profiling forward: for a model with a vision tower, served with it, it scales its default
mem_fraction_static (not one the user gives) by a factor of the ViT's size (python/sglang/srt/arg_groups/
memory_hook.py adjust_mem_fraction_for_vlm, called from handle_gpu_memory_settings), so the pool leaves room
for the encoder in proportion to layers x width^2 against ViT-L/14's 24 x 1024^2:

    factor = 0.95 x clamp(1 - 0.1 x (layers x width^2 / (24 x 1024^2) - 1), 0.8, 1.05)

(its vision_config's num_hidden_layers and hidden_size, which transformers' configs of the towers read here
answer with the tower's depth and width). Its post-capture KV sizing, an opt-in, takes 8 GiB instead.

TensorRT-LLM (PyTorch backend) keeps no encoder cache: its KV-cache profiling run adds a dummy multimodal
request where the model's input processor can build one (tensorrt_llm/_torch/pyexecutor/_util.py
KvCacheCreator._create_dummy_mm_context_request; pyexecutor/multimodal_budget.py, "currently compute-only"),
so the encoder's forward is inside the peak it measures; that share of the peak is not estimated here.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.memory.convnet import conv_peak
from calc.analysis.memory.startup import forward_bytes
from calc.analysis.shapes.mobilenet import mobilenet_journey
from calc.spec.model import ModelSpec
from calc.towers import MobileNet, Tower
from calc.towers.images import ImageTokens

__all__ = ["EncoderProfile", "MM_LIMIT", "SGLANG_VLM_SOURCE", "encoder_profile", "sglang_vlm_factor"]

MM_LIMIT = 999  # vLLM's --limit-mm-per-prompt default per modality (vllm/config/multimodal.py limit_per_prompt)
SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/v1/core/encoder_cache_manager.py "
          "(compute_mm_encoder_budget), vllm/multimodal/encoder_budget.py (MultiModalBudget._get_max_items), "
          "vllm/v1/worker/gpu_model_runner.py (profile_run), https://github.com/vllm-project/vllm/pull/34051")
SGLANG_VLM_SOURCE = ("https://github.com/sgl-project/sglang/blob/a82da8da159ec67038d9357c172fba89ad8af6a3/python/"
                     "sglang/srt/arg_groups/memory_hook.py (adjust_mem_fraction_for_vlm)")
VIT_L14 = 24 * 1024**2  # SGLang's baseline ViT: 24 layers of 1,024


@dataclass(frozen=True)
class EncoderProfile:
    """vLLM's encoder budget for one model and the dummy images of its profiling run."""

    item: ImageTokens  # the largest image
    budget: int  # encoder embeddings computed at once
    items: int  # dummy images profiled
    embeds: int  # embeddings the cache holds through the profiling forward
    width: int  # the embedding width the decoder receives
    cache_bytes: int
    forward_bytes: int  # the encoder's forward over the dummy images (an estimate)
    table_bytes: int = 0  # a rotary table the tower builds on its first forward and keeps (MoonViT's)

    def describe(self) -> str:
        return (f"{self.items:,} dummy image(s) of {self.item.width}x{self.item.height} ({self.item.image_tokens:,} "
                f"embeddings each, {self.item.patches:,} patches) in an encoder budget of {self.budget:,}; "
                f"the cache holds {self.embeds:,} embeddings")


def encoder_profile(spec: ModelSpec, max_batched: int, max_seqs: int, max_model_len: int, tp: int = 1,
                    cache_size: int | None = None, limit: int = MM_LIMIT, dtype_bytes: int = 2) -> EncoderProfile | None:
    """vLLM's encoder budget and profiling images for `spec`'s vision tower; None without one (or
    without an image rule, or with images limited to 0)."""
    tower = spec.towers.get("vision")
    if tower is None or tower.images is None or limit == 0:
        return None
    item = tower.images.largest()
    each = item.image_tokens
    compute = max(max_batched, each)
    cache = max(cache_size or compute, each)
    budget = min(compute, cache)
    items = max(1, min(budget // each, max_seqs * max(1, min(limit, max_model_len // each))))
    embeds, width = items * each + cache - budget, tower.output_width
    table = getattr(tower, "vllm_forward_rope", None)
    return EncoderProfile(item, budget, items, embeds, width, embeds * width * dtype_bytes,
                          forward_estimate(tower, item, items, tp, dtype_bytes),
                          table.bytes(dtype_bytes) if table else 0)


def forward_estimate(tower: Tower | MobileNet, item: ImageTokens, items: int, tp: int, dtype_bytes: int) -> int:
    """The encoder's activations over `items` dummy images: a ViT's sized as the decoder's are
    (`calc.analysis.memory.startup.forward_bytes`), its widest layer being its one kind of layer; a
    convolutional encoder's (Gemma 3n's MobileNet, every block a different size; vLLM runs timm's model
    unsharded, so whatever the TP) the peak of live feature maps along its shapes journey
    (`calc.analysis.memory.convnet`)."""
    if isinstance(tower, MobileNet):
        return conv_peak(mobilenet_journey(tower.kind, tower, item, items), dtype_bytes, tower.fused_maps)
    layer = sum(tower.layer_params().values())
    return forward_bytes(items * item.patches, tower.d_model, layer // tower.d_model, tp, dtype_bytes)


def sglang_vlm_factor(spec: ModelSpec) -> float:
    """What SGLang multiplies its default mem_fraction_static by for `spec`'s vision tower (1 without one):
    a smaller static pool the larger the ViT, from 0.95 x 1.05 down to 0.95 x 0.8."""
    tower = spec.towers.get("vision")
    if tower is None:
        return 1.0
    ratio = tower.n_layers * tower.d_model**2 / VIT_L14
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
