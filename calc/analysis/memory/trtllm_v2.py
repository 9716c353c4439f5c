"""How TensorRT-LLM's KVCacheManagerV2 turns its byte quota into pages: full attention and sliding windows.

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
             max_util_for_resume)), T the tokens a quota holds (_get_max_tokens_from_quota, in floats, sliding
             layers priced by max_batch_size requests' windows: calc.analysis.memory.trtllm_v2_sync) taken at the
             MIN over ranks, Q its inverse; then "KV cache manager v2 device quota
             set to {quota / (1 << 30)}GiB" (a Python float's repr) and GpuCacheTierConfig(quota)
    layers   same file, _build_base_config: one AttentionLayerConfig a layer with a KEY buffer (and a VALUE one unless
             the cache is K-only, MLA's latent) of that role's bytes a token x tokens_per_block; with
             kv_cache_config.avg_seq_len and pool_ratio unset (their defaults) no typical step and no constraints
    windows  _util.py's _derive_layer_type_attention_windows: a layer type naming "sliding" gets sliding_window,
             every other layer max_seq_len, when that leaves two window sizes (clamped to max_seq_len; Llama 4's
             chunked layers stay full); kv_cache_manager_v2.py _resolve_v2_max_attention_window_vec turns
             max_seq_len into None (full attention) and _build_base_config gives it each layer as sliding_window_size
    storage  cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2 at 1148a82f66, one commit for the three files:
    cycles   lifeCycleRegistry.cpp (a stored version): one life cycle a distinct window, numbered by its first layer
    pools    storage/config.cpp createStorageConfig: a life cycle's buffers of one size coalesce into one pool, whose
             slot is that size x the buffers, biggest first; life cycles whose lists of slot sizes are equal share
             one pool group (gpt-oss: 12 sliding and 12 full layers of one size, one group whose slots either
             takes), pool groups numbered in the order of those lists (a std::map; the Python storage numbers them
             as met, config.cpp's NOTE says)
    grain    storageManager.cpp cacheTierGranularity: 2 MiB << min(4, int(log2(quota // 1 GiB))) (2 MiB under 1 GiB)
    floors   computePoolGroupMinSlotsFromConstraints with no constraints: a sliding life cycle's
             (window + 30) // 32 + 1 blocks, a full one the largest of those (1 with no window), summed per group;
             computeSlotCountForLevel: the quota rounded up to a grain, at least the floors' grains
    split    the StorageManager constructor, with no typical step, constraints or initial_pool_ratio (avg_seq_len and
             pool_ratio unset): the fallback batch KVCacheDesc{capacity 2049, history 2048}; a life cycle's slots are
             ceil(2049 / 32) less getStaleRange's (history + 1 - window) // 32 stale blocks (lifeCycleRegistry.h);
             slotsToBytes rounds each pool to a grain; ratioFromBatch normalises per life cycle and
             toPoolGroupRatio sums per pool group and normalises again, in float32 (normalizeToRatio, common.h)
    slots    storage/core.cpp ratioToSlotCountList: pool groups by ascending share, each
             nearbyint(grains left x its share / the shares left) grains, grainsToSlots the most slots n with
             sum over its pools of ceil(n x pool slot / grain) within them, the rest to the next; a group at or
             under its floor is pinned to it and the others dealt again; then each bumped while one more slot takes
             no more grains. One pool group takes every grain

DSA (DeepSeek-V3.2, GLM-5) is DSACacheManagerV2's, which adds an INDEX_KEY buffer to each layer beside the latent's
KEY, a pool of its own in the same life cycle (calc.analysis.memory.trtllm_dsa). A pool can hold up to a grain more
than the quota. The manager then prints "{its class} role-to-pool/lifecycle mapping:" and one line a (role, pool
group, life cycle), first layer first (_log_kv_cache_pool_lifecycle_mapping). It prints no token count. With one
life cycle gptcalc's tokens are slots x tokens_per_block, every layer's block of one token range in one slot; with
several, the tokens of requests of --seq the pools hold: each pool group's slots x --seq // the slots one such
request holds there (its blocks less the stale ones, as clampMaxSeqLenForMem's getNumSlots counts them), the fewest.

max_seq_len is --seq + 1 (engine_seq): with the overlap scheduler, on unless disable_overlap_scheduler,
py_executor_creator.py (000429d57d and bab0f2e6ee, the versions the index holds; 0004396720's KvCacheCreator still
takes the net length apart, net_max_seq_len) builds the managers for one token more. So a window of exactly --seq is
a life cycle of its own, and a request holds the blocks of --seq + 1 tokens; --disable-overlap-scheduler drops the
+ 1 (`overlap`).

Versions read and where they disagree (storageManager.cpp): 04b00fece3 and 2cdb4523 split per pool group and floor a
pool group at one slot a life cycle, and their StorageManager takes no initial_pool_ratio or max_util_for_resume,
which KVCacheManagerV2._build_base_config at 0004396720 passes (initial_pool_ratio, max_util_for_resume,
swa_scratch_reuse, the rebalance settings), so they are older than that wrapper; a cold-page-codec version whose commit
the index does not name splits per pool group with the window floors; 1148a82f66 (read here) splits per life cycle and
sums per pool group, and takes initial_pool_ratio per life cycle ("layer group"), as the wrapper's KvCacheConfig
pool_ratio is handed over. For Gemma 3 27B both float32 routes give the same slots at 3,000 random quotas from 1 to 200
GiB; the floors differ only where a quota holds a few windows.

Under pipeline parallelism each rank builds these pools from its own layers and budget, the quota synced at the
fewest tokens any rank holds: calc.analysis.memory.trtllm_v2_pp.

Not sized here: SWA scratch reuse
(enable_swa_scratch_reuse, False by default but for DeepSeek-V4); and the host tier V2 adds by itself when
host_cache_size is unset (min(quota, half the host's free memory over its ranks, 80 % of RLIMIT_MEMLOCK):
_compute_auto_host_tier_quota), which holds evicted pages, not the GPU pool, and depends on the host.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from calc.analysis.memory.cfloat import f32
from calc.analysis.memory.kv import KVCache, KVLayers
from calc.analysis.memory.trtllm_dsa import DSA_MANAGER, INDEX_KEY, index_key_buffers
from calc.analysis.memory.trtllm_v2_sync import rank_tokens, synced_quota
from calc.analysis.memory.vllm_indexer import DSA

__all__ = ["OVERLAP_SOURCE", "V2Pool", "V2_SOURCE", "derived_windows", "engine_seq", "own_window", "v2_pool",
           "v2_unsized"]

OVERLAP_SOURCE = ("tensorrt_llm/_torch/pyexecutor/py_executor_creator.py create_py_executor (at 000429d57d and "
                  "bab0f2e6ee, the versions the index holds): with the overlap scheduler (disable_overlap_scheduler "
                  "False by default, llm_args.py) KvCacheCreator gets max_seq_len = model_engine.max_seq_len + 1, "
                  "which _util.py at 0004396720 hands every manager it builds")
V2_SOURCE = ("tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at 0004396720 (quota, windows), "
             "tensorrt_llm/llmapi/llm_args.py at 0004396720 (max_batch_size 2,048, max_num_tokens 8,192), "
             "cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/storage/config.cpp, storageManager.cpp and "
             "storage/core.cpp at 1148a82f66 (pools, grain, split, slots); " + OVERLAP_SOURCE)
PAGE = 2 << 20  # storageManager.cpp cacheTierGranularity: kPageSize, the GPU grain's unit
MAX_SHIFT = 4  # the grain grows to at most 2 MiB << 4 = 32 MiB
GIB = 1 << 30
FALLBACK_CAPACITY, FALLBACK_HISTORY = 2049, 2048  # StorageManager's fallback batch: KVCacheDesc{2049, 2048}
_PLAIN = ("MHA", "GQA", "MQA", "MLA")
_ROLES = ("key", "value")


def engine_seq(seq: int, overlap: bool = True) -> int:
    """The max_seq_len the KV cache manager is built with for a --seq of `seq`: one more wherever the overlap
    scheduler runs (`overlap`, its default; OVERLAP_SOURCE). It sets the windows V2 derives (a window of exactly
    --seq is shorter than it) and the blocks a request of --seq holds."""
    return seq + 1 if overlap else seq


def own_window(kind: KVLayers, seq: int, overlap: bool = True) -> int | None:
    """The window a layer of this kind keeps as its own where V2 derives windows: a sliding one shorter than
    max_seq_len (engine_seq: a window of exactly --seq too); None: a full-attention layer, or a window no shorter,
    which V2 clamps to full (_resolve_v2_max_attention_window_vec). The one rule v2_pool's pools and
    trtllm_manager's note count sliding layers by."""
    return kind.window if kind.window and kind.window < engine_seq(seq, overlap) else None


@dataclass(frozen=True)
class V2Pool:
    """KVCacheManagerV2's GPU pools: `budget` bytes handed to it, `ranks` ranks syncing the quota, `buffers` the bytes
    a block of each of one layer's buffers (KEY, then VALUE unless K-only), one entry a layer, in layer order, and
    `windows` each layer's derived attention window (None: full attention; empty: every layer full); `seq` is
    --seq, which a sliding-window pool's tokens are counted in requests of (the manager's max_seq_len is one more,
    engine_seq)."""

    budget: int
    buffers: tuple[tuple[int, ...], ...]
    block: int
    ranks: int = 1
    windows: tuple[int | None, ...] = ()
    seq: int = 0
    roles: tuple[tuple[str, ...], ...] = ()  # each layer's buffers' roles; empty: KEY, then VALUE
    manager: str = "KVCacheManagerV2"  # the class whose name heads the mapping lines (type(self).__name__)
    overlap: bool = True  # the overlap scheduler runs (not disable_overlap_scheduler): max_seq_len is --seq + 1
    agreed: float | None = None  # under --pp, the tokens the ranks agreed on (trtllm_v2_pp); None: identical ranks

    @cached_property
    def life_cycles(self) -> tuple[int | None, ...]:
        """One life cycle a distinct window, numbered by first layer (LifeCycleRegistry's constructor)."""
        return tuple(dict.fromkeys(self._windows))

    @cached_property
    def _windows(self) -> tuple[int | None, ...]:
        return self.windows or (None,) * len(self.buffers)

    def _cycle_slot(self, cycle: int) -> tuple[int, ...]:
        """A life cycle's pools: its buffers of one size coalesce into one, biggest first (createStorageConfig)."""
        sizes: dict[int, int] = {}
        for layer, window in zip(self.buffers, self._windows):
            if window == self.life_cycles[cycle]:
                for size in layer:
                    sizes[size] = sizes.get(size, 0) + 1
        return tuple(sorted((size * count for size, count in sizes.items()), reverse=True))

    @cached_property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """Pool groups: the life cycles whose pools have one list of slot sizes share one, numbered in the order
        of those lists (config.cpp's std::map keyed by the list)."""
        keys = sorted({self._cycle_slot(cycle) for cycle in range(len(self.life_cycles))})
        return tuple(tuple(c for c in range(len(self.life_cycles)) if self._cycle_slot(c) == key) for key in keys)

    def group_of(self, cycle: int) -> int:
        return next(index for index, cycles in enumerate(self.groups) if cycle in cycles)

    def group_slot(self, group: int) -> tuple[int, ...]:
        return self._cycle_slot(self.groups[group][0])

    @cached_property
    def pool_slots(self) -> tuple[int, ...]:
        """Every pool's slot bytes, pool group by pool group."""
        return tuple(size for group in range(len(self.groups)) for size in self.group_slot(group))

    @cached_property
    def token_bytes(self) -> int:
        return sum(self.pool_slots) // self.block

    @cached_property
    def quota(self) -> int:
        """The quota the manager logs: the budget, on several ranks after the token round trip
        (KVCacheManagerV2.__init__, calc.analysis.memory.trtllm_v2_sync), sliding layers priced by their window, at
        the tokens the ranks `agreed` on where their layers differ (pipeline parallelism) or at this rank's own."""
        quota = int(self.budget)
        if self.ranks <= 1:
            return quota
        return synced_quota(quota, self._layer_bytes, self._windows, self.block, self.agreed)

    @cached_property
    def own_tokens(self) -> float:
        """The tokens this rank offers the MIN all-reduce (trtllm_v2_sync.rank_tokens): its budget's, before the
        sync."""
        return rank_tokens(int(self.budget), self._layer_bytes, self._windows, self.block)

    @cached_property
    def _layer_bytes(self) -> list[int]:
        """Each layer's bytes a token, every buffer of it (get_layer_bytes_per_token with Role.ALL)."""
        return [sum(layer) // self.block for layer in self.buffers]

    @cached_property
    def grain(self) -> int:
        """cacheTierGranularity(GPU_MEM, quota)."""
        whole = self.quota // GIB
        return PAGE << (0 if whole == 0 else min(MAX_SHIFT, int(math.log2(whole))))

    @cached_property
    def min_slots(self) -> tuple[int, ...]:
        """Each pool group's floor (computePoolGroupMinSlotsFromConstraints, no constraints): a sliding life cycle's
        (window + block - 2) // block + 1 blocks, a full one the largest of those (1 with no window)."""
        floors = [(w + self.block - 2) // self.block + 1 for w in self.life_cycles if w is not None]
        cycle = [(w + self.block - 2) // self.block + 1 if w is not None else max(floors, default=1)
                 for w in self.life_cycles]
        return tuple(sum(cycle[c] for c in cycles) for cycles in self.groups)

    @cached_property
    def grains(self) -> int:
        """computeSlotCountForLevel: the quota rounded up to a grain, at least the pool groups' floors."""
        floor = sum(self._grains_for(n, g) for g, n in enumerate(self.min_slots))
        return max(floor, -(-self.quota // self.grain))

    @cached_property
    def ratio(self) -> tuple[float, ...]:
        """Each pool group's share of the grains with no typical step, constraint or pool_ratio: the fallback batch
        of one request of capacity 2,049 and history 2,048, each life cycle's slots (less getStaleRange's stale
        blocks) as grain-rounded bytes, normalised per life cycle then summed per pool group and normalised again,
        in float32 (StorageManager's constructor, ratioFromBatch, toPoolGroupRatio)."""
        needs = [-(-FALLBACK_CAPACITY // self.block) - _stale(w, FALLBACK_HISTORY, self.block)
                 for w in self.life_cycles]
        spent = [sum(-(-n * size // self.grain) * self.grain for size in self.group_slot(self.group_of(c)))
                 for c, n in enumerate(needs)]
        total = f32(sum(spent))
        per_cycle = [f32(f32(b) / total) for b in spent]
        sums = [_f32_sum(per_cycle[c] for c in cycles) for cycles in self.groups]
        whole = _f32_sum(sums)
        return tuple(f32(x / whole) for x in sums)

    @cached_property
    def group_slots(self) -> tuple[int, ...]:
        """ratioToSlotCountList (storage/core.cpp): the grains dealt by ratio, smallest share first, each pool group
        pinned to its floor where its share falls to it, then each bumped while one more slot takes no more grains."""
        slots = [0] * len(self.groups)
        left, active = self.grains, list(range(len(self.groups)))
        while active:
            dealt, budget = {}, left
            order = sorted(active, key=lambda g: self.ratio[g])
            for i, group in enumerate(order):
                share = self.ratio[group] / sum(float(self.ratio[g]) for g in order[i:])
                dealt[group] = self._slots_in(round(budget * share), group)
                budget -= self._grains_for(dealt[group], group)
            pinned = [g for g in active if dealt[g] <= self.min_slots[g]]
            if not pinned:
                slots = [dealt.get(g, slots[g]) for g in range(len(slots))]
                break
            for group in pinned:
                slots[group] = self._slots_in(self._grains_for(self.min_slots[group], group), group)
                left -= self._grains_for(slots[group], group)
            active = [g for g in active if g not in pinned]
        return tuple(self._bumped(n, g) for g, n in enumerate(slots))

    def _bumped(self, slots: int, group: int) -> int:
        while self._grains_for(slots + 1, group) <= self._grains_for(slots, group):
            slots += 1
        return slots

    def _slots_in(self, grains: int, group: int) -> int:
        """grainsToSlots: the most slots whose pools, each rounded up to a grain, take at most `grains`."""
        if grains < self._grains_for(1, group):
            return 0
        lo = grains * self.grain // sum(self.group_slot(group))
        while self._grains_for(lo + 1, group) <= grains:
            lo += 1
        while self._grains_for(lo, group) > grains:
            lo -= 1
        return lo

    def _grains_for(self, slots: int, group: int = 0) -> int:
        return sum(-(-slots * size // self.grain) for size in self.group_slot(group))

    @cached_property
    def slots(self) -> int:
        """Every pool group's slots."""
        return sum(self.group_slots)

    @cached_property
    def allocated(self) -> int:
        """The GPU bytes the pools take: each rounded up to a grain."""
        return sum(self._grains_for(n, g) for g, n in enumerate(self.group_slots)) * self.grain

    @cached_property
    def request_slots(self) -> tuple[int, ...]:
        """The slots one request holds in each pool group: every block of the manager's max_seq_len (--seq + 1,
        engine_seq) less the stale ones before its window (clampMaxSeqLenForMem's getNumSlots, getStaleRange at
        history = max_seq_len)."""
        seq = engine_seq(self.seq, self.overlap)
        need = [-(-seq // self.block) - _stale(w, seq, self.block) for w in self.life_cycles]
        return tuple(sum(need[c] for c in cycles) for cycles in self.groups)

    @cached_property
    def tokens(self) -> int:
        """One life cycle: slots x tokens_per_block. Several: the tokens of requests of max_seq_len the slots hold,
        in the pool group they fill first (slots x max_seq_len / a request's slots there)."""
        if len(self.life_cycles) == 1:
            return self.slots * self.block
        return min(n * self.seq // need for n, need in zip(self.group_slots, self.request_slots))

    def lines(self) -> list[str]:
        """What the manager logs while it is built, in its format (the host tier's lines depend on the host)."""
        given = int(self.budget)
        return [f"Estimated max memory in KV cache : {self.budget / GIB:.2f} GiB",
                f"max_gpu_total_bytes is provided. New quota is {given / GIB}GiB",
                f"KV cache manager v2 device quota set to {self.quota / GIB}GiB",
                f"{self.manager} role-to-pool/lifecycle mapping:", *self._mapping()]

    def _mapping(self) -> list[str]:
        """_log_kv_cache_pool_lifecycle_mapping: one line a (role, pool group, life cycle), first layer first."""
        lines: dict[str, None] = {}
        roles = self.roles or tuple(_ROLES[:len(layer)] for layer in self.buffers)
        for layer_roles, window in zip(roles, self._windows):
            cycle = self.life_cycles.index(window)
            for role in layer_roles:
                lines.setdefault(f"role={role}, pool_group_id={self.group_of(cycle)}, layer_group_id={cycle}")
        return list(lines)

    def to_json(self) -> dict[str, object]:
        return {"quota_bytes": self.quota, "grain_bytes": self.grain, "grains": self.grains,
                "pool_slot_bytes": list(self.pool_slots), "slots": self.slots, "tokens": self.tokens,
                "allocated_bytes": self.allocated, "source": V2_SOURCE,
                "pool_groups": [{"life_cycle_windows": [self.life_cycles[c] for c in cycles],
                                 "pool_slot_bytes": list(self.group_slot(g)), "ratio": self.ratio[g],
                                 "min_slots": self.min_slots[g], "slots": self.group_slots[g],
                                 "request_slots": self.request_slots[g]}
                                for g, cycles in enumerate(self.groups)]}


def _stale(window: int | None, history: int, block: int) -> int:
    """AttnLifeCycle::getStaleRange's length with no sink blocks: the blocks before (history + 1 - window) // block."""
    return 0 if window is None else max(0, history + 1 - window) // block


def _f32_sum(values: Iterable[float]) -> float:
    """std::accumulate over floats from 0.0f: every partial sum a float."""
    total = 0.0
    for value in values:
        total = f32(total + value)
    return total


def v2_unsized(kv: KVCache) -> str | None:
    """Why this cache's V2 pool is not sized here, or None when it is one gptcalc sizes."""
    if any(kind.kind not in (*_PLAIN, DSA) or kind.ratio != 1 for kind in kv.layers) or kv.states:
        return "for this cache's layer kinds"
    return None


def derived_windows(kv: KVCache, overlap: bool = True) -> bool:
    """Whether V2 gets windows of its own for this cache: _derive_layer_type_attention_windows (_util.py at
    0004396720) hands it one only where the layers' windows, each clamped to max_seq_len (--seq + 1, engine_seq),
    leave at least two sizes (uses_vswa_kv_cache_layout), so a model whose every layer slides (Mistral-7B, Phi-3)
    keeps max_attention_window unset, which _clamp_max_attention_window_vec (resource_manager.py) makes
    [max_seq_len]: one full-attention life cycle, every layer cached for the whole context as in V1."""
    seq = engine_seq(kv.seq, overlap)
    return len({min(kind.window or seq, seq) for kind in kv.layers}) > 1


def v2_pool(kv: KVCache, budget: int, block: int, ranks: int, overlap: bool = True,
            whole: KVCache | None = None) -> V2Pool:
    """The pools KVCacheManagerV2 builds from `budget` bytes for a cache v2_unsized sizes: a window shorter than
    max_seq_len (--seq + 1: a window of --seq too) stays the layer's own (_derive_layer_type_attention_windows), a
    longer one is clamped to full
    (_resolve_v2_max_attention_window_vec). Layers come kind by kind, the kinds in the order of their first layer,
    which numbers the life cycles and orders the role lines as TensorRT-LLM's layer order does. A DSA layer's
    indexer keys are a third role of that layer, INDEX_KEY (DSACacheManagerV2, calc.analysis.memory.trtllm_dsa).
    Under pipeline parallelism `kv` is one rank's layers: whether windows are derived is the `whole` model's question
    (_derive_layer_type_attention_windows reads every layer, _resolve_v2_max_attention_window_vec then projects the
    windows onto the rank's; calc.analysis.memory.trtllm_v2_pp)."""
    fmt = kv.format
    keys = index_key_buffers(kv, block)
    derived = derived_windows(whole or kv, overlap)
    layers = []
    for kind in kv.layers:
        if kind.kind == DSA:
            continue
        own = tuple(fmt.row_bytes(width) * block for width in ((kind.k, kind.v) if kind.v else (kind.k,)))
        roles = _ROLES[:len(own)] + ((INDEX_KEY,) if kind.block in keys else ())
        window = own_window(kind, kv.seq, overlap) if derived else None
        layers += [(own + keys.get(kind.block, ()), roles, window)] * kind.n_layers
    return V2Pool(budget, tuple(b for b, _, _ in layers), block, ranks, tuple(w for _, _, w in layers), kv.seq,
                  tuple(r for _, r, _ in layers), DSA_MANAGER if keys else V2Pool.manager, overlap)
