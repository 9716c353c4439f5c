"""What DSACacheManagerV2 hands KVCacheManagerV2 for a DSA model (DeepSeek-V3.2, GLM-5): one more buffer a layer.

DSACacheManagerV2 (tensorrt_llm/_torch/attention_backend/sparse/dsa/cache_manager.py at NVIDIA/TensorRT-LLM
0bbb76d22e, the one stored version that has the class; it imports the wrapper from pyexecutor/kv_cache_manager_v2,
the module trtllm_v2 reads at 0004396720 under pyexecutor/kv_cache/, whose hook, roles and quota path below have the
same names and signatures there) subclasses KVCacheManagerV2 and changes only what a layer's buffers are:

    latent   the base _build_base_config's KEY buffer, SELFKONLY (no VALUE): 1 head x (kv_lora_rank +
             qk_rope_head_dim) at the cache dtype x tokens_per_block, as for any MLA layer
    indexer  _extra_buffers_per_layer: on each local layer that owns indexer keys (derive_indexer_k_cache_layer_mask,
             every layer unless the sparse params mark one a shared-indexer layer; DeepSeek-V3.2 and GLM-5 mark
             none), a BufferConfig(role=Role.INDEX_KEY, size=get_layer_bytes_per_token(layer, INDEX_KEY) x
             tokens_per_block), where a token is _get_indexer_k_cache_bytes_per_token(index_head_dim, 128, fp4):
             index_head_dim fp8 bytes + index_head_dim / 128 x 4 scale bytes (132 for 128-wide keys), whatever the
             cache dtype; fp4 keys (indexer_k_dtype "fp4", halving the data bytes) are opt-in and not sized here
    blocks   KvCacheConfig's tokens_per_block, 32 by default: only the opt-in "fp8_ds_mla" dtype asks for another
             (_resolve_fp8_ds_mla_head_dim)

Both buffers share the layer's life cycle: the attention layers of DeepSeek-V3.2 and GLM-5 have no window, so every
buffer is in one life cycle and one pool group. The C++ StorageManager coalesces a life cycle's buffers by size, not
role ("V2 storage coalesces buffers purely by (life_cycle, buffer size)", get_disagg_role_mapper_kinds'
docstring), so the latents make one pool and the indexer keys another, the two dealt out slot by slot
(calc.analysis.memory.trtllm_v2). The budget and quota path is the base class's: DSACacheManagerV2 overrides no
quota method; its get_cache_size_per_token is DSACacheManager's (the start-up price,
calc.analysis.memory.trtllm_cache), and get_layer_bytes_per_token(layer, Role.ALL) adds the indexer bytes to the
latent's, so on several ranks the quota's token round trip counts both. _log_kv_cache_pool_lifecycle_mapping heads
its lines with type(self).__name__ and prints str(role): "key" and "index_key".
"""

from __future__ import annotations

from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.vllm_indexer import DSA, indexer_key_bytes

__all__ = ["DSA_MANAGER", "INDEX_KEY", "TRTLLM_DSA_V2", "index_key_buffers"]

DSA_MANAGER = "DSACacheManagerV2"
TRTLLM_DSA_V2 = ("tensorrt_llm/_torch/attention_backend/sparse/dsa/cache_manager.py at 0bbb76d22e: "
                 "DSACacheManagerV2._extra_buffers_per_layer")
INDEX_KEY = "index_key"  # Role.INDEX_KEY = DataRole("index_key") (kv_cache_manager_v2.py at 0004396720)


def index_key_buffers(kv: KVCache, block: int) -> dict[str, tuple[int, ...]]:
    """The INDEX_KEY buffer's bytes a block of each layer block (kind.block) that keeps DSA keys: the latent's layers
    of the same block are the layers that own them (DSA's keys and latent are one layer, KVCache.n_layers)."""
    return {kind.block: (indexer_key_bytes(kind.k) * block,) for kind in kv.layers if kind.kind == DSA}
