"""A multimodal model's towers in memory: their weights per GPU, and what an image costs.

Weights. vLLM builds the vision tower with the language model and, by default
(`mm_encoder_tp_mode="weights"`, vllm/config/multimodal.py: "split the weights of each layer across
TP ranks"), shards each encoder layer's attention and MLP matrices tensor-parallel like the
decoder's (its vision blocks use QKVParallelLinear / ColumnParallelLinear / RowParallelLinear);
`--mm-encoder-tp-mode data` ("hosting the full weights on each TP rank", for the models that support
it) keeps the whole tower on every GPU. Here the encoder layers are split by those rules; the patch
and position embeddings, norms and projectors are counted whole on every GPU (an upper bound: vLLM
shards some projectors too). The tower sits with the first pipeline stage, beside the token
embedding. Quantised checkpoints leave the tower unquantised (Qwen2.5-VL-AWQ's
modules_to_not_convert ["visual"], Devstral-Small-2's FP8 ["model.vision_tower",
"model.multi_modal_projector", ...]): under a --quant scheme its rows stay 16-bit. `--text-only`
leaves the towers out, as vLLM does with `--language-model-only` or image and video limits of 0
(`--limit-mm-per-prompt`; vllm/model_executor/models/qwen3_5.py then builds no vision tower).

Images. An image becomes `calc.towers.images` tokens in the decoder's context; their KV cache is the
cache of a context of that many tokens (the cache of --seq already holds them when --seq counts them).
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.parallel import Layout
from calc.analysis.memory.parallel import _share as share  # the decoder's tensor-parallel rule, applied to encoder layers
from calc.spec.model import ModelSpec
from calc.towers import vision_tower
from calc.towers.images import ImageTokens

__all__ = ["ImageCost", "image_cost", "tower_params", "tower_row"]


def tower_params(breakdown: Breakdown, layout: Layout = Layout(), replicated: bool = False) -> dict[str, int]:
    """One GPU's tower parameters, keyed "<tower> <component>" ("vision q"): encoder layers split
    tensor-parallel unless `replicated` (vLLM's mm_encoder_tp_mode "data"), everything else whole."""
    rows: dict[str, int] = {}
    for tower in breakdown.towers:
        for name, n in tower.components.items():
            one = tower.per_layer.get(name)
            split = one is not None and not replicated and layout.tp > 1
            rows[tower_row(tower.name, name)] = tower.layers * share(name, one, layout, layout.tp) if split else n
    return rows


def tower_row(tower: str, component: str) -> str:
    """A tower component's row among the weights ("vision q"): apart from the decoder's by its tower's name."""
    return f"{tower} {component}"


@dataclass(frozen=True)
class ImageCost:
    """`count` images of one size through a model's vision tower, and their KV cache."""

    tokens: ImageTokens
    count: int
    kv_bytes: int
    kv_dtype: str

    @property
    def total_tokens(self) -> int:
        return self.tokens.tokens * self.count

    def to_json(self) -> dict[str, object]:
        return {"per_image": self.tokens.to_json(), "images": self.count, "tokens": self.total_tokens,
                "kv_bytes": self.kv_bytes, "kv_dtype": self.kv_dtype}


def image_cost(spec: ModelSpec, width: int, height: int, count: int, kv_dtype: str = "fp16") -> ImageCost:
    """What `count` images of width x height cost the decoder: tokens each, and the KV cache of them all."""
    tokens = vision_tower(spec).images.tokens(width, height)
    kv = kv_cache(spec, tokens.tokens * count, 1, kv_dtype)
    return ImageCost(tokens, count, kv.total_bytes, kv_dtype)
