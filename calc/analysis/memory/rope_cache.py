"""The rotary cos/sin table vLLM and SGLang keep beside the weights (vLLM v0.32,
vllm/model_executor/layers/rotary_embedding/__init__.py get_rope, base.py RotaryEmbedding; SGLang's
python/sglang/srt/layers/rotary_embedding.py is the same code with one difference, below).

get_rope caches one RotaryEmbedding per distinct (head size, rotary_dim, max_position, rope parameters,
dtype) in _ROPE_DICT, so every layer with the same settings shares one buffer. Each holds cos and sin of
rotary_dim / 2 frequencies for every position, rotary_dim values per position, in the model's dtype:

    positions = max_position_embeddings                     default, llama3, ntk, dynamic
              = original_max_position_embeddings x factor  yarn, deepseek_yarn, deepseek_llama_scaling
                                                            (yarn_scaling_rope.py, deepseek_scaling_rope.py)
              = max_position_embeddings x factor            linear (linear_scaling_rope.py)
              = original_max_position_embeddings + max_position_embeddings
                                                            longrope (Phi-3: short and long tables, one buffer)

M-RoPE (Qwen2.5-VL, Qwen3-VL, Qwen3.5: `Rope.sections`) is a plain or YaRN table of mrope_positions times as
many positions (mrope.py MRotaryEmbedding: cache_max_position_num = max_position_embeddings x positions_factor):
4 by get_rope's default (Qwen2.5-VL's Qwen2 layers), 1 where the model passes it (Qwen3-VL, Qwen3.5). Which
implementation, dtype and factor vLLM uses for a model are the adapter's facts (`ModelSpec.vllm`).

A tower's own table is the tower's fact (`Tower.vllm_rope`, stated by its reader in calc/towers/): vLLM's
Qwen2.5-VL, Qwen3-VL and Qwen3.5 ViTs call get_rope(head_dim, max_position=8192, partial_rotary_factor 0.5)
(models/qwen2_5_vl.py L682-687, qwen3_vl.py L628-633): 8,192 x 40 x 2 B = 655,360 B for Qwen2.5-VL-7B's 80-wide
heads; Llama 4's vision rope keeps 577 x 44 complex64 values (mllama4.py L302-315). The other towers keep none
at load: SigLIP (Gemma 3, LLaVA-OneVision) and InternViT have learned positions only; Pixtral (Mistral 3) runs
transformers' PixtralVisionRotaryEmbedding, an inv_freq of head_dim / 2 fp32 values and its copy (transformers
>= 5.17), no table; Gemma 4's tower is transformers' own (gemma4_mm.py AutoModel); MoonViT (Kimi-K2.5) builds
its 512 x 512 table on its first forward (kimi_k25_vit.py Rope2DPosEmbRepeated.get_freqs_cis), so inside the
profiling run, not the weights: an encoder term of the budget (`Tower.vllm_forward_rope`, calc.analysis.memory.encoder).

SGLang keeps the table in fp32 on CUDA whatever the model's dtype ("NOTE(ByronHsu): cache needs to be in FP32
for numerical stability", then `if not _is_cuda: cache = cache.to(dtype)`: RotaryEmbedding.__init__ in
python/sglang/srt/layers/rotary_embedding.py at ed0774f90abed3c89cbff4108683f73881a2e853; sglang#29729 quotes it),
so its table is twice vLLM's for a 16-bit model. SGLang's M-RoPE table is a plain one, not 4 x:
get_rope builds MRotaryEmbedding(head_size, rotary_dim, max_position, ...) for a "default" rope with
mrope_section, and YaRNScalingMRotaryEmbedding with original_max_position_embeddings for a "yarn" one
(python/sglang/srt/layers/rotary_embedding/factory.py at 108c36c00829); MRotaryEmbedding hands
max_position_embeddings to RotaryEmbedding unchanged and the YaRN variant's table spans original x
factor rows (mrope.py at 020d83a06417, MRotaryEmbedding.__init__, YaRNScalingMRotaryEmbedding.
_compute_cos_sin_cache): Qwen2.5-VL-7B's 128,000 x 128 x 4 B = 65,536,000 B where vLLM keeps 4 x
128,000 rows of 2 B. Its forward casts the table to the query's dtype on first use
(_match_cos_sin_cache_dtype), after the pool is sized, so the fp32 table is what loading holds.

Measured by a real vLLM (tests/data/engine_logs/vllm-cpu-*.log, "rope"): 20,971,520 B for the DeepSeek-V2
config (4,096 x 40 positions x 64 x 2 B), 1,048,576 B for the Llama one (8,192 x 64 x 2 B).
"""

from __future__ import annotations

import json
import math

from calc.parts.attention import Rope
from calc.spec.model import ModelSpec
from calc.towers import Tower

__all__ = ["ROPE_SOURCE", "SGLANG_FREQS_CIS_SOURCE", "SGLANG_ROPE_SOURCE", "TOWER_ROPE_SOURCE", "sglang_freqs_cis",
           "sglang_rope_cache", "vllm_rope_cache",
           "vllm_tower_rope_cache"]

ROPE_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/rotary_embedding/__init__.py "
               "(get_rope: one cos_sin_cache buffer per distinct rope setting, [positions, rotary_dim])")
TOWER_ROPE_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/models/qwen2_5_vl.py "
                     "(Qwen2_5_VisionTransformer.rotary_pos_emb; qwen3_vl.py Qwen3_VisionTransformer's, mllama4.py "
                     "Llama4VisionAttention.rotary_emb): the vision tower's own get_rope table")
SGLANG_ROPE_SOURCE = ("https://github.com/sgl-project/sglang/blob/ed0774f90abed3c89cbff4108683f73881a2e853/"
                      "python/sglang/srt/layers/rotary_embedding.py (RotaryEmbedding.__init__: the cos_sin_cache "
                      "stays fp32 on CUDA)")
SGLANG_FREQS_CIS_SOURCE = ("https://github.com/sgl-project/sglang/blob/130a40708e1d9dc5562cad31c1e9537e1d428105/python/"
                           "sglang/srt/layers/deepseek_v4_rope.py (precompute_freqs_cis, lru_cache(2): complex64 "
                           "[seqlen, dim / 2]) and https://github.com/sgl-project/sglang/blob/000328a8cd54dd3aac97cd99"
                           "77c39b5408034b26/python/sglang/srt/models/deepseek_v4.py (MQALayer: register_buffer("
                           "'freqs_cis', precompute_freqs_cis(qk_rope_head_dim, max_position_embeddings, ...)))")
# Rope types whose table spans factor x (the value of this key; None: max_position_embeddings) positions
SCALED = {"yarn": "original_max_position_embeddings", "deepseek_yarn": "original_max_position_embeddings",
          "deepseek_llama_scaling": "original_max_position_embeddings", "linear": None}
MROPE_KINDS = (None, "default", "yarn")  # get_rope builds MRotaryEmbedding for these with mrope_section


def _positions(rope: Rope, max_position: int, mrope_positions: int) -> int:
    """The rows of one table: positions it precomputes (torch.arange of a float length: its ceiling)."""
    scaling = rope.scaling or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in ("longrope", "su"):  # phi3_long_rope_scaled_rope.py: the short table, then the long one
        return scaling["original_max_position_embeddings"] + max_position
    repeat = mrope_positions if rope.sections and kind in MROPE_KINDS else 1
    if kind not in SCALED:
        return max_position * repeat
    base = scaling[SCALED[kind]] if SCALED[kind] else max_position
    return math.ceil(base * repeat * scaling["factor"])


def _width(rope: Rope, mixer: object) -> int:
    """Values a position: the rotary dim, or the whole head for Gemma-4's proportional rope, whose table
    zero-pads the unrotated dims (rotary_embedding/gemma4_rope.py Gemma4RotaryEmbedding: rotary_dim = head_size)."""
    kind = (rope.scaling or {}).get("rope_type")
    return getattr(mixer, "head_dim", None) or rope.rotary_dim if kind == "proportional" else rope.rotary_dim


def _table_values(spec: ModelSpec, mrope_positions: int) -> int:
    """The values of the cos/sin tables `spec`'s layers share: one per distinct rope setting among the
    mixers (get_rope's cache key: head size and rope parameters), positions x rotary_dim each."""
    tables = {}
    for block in spec.blocks.values():
        # a shared block's attention (Zamba2's) builds its table like the layer's own (models/zamba2.py get_rope)
        shared = (block.shared.block.attention,) if block.shared else ()
        for mixer in shared + block.mixers():
            rope = getattr(mixer, "rope", None)
            if isinstance(rope, Rope):
                key = json.dumps([getattr(mixer, "head_dim", None), rope.model_dump()], sort_keys=True,
                                 default=str)
                tables[key] = _positions(rope, spec.n_positions, mrope_positions) * _width(rope, mixer)
    return sum(tables.values())


def vllm_rope_cache(spec: ModelSpec, element_bytes: int) -> int:
    """The bytes of vLLM's cos/sin tables for `spec`'s decoder, whole on every GPU, in values of
    `element_bytes` (4 where vLLM keeps fp32); none where vLLM's own implementation is not the one that
    runs (`spec.vllm.implementation`)."""
    build = spec.vllm
    if build.implementation != "native":
        return 0
    return _table_values(spec, build.mrope_positions) * (4 if build.rope_dtype == "float32" else element_bytes)


def vllm_tower_rope_cache(spec: ModelSpec, element_bytes: int) -> int:
    """The bytes of the cos/sin tables vLLM's own towers build at load (`Tower.vllm_rope`), whole on every GPU."""
    if spec.vllm.implementation != "native":
        return 0
    return sum(tower.vllm_rope.bytes(element_bytes) for tower in spec.towers.values()
               if isinstance(tower, Tower) and tower.vllm_rope is not None)


def sglang_freqs_cis(spec: ModelSpec) -> int:
    """The complex64 tables a model file keeps beside get_rope's (`SglangBuild.freqs_cis`: DeepSeek-V4's MQALayer
    registers precompute_freqs_cis(rotary_dim, max_position_embeddings, ...) as a buffer, built under the loader's
    device context, so on the GPU): max_position_embeddings x rotary_dim / 2 values of 8 B, one per distinct rope
    among the layers, since its lru_cache(2) hands every layer of a setting the same tensor (DeepSeek-V4 has two:
    the sliding layers' and the compressed layers')."""
    if not spec.sglang.freqs_cis:
        return 0
    ropes = {json.dumps(mixer.rope.model_dump(), sort_keys=True, default=str): mixer.rope.rotary_dim
             for block in spec.blocks.values() for mixer in block.mixers()
             if isinstance(getattr(mixer, "rope", None), Rope)}
    return sum(spec.n_positions * dim // 2 * 8 for dim in ropes.values())


def sglang_rope_cache(spec: ModelSpec) -> int:
    """The bytes of SGLang's cos/sin tables for `spec` on a CUDA GPU: the same tables, kept in fp32."""
    return _table_values(spec, 1) * 4
