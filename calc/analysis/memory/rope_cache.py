"""The rotary cos/sin table vLLM keeps beside the weights (v0.32,
vllm/model_executor/layers/rotary_embedding/__init__.py get_rope, base.py RotaryEmbedding).

get_rope caches one RotaryEmbedding per distinct (head size, rotary_dim, max_position, rope parameters,
dtype) in _ROPE_DICT, so every layer with the same settings shares one buffer. Each holds cos and sin of
rotary_dim / 2 frequencies for every position, rotary_dim values per position, in the model's dtype:

    positions = max_position_embeddings                     default, llama3, ntk, dynamic
              = original_max_position_embeddings x factor  yarn, deepseek_yarn, deepseek_llama_scaling
                                                            (yarn_scaling_rope.py, deepseek_scaling_rope.py)
              = max_position_embeddings x factor            linear (linear_scaling_rope.py)
              = original_max_position_embeddings + max_position_embeddings
                                                            longrope (Phi-3: short and long tables, one buffer)

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

__all__ = ["ROPE_SOURCE", "vllm_rope_cache"]

ROPE_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/rotary_embedding/__init__.py "
               "(get_rope: one cos_sin_cache buffer per distinct rope setting, [positions, rotary_dim])")
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


def vllm_rope_cache(spec: ModelSpec, element_bytes: int) -> int:
    """The bytes of vLLM's cos/sin tables for `spec`, whole on every GPU: one per distinct rope setting
    among the layers' mixers, positions x rotary_dim values of `element_bytes` (fp32 where the model asks)."""
    if spec.model_type in TRANSFORMERS_BACKEND:
        return 0
    width = 4 if spec.model_type in FP32_TABLE else element_bytes
    tables = {}
    for block in spec.blocks.values():
        for mixer in block.mixers():
            rope = getattr(mixer, "rope", None)
            if isinstance(rope, Rope):
                key = json.dumps([getattr(mixer, "head_dim", None), rope.model_dump()], sort_keys=True,
                                 default=str)  # get_rope's cache key: head size and rope parameters
                tables[key] = _positions(rope, spec.n_positions) * rope.rotary_dim
    return sum(tables.values()) * width
