"""How TensorRT-LLM's KVCacheManagerV2 turns its byte quota into pages, for a model whose layers make one pool group.

The manager is sized from the same profiled budget as V1 (calc.analysis.memory.startup), but it takes bytes, not
tokens. The chain, each link at the NVIDIA/TensorRT-LLM commit it was read at (the index holds each file at commits of
its own; the two Python files below at one commit, 0004396720, which gptcalc already cites for the budget):

    budget   tensorrt_llm/_torch/pyexecutor/_util.py at 0004396720, KvCacheCreator.configure_kv_cache_capacity: for
             V2, kv_cache_config.max_gpu_total_bytes = int((total - peak + temporary KV) x free_gpu_memory_fraction)
             (_cal_max_memory), less the fp8 context-MLA reserve (calc.analysis.memory.trtllm_workspace), after
             logging "Estimated max memory in KV cache : {budget / 2^30:.2f} GiB"; max_tokens goes back to the
             user's (None), V2's capacity being the bytes alone
    quota    tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at 0004396720, KVCacheManagerV2.__init__:
             quota = int(max_gpu_total_bytes), logged as "max_gpu_total_bytes is provided. New quota is {q}GiB";
             on more than one rank it is min(quota, ceil(Q(T(int(quota x max_util_for_resume))) /
             max_util_for_resume)), T the tokens a quota holds (_get_max_tokens_from_quota: quota / k below
             max_num_tokens x k, else max_num_tokens + (quota - max_num_tokens x k) / k, in floats, k the bytes of a
             token) taken at the MIN over ranks, Q its inverse (int(T x k)); then "KV cache manager v2 device quota
             set to {quota / (1 << 30)}GiB" (a Python float's repr) and GpuCacheTierConfig(quota)
    layers   same file, _build_base_config: one AttentionLayerConfig a layer with a KEY buffer (and a VALUE one unless
             the cache is K-only, MLA's latent) of that role's bytes a token x tokens_per_block; with
             kv_cache_config.avg_seq_len and pool_ratio unset (their defaults) no typical step and no constraints
    pools    cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/storage/config.cpp at 1148a82f66,
             createStorageConfig: the buffers of one life cycle (one attention window) and one size coalesce into one
             pool, whose slot is that size x the buffers; a life cycle's pools make one pool group. A model whose every
             layer has the same window (full attention) is one life cycle, so one pool group
    grain    storageManager.cpp (the versions read: 04b00fece3 and a later one with the cold-page codec, #17512),
             cacheTierGranularity: 2 MiB << min(4, int(log2(quota // 1 GiB))) (2 MiB under 1 GiB)
    slots    storageManager.cpp computeSlotCountForLevel: quota rounded up to a grain (at least the one-slot floor
             of computeMinSlotsFromConstraints, no constraints being given); storage/core.cpp ratioToSlotCountList /
             grainsToSlots: one pool group takes every grain, and its slots are the most n with
             sum over its pools of ceil(n x pool slot / grain) <= the grains

so tokens = slots x tokens_per_block, every layer's block of one token range in one slot. A pool can hold up to a
grain more than the quota. The manager then prints "KVCacheManagerV2 role-to-pool/lifecycle mapping:" and one line a
role (_log_kv_cache_pool_lifecycle_mapping). It prints no token count: the tokens above are what its pages hold.

Not sized here: more than one life cycle (sliding windows under V2's derived per-layer windows: gpt-oss, Gemma 3),
which splits the quota between pool groups by a typical step's bytes. _util.py's _derive_layer_type_attention_windows
bounds only layer types naming "sliding" (Llama 4's chunked layers stay full, one life cycle) and derives nothing when
the window, clamped to max_seq_len, leaves one window size (its unit tests: "unknown layer type is treated as full
attention", "sliding window larger than max_seq_len is clamped"), so a --seq no longer than the window is one pool
(docs/memory.md says what sizing gpt-oss's merged pool group and Gemma 3's two would take); DSA, which DSACacheManagerV2 lays out (its
files were not read at a commit beside these); pipeline parallelism, where ranks of different layers agree on the
fewest tokens; and the host tier V2 adds by itself when host_cache_size is unset (min(quota, half the host's free
memory over its ranks, 80 % of RLIMIT_MEMLOCK): _compute_auto_host_tier_quota), which holds evicted pages, not the
GPU pool, and depends on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.vllm_indexer import DSA

__all__ = ["V2Pool", "V2_SOURCE", "v2_pool", "v2_unsized"]

V2_SOURCE = ("tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at 0004396720 (quota), "
             "cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/storageManager.cpp and storage/core.cpp "
             "(grain, slots)")
PAGE = 2 << 20  # storageManager.cpp cacheTierGranularity: kPageSize, the GPU grain's unit
MAX_SHIFT = 4  # the grain grows to at most 2 MiB << 4 = 32 MiB
GIB = 1 << 30
# KvCacheConfig.max_util_for_resume's default (tensorrt_llm/llmapi/llm_args.py: "Default is 95%")
MAX_UTIL_FOR_RESUME = 0.95
MAX_NUM_TOKENS = 8192  # KVCacheManagerV2's max_num_tokens: the executor's, BuildConfig.max_num_tokens by default
_PLAIN = ("MHA", "GQA", "MQA", "MLA")
_ROLES = ("key", "value")


@dataclass(frozen=True)
class V2Pool:
    """KVCacheManagerV2's one GPU pool group: `budget` bytes handed to it, `ranks` ranks syncing the quota, `buffers`
    the bytes a block of each of one layer's buffers (KEY, then VALUE unless K-only), one entry a layer."""

    budget: int
    buffers: tuple[tuple[int, ...], ...]
    block: int
    ranks: int = 1

    @property
    def pool_slots(self) -> tuple[int, ...]:
        """One slot's bytes in each pool: buffers of one size coalesce (config.cpp createStorageConfig)."""
        sizes: dict[int, int] = {}
        for layer in self.buffers:
            for size in layer:
                sizes[size] = sizes.get(size, 0) + 1
        return tuple(size * count for size, count in sorted(sizes.items(), reverse=True))

    @property
    def token_bytes(self) -> int:
        return sum(self.pool_slots) // self.block

    @property
    def quota(self) -> int:
        """The quota the manager logs: the budget, on several ranks after the token round trip
        (KVCacheManagerV2.__init__), in the floats TensorRT-LLM computes it in."""
        quota = int(self.budget)
        if self.ranks <= 1:
            return quota
        tokens = _tokens_from_quota(int(quota * MAX_UTIL_FOR_RESUME), self.token_bytes)
        return min(quota, math.ceil(int(_quota_from_tokens(tokens, self.token_bytes)) / MAX_UTIL_FOR_RESUME))

    @property
    def grain(self) -> int:
        """cacheTierGranularity(GPU_MEM, quota)."""
        whole = self.quota // GIB
        return PAGE << (0 if whole == 0 else min(MAX_SHIFT, int(math.log2(whole))))

    @property
    def grains(self) -> int:
        """computeSlotCountForLevel: the quota rounded up to a grain, at least the floor of one slot."""
        floor = sum(-(-size // self.grain) for size in self.pool_slots)
        return max(floor, -(-self.quota // self.grain))

    @property
    def slots(self) -> int:
        """grainsToSlots: the most slots whose pools, each rounded up to a grain, take at most the grains."""
        lo = self.grains * self.grain // sum(self.pool_slots)
        while self._grains_for(lo + 1) <= self.grains:
            lo += 1
        while self._grains_for(lo) > self.grains:
            lo -= 1
        return lo

    def _grains_for(self, slots: int) -> int:
        return sum(-(-slots * size // self.grain) for size in self.pool_slots)

    @property
    def allocated(self) -> int:
        """The GPU bytes the pools take: each rounded up to a grain."""
        return self._grains_for(self.slots) * self.grain

    @property
    def tokens(self) -> int:
        return self.slots * self.block

    def lines(self) -> list[str]:
        """What the manager logs while it is built, in its format (the host tier's lines depend on the host)."""
        given = int(self.budget)
        roles = _ROLES[:max(len(layer) for layer in self.buffers)]
        return [f"Estimated max memory in KV cache : {self.budget / GIB:.2f} GiB",
                f"max_gpu_total_bytes is provided. New quota is {given / GIB}GiB",
                f"KV cache manager v2 device quota set to {self.quota / GIB}GiB",
                "KVCacheManagerV2 role-to-pool/lifecycle mapping:",
                *(f"role={role}, pool_group_id=0, layer_group_id=0" for role in roles)]

    def to_json(self) -> dict[str, object]:
        return {"quota_bytes": self.quota, "grain_bytes": self.grain, "grains": self.grains,
                "pool_slot_bytes": list(self.pool_slots), "slots": self.slots, "tokens": self.tokens,
                "allocated_bytes": self.allocated, "source": V2_SOURCE}


def _tokens_from_quota(quota: int, k: int) -> float:
    """_get_max_tokens_from_quota_impl for full-attention layers only (no window terms)."""
    limit = MAX_NUM_TOKENS * k
    return quota / k if quota <= limit else MAX_NUM_TOKENS + (quota - limit) / k


def _quota_from_tokens(tokens: float, k: int) -> float:
    """_get_quota_from_max_tokens_impl for full-attention layers only: max_tokens x k (the window terms add 0)."""
    return tokens * k


def v2_unsized(kv: KVCache, pp: int) -> str | None:
    """Why this cache's V2 pool is not sized here, or None when it is one pool group gptcalc sizes."""
    if pp > 1:
        return "under pipeline parallelism, where ranks of different layers agree on the fewest tokens"
    if any(kind.kind == DSA for kind in kv.layers):
        return "for DSA, whose layout DSACacheManagerV2 sets (not read at a commit beside KVCacheManagerV2's)"
    if any(kind.kind not in _PLAIN or kind.ratio != 1 for kind in kv.layers) or kv.states:
        return "for this cache's layer kinds"
    if any(kind.window and kind.window < kv.seq for kind in kv.layers):  # one no shorter than max_seq_len is clamped
        return ("for sliding-window layers, which V2 gives windows of their own (two life cycles whose pool groups "
                "split the quota by a typical step's bytes)")
    return None


def v2_pool(kv: KVCache, budget: int, block: int, ranks: int) -> V2Pool:
    """The pool KVCacheManagerV2 builds from `budget` bytes for a cache of one life cycle (v2_unsized is None)."""
    fmt = kv.format
    buffers = tuple(tuple(fmt.row_bytes(width) * block for width in ((kind.k, kind.v) if kind.v else (kind.k,)))
                    for kind in kv.layers for _ in range(kind.n_layers))
    return V2Pool(budget, buffers, block, ranks)
