"""Why `--engine trtllm` gives DeepSeek-V4 and MiniMax-M3 no engine line, though TensorRT-LLM builds both.

Both architectures are registered (DeepseekV4ForCausalLM, MiniMaxM3SparseForCausalLM and its
ForConditionalGeneration wrapper: tensorrt_llm/_torch/models/_arch_index.py at 065ff9e937), and both go to a
sparse-attention cache manager that subclasses KVCacheManagerV2 (get_sparse_attn_kv_cache_manager, in a 2026
version of attention_backend/sparse/ the index did not name, maps the "deepseek_v4" and "minimax_m3" algorithms
to them):

- DeepseekV4CacheManager (tensorrt_llm/_torch/attention_backend/sparse/deepseek_v4/cache_manager.py at
  10ce7685b1): one V2 layer per (layer, kind) -- window, compressed, indexer and the compressor states --
  with compressed blocks of tokens_per_block / ratio rows; it asserts tokens_per_block 128 or 256, and the
  model class defaults it to 128 (DeepseekV4ForCausalLM.get_model_defaults; 256 where a user picks the
  fp8_ds_mla cache dtype on Blackwell). Its start-up price of a token (get_cache_bytes_per_token) averages
  the compressed rows over their ratio, but the pool is a byte quota
  (_get_cache_quota) that V2's C++ StorageManager splits among those pools by a typical step of one context
  and max_batch_size - 1 generation requests of max_seq_len (_build_cache_config);
- MiniMaxM3KVCacheManagerV2 (sparse/minimax_m3/cache_manager.py at b4a375d83d): the K and V pages plus a
  Role.INDEX_KEY buffer on each sparse layer (layers 3 onward by the checkpoint's convention, 128 wide, in
  bf16 unless the cache is fp16 or fp32: _torch_dtype_for_index_cache), pooled by the same StorageManager.

How that StorageManager rounds and splits its quota is not modelled (the hybrid managers stop at the same
step: trtllm_cache.TRTLLM_HYBRID), so the refusal names the manager and stops there.
"""

from __future__ import annotations

from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.vllm_indexer import BLOCK_INDEXER
from calc.analysis.memory.vllm_packed import has_compressed_rows

__all__ = ["trtllm_v2_sparse_home"]

_V2 = "its pool one byte quota that V2's C++ StorageManager rounds and splits"
_DSV4 = ("TensorRT-LLM builds it and serves it from DeepseekV4CacheManager, a KVCacheManagerV2 of window, "
         "compressed, indexer and compressor-state pools in blocks of 128 tokens (tokens_per_block / ratio rows "
         "for compressed ones), sized for a typical step of 1 context and max_batch_size - 1 generation requests "
         "(tensorrt_llm/_torch/attention_backend/sparse/deepseek_v4/cache_manager.py at 10ce7685b1), " + _V2)
_M3 = ("TensorRT-LLM builds it and serves it from MiniMaxM3KVCacheManagerV2, a KVCacheManagerV2 with a paged "
       "index-key buffer on each sparse layer (128 wide, bf16 unless the cache is fp16 or fp32; "
       "tensorrt_llm/_torch/attention_backend/sparse/minimax_m3/cache_manager.py at b4a375d83d), " + _V2)


def trtllm_v2_sparse_home(kv: KVCache) -> str | None:
    """Where TensorRT-LLM keeps a DeepSeek-V4 or MiniMax-M3 cache, for the refusal; None for any other model."""
    if has_compressed_rows(kv):
        return _DSV4
    if any(kind.kind == BLOCK_INDEXER for kind in kv.layers):
        return _M3
    return None
