"""How TensorRT-LLM sizes the cache of DeepSeek's sparse attention (DSA: DeepSeek-V3.2, GLM-5).

Its PyTorch backend serves a DSA model from DSACacheManager (tensorrt_llm/_torch/attention_backend/sparse/dsa/
cache_manager.py at NVIDIA/TensorRT-LLM 0bbb76d22e), a KVCacheManager whose C++ block manager keeps, beside the
MLA latent pool, one indexer-key pool of as many blocks (WindowBlockManager::createIndexerKCachePools,
cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp, read in a recent version whose commit the index did not name).
The start-up estimate of one token that turns the free memory into max tokens is
DSACacheManager.get_cache_size_per_token:

    latent   layers x (kv_lora_rank + qk_rope_head_dim) x (1 B with an fp8 KV cache, else 2 B)
    indexer  indexer layers x (index_head_dim + index_head_dim / 128 x 4)      (132 B for 128-wide keys)

the indexer's bytes whatever the cache dtype: its pool is allocated as uint8 (allocatePools, poolDtype kUINT8).
Its tokens per block are KvCacheConfig's, 32 by default (llmapi/llm_args.py); at this commit DSACacheManager and
DSACacheManagerV2 require another only for the opt-in "fp8_ds_mla" cache dtype (_resolve_fp8_ds_mla_head_dim), so
the default path pages DSA in blocks of 32. DeepSeek-V3.2 once needed 64 (NVIDIA/TensorRT-LLM#9141, Nov 2025, for
the indexer's DeepGEMM kernel); #10561's review (Jan 2026) dropped a perf config's `tokens_per_block: 64` as no
longer needed. A model class's get_model_defaults could still set one; DeepSeek-V3.2's was not read.

The lines below are V1's (DSACacheManager over the C++ KVCacheManager). At the same commit DSACacheManagerV2
serves DSA when use_kv_cache_manager_v2 resolves true (get_sparse_attn_kv_cache_manager; V1 again for beam search,
KV connectors or STAR context parallelism), and #16060 (merged; reviewed Aug 2026) makes DeepSeek-V3/V3.2 and
GLM-5 prefer V2 under the default "auto". V2 prices a token the same (its get_cache_size_per_token is V1's), but
its pool is V2's quota split by its C++ StorageManager (calc.analysis.memory.trtllm_dsa), not the KVCacheManager
that prints these lines: the figures here are TensorRT-LLM's with kv_cache_config.use_kv_cache_manager_v2 false.

The "[MemUsageChange] Allocated … GiB" line sums every primary pool's elements times the cache dtype's size
(KVCacheManager::allocatePools), the indexer pool's uint8 elements included: with a bf16 cache the line counts
each indexer byte twice, with fp8 once.
"""

from __future__ import annotations

from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.vllm_indexer import DSA, indexer_key_bytes
from calc.errors import GptcalcError

__all__ = ["TRTLLM_DSA", "TRTLLM_HYBRID", "logged_bytes_per_token", "trtllm_bytes_per_token"]

TRTLLM_DSA = ("https://github.com/NVIDIA/TensorRT-LLM/blob/0bbb76d22e61bde633cc5f7733f5194881853501/tensorrt_llm/"
              "_torch/attention_backend/sparse/dsa/cache_manager.py (DSACacheManager.get_cache_size_per_token)")

# Where a hybrid Mamba / linear-attention model's states go by default, for the refusal (engines._refuse_unmodelled).
# The index holds each TensorRT-LLM file at its own commits and no two of the files below at one commit, so each link
# names the commit it was read at (tensorrt_llm/_torch/pyexecutor/ unless said otherwise):
#   manager   _util.py get_kv_cache_manager_cls at 0004396720: MambaHybridCacheManagerV2 where
#             use_kv_cache_manager_v2 resolves True (model loading resolves the default "auto" to V2 for the hybrid
#             Mamba models V2 supports, its docstring says), else CppMambaHybridCacheManager (a Kimi config off V2:
#             Cpp with block reuse, MixedMambaHybridCacheManager without).
#   quota     _util.py KvCacheCreator at 2829508497: for V2 the profiled budget, (total - peak + temporary KV) x
#             free_gpu_memory_fraction (_cal_max_memory, calc.analysis.memory.startup), becomes
#             kv_cache_config.max_gpu_total_bytes and max_tokens is put back to the user's (None);
#             kv_cache/kv_cache_manager_v2.py KVCacheManagerV2.__init__ at 0004396720 takes quota = max_gpu_total_bytes,
#             on several ranks rounded to the fewest whole tokens any rank holds (_get_max_tokens_from_quota, allreduce
#             MIN, _get_quota_from_max_tokens).
#   estimate  kv_cache/mamba_cache_manager/common.py _estimate_mamba_hybrid_cache_cost at 2829508497: the attention
#             layers' bytes a token, plus (max_batch_size x pp + 1 CUDA-graph padding slot, + 1 under attention DP)
#             states of the rank's Mamba layers; no snapshot terms by default.
#   split     kv_cache/mamba_cache_manager/mamba_cache_manager_v2.py _build_cache_config at 2829508497: unless
#             pool_ratio is set, a typical step of max_batch_size x pp requests of avg_seq_len tokens (max_seq_len // 2
#             when unset, with a warning) plus the padding request, and a floor constraint of max_batch_size x pp +
#             padding requests of no tokens (a state slot each); a quota under _minimum_live_gpu_quota is refused.
#             The C++ StorageManager (cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/, storageManager.cpp and
#             storage/core.cpp at 04b00fece3) counts each pool group's slots for that step (computeSlotsForBatch:
#             ceil(capacity / 32) attention pages and one state slot a request), rounds each pool's bytes up to the GPU
#             grain (cacheTierGranularity: 2 MiB << min(4, max(0, int(log2(quota // 1 GiB))))), normalises the groups'
#             bytes to float32 (normalizeToRatio: float(bytes) / float(total)), and ratioToSlotCountList deals the
#             grains of the quota, rounded up to a grain, by that ratio in ascending order (nearbyint of budget x
#             ratio / the ratios left, in double), pins a group at or under its floor to the floor and re-deals the rest,
#             then adds slots while they fit the grains taken. storage/config.cpp (at 1148a82f66) makes one pool per
#             buffer size within a life cycle (all attention layers' K and V of one size: one pool; a Mamba layer's SSM
#             and conv states: two) and one pool group per distinct list of pool sizes.
# Not pinned, so the split (which sets the tokens) is refused rather than approximated: the LLM API's max_batch_size
# default (TorchLlmArgs declares None), which sets both the typical step and the state floor; and the C++ above was
# read at other commits than the Python that hands it the step (no commit holds both in the index).
TRTLLM_HYBRID = ("by default TensorRT-LLM keeps them in MambaHybridCacheManagerV2 (tensorrt_llm/_torch/pyexecutor/"
                 "_util.py get_kv_cache_manager_cls at 0004396720), whose quota is the profiled budget "
                 "(max_gpu_total_bytes) and whose C++ StorageManager splits the pool between attention pages and state "
                 "slots by the bytes of a typical step (max_batch_size x pp requests of max_seq_len // 2 tokens unless "
                 "avg_seq_len is set, one state slot each, plus 1 CUDA-graph padding slot); that split is not sized "
                 "here because the LLM API's max_batch_size default, which sets the typical step and a floor of "
                 "max_batch_size x pp + 1 state slots, was not pinned, and the C++ StorageManager was read at another "
                 "commit (04b00fece3) than the Python that feeds it (2829508497)")


def _has_dsa(kv: KVCache) -> bool:
    """DSACacheManager serves exactly the models with DSA indexer keys; every other model keeps TRT-LLM's plain price."""
    return any(kind.kind == DSA for kind in kv.layers)


def _element_bytes(kv: KVCache) -> int:
    """The latent's bytes a value: TensorRT-LLM prices 1 for an fp8 KV cache and 2 for anything else, so only
    those two widths are answered (a 32-bit or 4-bit cache would be priced at 2 bytes and allocated otherwise)."""
    bits = kv.format.bits_per_value
    if bits == 16 or (bits == 8 and kv.format.name.startswith("fp8")):
        return int(bits) // 8
    raise GptcalcError(f"--engine trtllm: {kv.model}'s DSA cache in {kv.format.name}: TensorRT-LLM prices the latent "
                       f"at 2 bytes unless the cache is fp8 ({TRTLLM_DSA}); give a 16-bit or fp8 cache")


def _latent_values(kv: KVCache) -> int:
    return sum(kind.n_layers * kind.k for kind in kv.layers if kind.kind != DSA)


def _indexer_bytes(kv: KVCache) -> int:
    return sum(kind.n_layers * indexer_key_bytes(kind.k) for kind in kv.layers if kind.kind == DSA)


def trtllm_bytes_per_token(kv: KVCache) -> int:
    """One token on one GPU as TensorRT-LLM sizes its pool: the plain cache, or for DSA the latent at the cache
    dtype plus the indexer keys at one byte a value (get_cache_size_per_token)."""
    if not _has_dsa(kv):
        return kv.bytes_per_token
    return _latent_values(kv) * _element_bytes(kv) + _indexer_bytes(kv)


def logged_bytes_per_token(kv: KVCache) -> int:
    """One token as the "Allocated … GiB" line counts it: every pool's elements at the cache dtype's size."""
    if not _has_dsa(kv):
        return kv.bytes_per_token
    size = _element_bytes(kv)
    return (_latent_values(kv) + _indexer_bytes(kv)) * size
