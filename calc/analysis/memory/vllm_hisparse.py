"""vLLM's HiSparse: a DSA model's MLA latents kept in a pinned host pool, the GPU holding the indexer keys, a few
resident pages of latents per request and a hot buffer of the rows its top-k reads (vLLM 0.32,
v1/hisparse/layout.py; turned on by a HiSparseConnector with its host_pool_gib, `--kv-transfer-config
'{"kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": N}}'`, which sets
attention_config.hisparse_config, config/vllm.py:1800-1806).

get_hisparse_kv_cache_groups / _lay_out_hisparse_groups split a DSA model's one group of latents and keys into:

- the host source group: every layer's latent page (UniformTypeKVCacheSpecs), host_resident;
- the indexer group: every layer's key page, on the GPU;
- hot units, one per layer whose attention has its own indexer (is_index_group_leader), packed greedily into
  groups of as many units as the indexer page holds (at least one); each group is a HiSparseResidentSpec
  group and a HiSparseHotSpec group of those layers, whose page is one layer's latent page.

get_hisparse_kv_cache_config sizes the two pools apart:

    GPU block   = round_up(max(indexer page, widest resident group), latent page)   (_get_kv_cache_bytes_per_block:
                  the hot groups' page is an alignment)
    GPU blocks  = floor(pool / GPU block)
    host blocks = floor(int(host_pool_gib x 2^30) / host stride), stride = layers x latent page, rounded up
                  to 4,096 B (the OS page, SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT) where tensor-parallel ranks
                  share one host pool (v1/hisparse/runtime.py use_shared_hisparse_host_pool: CUDA, tp > 1,
                  pp 1, the mp executor); at least ceil(max_model_len / block) + 2 or vLLM refuses to start

and a request of max_model_len takes, per group (max_memory_usage_bytes / page):

    indexer: ceil(L / block); each resident group: ceil(min(in flight, L) / block)
    (HiSparseResidentSpec.max_admission_blocks_per_request); each hot group: ceil(device buffer / block),
    the buffer's rows (attention_config.hisparse_config.device_buffer_size, by default (1 + 1) x index_topk
    without speculative decoding: ResolvedHiSparseConfig.from_vllm_config, v1/hisparse/runtime.py:99-162);
    host: ceil(L / block)

vLLM prints "GPU + host KV cache size: {int(c x L):,} tokens, Maximum concurrency ...: {c:.2f}x" with c the
smaller of GPU blocks / GPU blocks a request and host blocks / host blocks a request (kv_cache_utils.py
get_max_concurrency_for_kv_cache_config, update_kv_cache_capacity), and HiSparseConnector its steady state,
where a running request pins only ACTIVE_TAIL_PAGES (2) of each resident group:
1 + (GPU blocks - admission) / steady, or GPU blocks / admission below one admission, capped by the host
(layout.py get_hisparse_steady_state_concurrency).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calc.errors import GptcalcError

__all__ = ["HiSparse", "HiSparseOptions", "index_topk"]

# SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT, mmap.PAGESIZE (v1/kv_offload/cpu/shared_offload_region.py:87)
HOST_ALIGNMENT = 4096
ACTIVE_TAIL_PAGES = 2  # v1/hisparse/types.py:8
MAX_DEVICE_BUFFER = 32768  # torch.iinfo(torch.int16).max + 1: the slot index is int16 (runtime.py:138-145)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def index_topk(spec: Any) -> int | None:
    """The keys a DSA layer's attention reads per query (the config's index_topk), as its mixer's indexer states it;
    None for a model without one."""
    tops = {mixer.indexer.topk for block in spec.blocks.values()
            if (mixer := block.attention) is not None and getattr(mixer, "indexer", None) is not None}
    return tops.pop() if len(tops) == 1 else None


@dataclass(frozen=True)
class HiSparseOptions:
    """What turns HiSparse on and sizes it: the host pool (host_pool_gib, in bytes here), the hot buffer's rows
    (None: vLLM's default, two top-k's) and the model's index_topk (index_topk)."""

    host_bytes: int
    device_buffer: int | None = None
    topk: int | None = None

    @property
    def rows(self) -> int:
        """The hot buffer's rows, checked as ResolvedHiSparseConfig.from_vllm_config checks them."""
        topk = self.topk
        if topk is None:
            raise GptcalcError("HiSparse is only supported for DSA models with index_topk (vLLM's own refusal, "
                               "config/vllm.py:1831-1836)")
        rows = 2 * topk if self.device_buffer is None else self.device_buffer
        if rows < topk:
            raise GptcalcError(f"--hisparse-device-buffer {rows}: HiSparse device_buffer_size must cover every decode "
                               f"query's index_topk rows ({topk:,})")
        if rows > MAX_DEVICE_BUFFER:
            raise GptcalcError(f"--hisparse-device-buffer {rows}: HiSparse device_buffer_size exceeds the int16 "
                               f"slot-index limit of {MAX_DEVICE_BUFFER:,}")
        return rows


@dataclass(frozen=True)
class HiSparse:
    """vLLM's HiSparse groups for `layers` sparse MLA layers, each with its own indexer. It answers as HybridGroups
    does (a GPU block of `page` bytes), and adds the host pool's limit."""

    layers: int
    latent_page: int  # one layer's latent, `block` tokens
    key_page: int  # one layer's indexer keys, `block` tokens
    block: int
    host_bytes: int
    device_buffer: int
    in_flight: int
    shared_host: bool  # tensor-parallel ranks share one host pool (tp > 1)
    group_size: int = 1  # the GPU block already spans every group

    @property
    def indexer_page(self) -> int:
        return self.layers * self.key_page

    @property
    def hot_layers(self) -> int:
        """Layers a resident (and hot) group holds: as many latent pages as the indexer page holds, at least one."""
        return max(1, self.indexer_page // self.latent_page)

    @property
    def hot_groups(self) -> int:
        return _cdiv(self.layers, self.hot_layers)

    @property
    def groups(self) -> int:
        """The GPU's groups: the indexer's, and a resident and a hot group per unit of layers."""
        return 1 + 2 * self.hot_groups

    @property
    def page(self) -> int:
        """One GPU block over every group, rounded up to whole latent pages (the hot groups' alignment)."""
        widest = max(self.indexer_page, self.hot_layers * self.latent_page)
        return _cdiv(widest, self.latent_page) * self.latent_page

    @property
    def host_stride(self) -> int:
        raw = self.layers * self.latent_page
        return _cdiv(raw, HOST_ALIGNMENT) * HOST_ALIGNMENT if self.shared_host else raw

    def host_blocks(self, max_model_len: int) -> int:
        """Host blocks, refused as vLLM refuses them where one request of max_model_len would not fit."""
        blocks = self.host_bytes // self.host_stride
        if blocks <= 0:  # vLLM's refusals of a zero pool (config/kv_transfer.py:45-46) and of no whole block
            raise GptcalcError(f"--hisparse-host-pool: HiSparse has no allocatable host blocks (one is "
                               f"{self.host_stride:,} B; v1/hisparse/layout.py:245-246)")
        need = _cdiv(max_model_len, self.block) + 2
        if blocks < need:
            raise GptcalcError(f"--hisparse-host-pool: HiSparse host pool has {blocks:,} blocks but max_model_len "
                               f"needs {need:,}; increase host_pool_gib (vLLM's refusal, v1/hisparse/layout.py:250-255)")
        return blocks

    def _resident(self, max_model_len: int) -> int:
        return _cdiv(min(self.in_flight, max_model_len), self.block)

    def blocks_per_request(self, max_model_len: int, block: int) -> int:
        """GPU blocks one request of max_model_len takes to be admitted (`block`, HybridGroups' argument, is ours)."""
        del block
        return (_cdiv(max_model_len, self.block)
                + self.hot_groups * (self._resident(max_model_len) + _cdiv(self.device_buffer, self.block)))

    def max_concurrency(self, blocks: int, max_model_len: int) -> float:
        """Requests of max_model_len: the smaller of the GPU's and the host's."""
        host = self.host_blocks(max_model_len) / _cdiv(max_model_len, self.block)
        return min(blocks / self.blocks_per_request(max_model_len, self.block), host)

    def requests(self, blocks: int, max_model_len: int) -> int:
        """Whole requests of max_model_len both pools hold."""
        return min(blocks // self.blocks_per_request(max_model_len, self.block),
                   self.host_blocks(max_model_len) // _cdiv(max_model_len, self.block))

    def steady_concurrency(self, blocks: int, max_model_len: int) -> float:
        """HiSparseConnector's steady state: running requests pin ACTIVE_TAIL_PAGES of each resident group."""
        admission = self.blocks_per_request(max_model_len, self.block)
        resident = self._resident(max_model_len)
        steady = admission - self.hot_groups * (resident - min(resident, ACTIVE_TAIL_PAGES))
        gpu = blocks / admission if blocks < admission else 1 + (blocks - admission) / steady
        return min(gpu, self.host_blocks(max_model_len) / _cdiv(max_model_len, self.block))

    def lines(self, blocks: int, max_model_len: int) -> list[str]:
        """The lines vLLM prints beside "Available KV cache memory" (layout.py:358-366, kv_cache_utils.py:2316-2334,
        HiSparseConnector.__init__): the host pool is every layer's latent page a block, unpadded."""
        host = self.host_blocks(max_model_len)
        concurrency = self.max_concurrency(blocks, max_model_len)
        return [f"HiSparse HMA: {host * self.layers * self.latent_page / 2**30:.1f} GiB host source ({host} blocks), "
                f"{blocks * self.page / 2**30:.1f} GiB shared GPU indexer/resident/hot pool ({blocks} blocks).",
                f"GPU + host KV cache size: {int(concurrency * max_model_len):,} tokens, Maximum concurrency for "
                f"{max_model_len:,} tokens per request: {concurrency:.2f}x",
                f"HiSparse steady-state maximum concurrency for {max_model_len:,} tokens per request: "
                f"{self.steady_concurrency(blocks, max_model_len):.2f}x (running requests reading from host)."]

    def to_json(self) -> dict[str, object]:
        return {"hisparse": True, "layers": self.layers, "latent_page_bytes": self.latent_page,
                "indexer_page_bytes": self.indexer_page, "block_bytes": self.page, "block_size": self.block,
                "layers_per_resident_group": self.hot_layers, "resident_groups": self.hot_groups,
                "hot_groups": self.hot_groups, "device_buffer_rows": self.device_buffer,
                "tokens_in_flight": self.in_flight, "host_pool_bytes": self.host_bytes,
                "host_block_stride": self.host_stride}
