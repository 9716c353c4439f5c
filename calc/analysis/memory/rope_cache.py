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

SGLang keeps the table in fp32 on CUDA whatever the model's dtype ("NOTE(ByronHsu): cache needs to be in FP32
for numerical stability", then `if not _is_cuda: cache = cache.to(dtype)`: RotaryEmbedding.__init__ in
python/sglang/srt/layers/rotary_embedding.py at ed0774f90abed3c89cbff4108683f73881a2e853; sglang#29729 quotes it),
so its table is twice vLLM's for a 16-bit model.

Not modelled: M-RoPE (Qwen-VL), whose table vLLM sizes for up to 4 x max_position_embeddings positions
(mrope.py positions_factor, chosen per model); it is counted as one table of max_position_embeddings.

Measured by a real vLLM (tests/data/engine_logs/vllm-cpu-*.log, "rope"): 20,971,520 B for the DeepSeek-V2
config (4,096 x 40 positions x 64 x 2 B), 1,048,576 B for the Llama one (8,192 x 64 x 2 B).
"""

from __future__ import annotations

import json
import math

from calc.parts.attention import Rope
from calc.spec.model import ModelSpec

__all__ = ["ROPE_SOURCE", "SGLANG_ROPE_SOURCE", "sglang_rope_cache", "vllm_rope_cache"]

ROPE_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/rotary_embedding/__init__.py "
               "(get_rope: one cos_sin_cache buffer per distinct rope setting, [positions, rotary_dim])")
SGLANG_ROPE_SOURCE = ("https://github.com/sgl-project/sglang/blob/ed0774f90abed3c89cbff4108683f73881a2e853/"
                      "python/sglang/srt/layers/rotary_embedding.py (RotaryEmbedding.__init__: the cos_sin_cache "
                      "stays fp32 on CUDA)")
# Architectures vLLM serves through its Transformers backend (vllm/model_executor/models/registry.py,
# _TRANSFORMERS_BACKEND_MODELS, v0.32), by their config's model_type: transformers' rotary layers keep
# only inv_freq, no cos/sin table (a real vLLM on the OLMo-3 config holds none).
TRANSFORMERS_BACKEND = frozenset({"arcee", "cwm", "flex_olmo", "glm", "gpt_bigcode", "gpt_neox", "hunyuan_v1_dense",
                                  "hunyuan_v1_moe", "jais2", "olmo", "olmo2", "olmo3", "phi", "seed_oss", "smollm3",
                                  "starcoder2", "vaultgemma"})
# Models whose vLLM implementation asks get_rope for an fp32 table whatever the model's dtype
# (vllm/model_executor/models/gpt_oss.py: get_rope(..., dtype=torch.float32)).
FP32_TABLE = frozenset({"gpt_oss"})
# Rope types whose table spans factor x (the value of this key; None: max_position_embeddings) positions
SCALED = {"yarn": "original_max_position_embeddings", "deepseek_yarn": "original_max_position_embeddings",
          "deepseek_llama_scaling": "original_max_position_embeddings", "linear": None}


def _positions(rope: Rope, max_position: int) -> int:
    """The rows of one table: positions it precomputes (torch.arange of a float length: its ceiling)."""
    scaling = rope.scaling or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in ("longrope", "su"):  # phi3_long_rope_scaled_rope.py: the short table, then the long one
        return scaling["original_max_position_embeddings"] + max_position
    if kind not in SCALED or "mrope_section" in scaling:
        return max_position
    base = scaling[SCALED[kind]] if SCALED[kind] else max_position
    return math.ceil(base * scaling["factor"])


def _table_values(spec: ModelSpec) -> int:
    """The values of the cos/sin tables `spec`'s layers share: one per distinct rope setting among the
    mixers (get_rope's cache key: head size and rope parameters), positions x rotary_dim each."""
    tables = {}
    for block in spec.blocks.values():
        for mixer in block.mixers():
            rope = getattr(mixer, "rope", None)
            if isinstance(rope, Rope):
                key = json.dumps([getattr(mixer, "head_dim", None), rope.model_dump()], sort_keys=True, default=str)
                tables[key] = _positions(rope, spec.n_positions) * rope.rotary_dim
    return sum(tables.values())


def vllm_rope_cache(spec: ModelSpec, element_bytes: int) -> int:
    """The bytes of vLLM's cos/sin tables for `spec`, whole on every GPU, in values of `element_bytes`
    (fp32 where the model asks; none for a model vLLM runs through transformers)."""
    if spec.model_type in TRANSFORMERS_BACKEND:
        return 0
    return _table_values(spec) * (4 if spec.model_type in FP32_TABLE else element_bytes)


def sglang_rope_cache(spec: ModelSpec) -> int:
    """The bytes of SGLang's cos/sin tables for `spec` on a CUDA GPU: the same tables, kept in fp32."""
    return _table_values(spec) * 4
