"""What an inference server will say at start-up about its KV cache, given the memory it set aside.

Each engine carves its KV pool into fixed-size pages and reports the tokens they hold:

    vLLM      blocks = floor(kv_memory / (block_size x bytes per token)),  concurrency = blocks /
              ceil(max_model_len / block_size); v0.32 prints "GPU KV cache size: {int(concurrency x
              max_model_len):,} tokens, Maximum concurrency for {max_model_len:,} tokens per request:
              {concurrency:.2f}x" (up to v0.10: blocks x block_size tokens, on two lines); block_size the
              attention backend's on the --budget GPU (16; MLA 32 on SM10x, 64 with an fp8 cache on SM90:
              calc.analysis.memory.vllm_backends), --block-size, 128 on CPU
    SGLang    tokens = floor(kv_memory / bytes per token)                   (page size 1 by default)
              "KV Cache is allocated. #tokens: {tokens}, K size: {K / 2^30:.2f} GB, V size: ..."
              (pages of 64 for DSA, of 128 for MiniMax-M3 with its index keys in the cell; DeepSeek-V4's
              six pools from one cost per token: calc.analysis.memory.sglang_dsv4)
    TRT-LLM   blocks = floor(kv_memory / (tokens_per_block x bytes per token)), tokens_per_block 32
              "Number of tokens per block: 32." and "[MemUsageChange] Allocated {blocks x block bytes /
              2^30:.2f} GiB for max tokens in paged KV cache ({blocks x 32})." (cpp/tensorrt_llm/
              batch_manager/kvCacheManager.cpp, KVCacheManager::allocatePools): its V1 manager's; where the
              model class's default is KVCacheManagerV2 (calc.analysis.memory.trtllm_manager), that manager's
              slots of whole memory grains and its quota lines (calc.analysis.memory.trtllm_v2)
    llama.cpp allocates n_ctx cells (-c), padded up to a multiple of 256, a second cache for sliding-window
              layers and a recurrent-state buffer: calc.analysis.memory.llamacpp, which prints its lines

bytes per token is the cache of one token on one GPU (per tensor-parallel shard, all layers the GPU
holds). How much memory the engine gives the pool is what it works out at start-up
(calc/analysis/memory/startup.py), or the figure from your server's log with --kv-memory.

vLLM v1's hybrid allocator (a model with full-attention and sliding-window layers, Gemma-2/3,
gpt-oss, or with Mamba / linear-attention layers, Jamba, Bamba, Qwen3-Next, LFM2) puts the layers
of each kind into groups of `group_size` layers (the fewest layers of any kind, or the most when
that is under 1.5x the fewest), pads the last group of a kind, and shares one pool of pages among
the groups (vllm/v1/core/kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size,
get_kv_cache_config_from_groups, get_max_concurrency_for_kv_cache_config); a model whose every layer has
one window is one sliding-window group. Every layer's page has one size: an attention kind whose page is
smaller than the largest takes ratio x its tokens a page, or is padded where it does not divide it
(Gemma-4's full layers; scaled_block), and a state layer's page (its conv and SSM states of one request, in the model's dtype) is
padded to the attention page, and the attention block is first raised so that one attention page
holds a state page (vllm/platforms/interface.py, _align_hybrid_block_size):

    block     = step x ceil(state page / (step x bytes per token of one layer)), step = block_size, or
                max(block_size, 128) for an MLA model (Kimi-Linear: 1,920, not 1,888)
    page      = block x bytes per token of one layer                (the state page when no attention)
    blocks    = floor(floor(kv_memory / page) / group_size)
    per request: ceil(max_model_len / block) blocks per full group,
                 ceil(min(window - 1 + in flight, max_model_len) / block) + 1 per sliding group,
                 2 per state group of a hybrid (prefix caching's "align" mode; 1 with
                 --no-enable-prefix-caching), 3 for a Mamba2 mixer, 1 attention-free
    concurrency = blocks / (blocks per request)

Llama-4's chunked local attention (its rotary layers, models/llama4.py:251-265) is a kind of its own:
ChunkedLocalAttention states a ChunkedLocalAttentionSpec (layers/attention/chunked_local_attention.py:
119-128), which never merges with full attention (kv_cache_interface.py:266-272), so it gets groups of
its own (kv_cache_utils.py:1427-1477: Scout's 36 chunked and 12 NoPE layers make 3 + 1 groups of 12),
and a request holds the current chunk and the tokens in flight (kv_cache_interface.py:813-837):

                 ceil(min(chunk + in flight, max_model_len) / block) per chunked group (no extra block)

vLLM 0.32 keeps the hybrid manager on for it (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
defaults to 1, envs.py:1940-1941; config/vllm.py:2148-2168 turns it off only with an EAGLE drafter),
else the chunked layers are paged as full attention (kv_cache_utils.py:1690-1760).

where the tokens in flight are (pp + 1) x max_num_batched_tokens with async scheduling, vLLM's default
on a GPU (2 x at pp 1), and pp x without it (--no-async-scheduling, and vLLM's CPU platform):
calc.analysis.memory.vllm_packed.in_flight_tokens. A state group's pages do not depend on it.

With a HiSparse host pool (--hisparse-host-pool), vLLM keeps a DSA model's latents on the host and sizes two
pools: calc.analysis.memory.vllm_hisparse.

SGLang keeps states in a pool of their own (MambaPool): conv states in bf16, SSM states in fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from calc.analysis.memory.kv import KVCache, KVLayers
from calc.analysis.memory.sglang_draft import (SPECULATIVE_MAX_RUNNING, DraftShare, draft_share, refuse_draft_flags,
                                              refuse_unmodelled_draft)
from calc.analysis.memory.sglang_dsv4 import CompressedPools, compressed_pools, staged_pools
from calc.analysis.memory.trtllm_cache import TRTLLM_HYBRID, logged_bytes_per_token, trtllm_bytes_per_token
from calc.analysis.memory.trtllm_sparse import trtllm_v2_sparse_home
from calc.analysis.memory.trtllm_spec import with_mtp_layers
from calc.analysis.memory.trtllm_v2 import V2Pool, v2_pool
from calc.analysis.memory.trtllm_v2_pp import PipelineRanks, V2Stages, v2_stages
from calc.analysis.memory.vllm_backends import BlockChoice, vllm_block
from calc.analysis.memory.vllm_hisparse import HiSparse, HiSparseOptions
from calc.analysis.memory.vllm_packed import BLOCK as COMPRESSED_BLOCK
from calc.analysis.memory.vllm_indexer import (BLOCK_INDEXER, DSA, block_indexer_bytes, indexer_key_bytes, key_dtype,
                                                resolve_indexer_kv_dtype)
from calc.analysis.memory.vllm_packed import (QUANT_BLOCK, PackedGroups, compressed_pages, has_compressed_rows,
                                               in_flight_tokens, packed_groups)
from calc.errors import GptcalcError

if TYPE_CHECKING:  # a rank's budget only passes through: engines stays light (start-up time)
    from calc.analysis.memory.startup import StartupBudget

__all__ = ["Chunked", "ENGINES", "Engine", "HybridGroups", "KVPool", "hybrid_groups", "engine_lines", "kv_pool", "padded_context"]

VLLM = "https://github.com/vllm-project/vllm/blob/main/vllm/v1/core/kv_cache_utils.py (get_num_blocks, page_size_bytes)"
VLLM_HYBRID = ("https://github.com/vllm-project/vllm/blob/001cabc1be16a59a70d720ed61a13b678c060a18/vllm/v1/core/"
               "kv_cache_utils.py (hybrid groups) and vllm/v1/kv_cache_interface.py (SlidingWindowSpec.max_memory_usage_bytes)")
MAX_BATCHED = 2048  # vllm serve's max_num_batched_tokens below 70 GiB or on an A100 (8192 above): EngineArgs.get_batch_defaults
SGLANG = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/mem_cache/memory_pool.py (MHATokenToKVPool)"
TRTLLM = ("https://github.com/NVIDIA/TensorRT-LLM (KvCacheConfig tokens_per_block; cpp/tensorrt_llm/batch_manager/"
          "kvCacheManager.cpp for the lines it prints)")
LLAMACPP = "src/llama-context.cpp (n_ctx padded to 256): calc/analysis/memory/llamacpp.py"


@dataclass(frozen=True)
class Engine:
    name: str
    block: int  # tokens per page: vLLM --block-size, SGLang --page-size, TRT-LLM tokens_per_block
    knob: str  # the option that sets it
    source: str


ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("vllm", 16, "--block-size", VLLM),
    Engine("sglang", 1, "--page-size", SGLANG),
    Engine("trtllm", 32, "tokens_per_block", TRTLLM),
    Engine("llamacpp", 256, "-c (padded to 256 with flash attention, 32 without)", LLAMACPP),
)}


@dataclass(frozen=True)
class KVPool:
    """The pool an engine carves from `kv_memory` bytes: blocks, tokens and requests of max_model_len."""

    engine: Engine
    block: int
    bytes_per_token: int  # one token, one GPU, every layer it holds
    kv_memory: int
    max_model_len: int
    hybrid: HybridGroups | PackedGroups | HiSparse | None = None  # vLLM's groups (full, window, state), packed pages
    mamba: MambaPool | None = None  # SGLang's separate pool of per-request states
    compressed: CompressedPools | None = None  # SGLang's DeepSeek-V4 pools (calc.analysis.memory.sglang_dsv4)
    draft: DraftShare | None = None  # SGLang's draft worker beside the pool (calc.analysis.memory.sglang_draft)
    backend: BlockChoice | None = None  # vLLM's attention backend and its block (calc.analysis.memory.vllm_backends)
    v2: V2Pool | V2Stages | None = None  # TensorRT-LLM's KVCacheManagerV2 slots (trtllm_v2; each pipeline rank's,
    # trtllm_v2_pp), None: V1's

    @property
    def per_rank(self) -> bool:
        """Whether the engine's lines are each pipeline rank's, its start-up budget line among them (trtllm_v2_pp)."""
        return isinstance(self.v2, V2Stages)

    @property
    def rank_budget(self) -> StartupBudget | None:
        """The start-up budget of the pipeline rank whose pool these figures are, where each rank has its own
        (trtllm_v2_pp; None: one budget, or --kv-memory)."""
        return self.v2.binding.startup if isinstance(self.v2, V2Stages) else None

    @property
    def rank_label(self) -> str:
        """' [PP rank 1, layers 40-79]': the rank whose pool these figures are, where each rank has its own."""
        return f" {self.v2.binding.label}" if isinstance(self.v2, V2Stages) else ""

    @property
    def block_bytes(self) -> int:
        if self.v2 is not None:
            return sum(self.v2.pool_slots)
        if self.hybrid is not None:
            return self.hybrid.page * self.hybrid.group_size
        return self.block * self.bytes_per_token

    @property
    def blocks(self) -> int:
        if self.hybrid is not None:  # floor(floor(memory / page) / group_size), as get_num_blocks divides
            return self.kv_memory // self.hybrid.page // self.hybrid.group_size
        if self.compressed is not None:
            return self.compressed.full // self.block
        if self.v2 is not None:
            return self.v2.slots
        if self.block_bytes == 0:  # caches no token: SGLang's pool is the context's slots (zero_kv_tokens)
            return self.max_model_len // self.block
        left = self.kv_memory - (self.mamba.reserved if self.mamba else 0)
        return max(left, 0) // self.block_bytes

    @property
    def tokens(self) -> int:
        """Token slots: blocks x block, per group for a hybrid model (what vLLM up to v0.10 printed)."""
        if isinstance(self.hybrid, (PackedGroups, HiSparse)):  # pages of several token counts: what vLLM prints
            return self.printed_tokens
        if self.compressed is not None:
            return self.compressed.full
        if self.v2 is not None:  # several life cycles: requests of max_seq_len (trtllm_v2.V2Pool.tokens)
            return self.v2.tokens
        if self.hybrid is not None:
            return self.blocks // self.hybrid.groups * self.block
        return self.blocks * self.block

    @property
    def blocks_per_request(self) -> int:
        if self.hybrid is not None:
            return self.hybrid.blocks_per_request(self.max_model_len, self.block)
        return -(-self.max_model_len // self.block)

    @property
    def max_concurrency(self) -> float:
        """Requests of max_model_len the pool holds, as vLLM computes it (get_max_concurrency_for_kv_cache_config:
        blocks / the blocks one request takes in every group); SGLang and TRT-LLM by token slots."""
        if isinstance(self.hybrid, HiSparse):  # the host pool may hold fewer
            return self.hybrid.max_concurrency(self.blocks, self.max_model_len)
        if self.engine.name == "vllm":
            return self.blocks / self.blocks_per_request
        return self.tokens / self.max_model_len

    @property
    def requests(self) -> int:
        """Whole requests of max_model_len the pool holds at once: floor(max_concurrency) in integers,
        and under SGLang no more than its running-request cap (sglang_max_running_requests)."""
        if isinstance(self.hybrid, HiSparse):
            return self.hybrid.requests(self.blocks, self.max_model_len)
        if self.engine.name == "vllm":
            return self.blocks // self.blocks_per_request
        whole = self.tokens // self.max_model_len
        return whole if self.max_running is None else min(whole, self.max_running)

    @property
    def max_running(self) -> int | None:
        """SGLang's running-request cap (sglang_max_running_requests; beside a draft, sglang_draft's); None for
        other engines."""
        if self.engine.name != "sglang":
            return None
        if self.draft is not None or (self.compressed is not None and self.compressed.speculative):
            return min(SPECULATIVE_MAX_RUNNING, self.tokens // 2)
        return sglang_max_running_requests(self.tokens, self.max_model_len, self.mamba)

    @property
    def concurrency(self) -> str:
        """max_concurrency as vLLM prints it (two decimals)."""
        return f"{self.max_concurrency:.2f}"

    @property
    def printed_tokens(self) -> int:
        """vLLM v0.32's "KV cache size": int(max concurrency x max_model_len) (get_kv_cache_capacity)."""
        return int(self.max_concurrency * self.max_model_len) if self.engine.name == "vllm" else self.tokens

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine.name, "block_size": self.block, "bytes_per_token": self.bytes_per_token,
                "block_bytes": self.block_bytes, "kv_memory_bytes": self.kv_memory, "blocks": self.blocks,
                "tokens": self.tokens, "printed_tokens": self.printed_tokens, "max_model_len": self.max_model_len,
                "blocks_per_request": self.blocks_per_request, "max_concurrency": self.concurrency,
                "requests": self.requests, "max_running_requests": self.max_running,
                "hybrid_groups": self.hybrid.to_json() if self.hybrid else None,
                "mamba_pool": self.mamba.to_json() if self.mamba else None,
                "sglang_dsv4_pools": self.compressed.to_json() if self.compressed else None,
                "sglang_draft": self.draft.to_json() if self.draft else None,
                "attention_backend": self.backend.to_json() if self.backend else None,
                **({"trtllm_kv_cache_manager_v2": self.v2.to_json()} if self.v2 else {})}


RUNNING_PER_CONTEXT, MIN_RUNNING, MAX_RUNNING = 512, 2048, 4096  # init_memory_pool's max_num_reqs default


def sglang_max_running_requests(tokens: int, context: int, mamba: MambaPool | None = None) -> int:
    """SGLang's default --max-running-requests (_resolve_max_num_reqs, model_runner_kv_cache_mixin.py at
    sgl-project/sglang@29b719ba, after every pool configurator, DeepSeek-V4's included):
    min(clamp(int(max_total_num_tokens / context_len x 512), 2048, 4096), max_total_num_tokens // 2), and beside a
    Mamba pool no more than max_mamba_cache_size // 3 (MambaPool.requests). It binds on whole requests only where
    the pool holds over 4,096 of them (a short --seq, SGLang's --context-length) or fewer than 4,096 tokens."""
    cap = min(max(tokens * RUNNING_PER_CONTEXT // context, MIN_RUNNING), MAX_RUNNING, tokens // 2)
    return min(cap, mamba.requests) if mamba else cap


MAMBA_SLOTS_PER_REQUEST = 3  # SGLang's MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (mem_cache/kv_cache_configurator.py)


@dataclass(frozen=True)
class MambaPool:
    """SGLang's pool of per-request states beside its token pool, the ratio-based branch with no
    speculative decoding (sgl-project/sglang at 226149ac457b, python/sglang/srt/model_executor/
    model_runner_kv_cache_mixin.py handle_max_mamba_cache; later versions keep it in
    mem_cache/kv_cache_configurator.py _handle_max_mamba_cache): of the memory left after the weights,
    ratio / (1 + ratio) (--mamba-full-memory-ratio, 0.9) goes to states, max_mamba_cache_size =
    floor(that / one slot) requests, the token pool gets the memory less max_mamba_cache_size slots, and
    the pool allocates one slot more (its padding slot). Conv states are bf16 and SSM states fp32 unless the
    model or --mamba-ssm-dtype says otherwise (configs/mamba_utils.py mamba2_state_dtype; sglang_states)."""

    conv_bytes: int  # one request, every state layer on this GPU
    ssm_bytes: int
    memory: int  # the memory the engine splits
    ratio: float = 0.9

    @property
    def per_request(self) -> int:
        return self.conv_bytes + self.ssm_bytes

    @property
    def slots(self) -> int:
        """max_mamba_cache_size: int(rest x ratio / (1 + ratio) // mamba_cache_per_req)."""
        return int(self.memory * self.ratio / (1 + self.ratio) // self.per_request)

    @property
    def requests(self) -> int:
        """The running requests SGLang allows beside it: max_mamba_cache_size // 3, the ratio of state slots to
        requests with radix caching on and the default no_buffer strategy (init_memory_pool at 226149ac:
        MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO 3, plus 1 or 2 only with the extra-buffer strategies)."""
        return self.slots // MAMBA_SLOTS_PER_REQUEST

    @property
    def reserved(self) -> int:
        """What handle_max_mamba_cache takes from the memory before the token pool is sized."""
        return self.slots * self.per_request

    @property
    def bytes(self) -> int:
        return (self.slots + 1) * self.per_request

    def to_json(self) -> dict[str, object]:
        return {"max_mamba_cache_size": self.slots, "conv_bytes_per_request": self.conv_bytes,
                "ssm_bytes_per_request": self.ssm_bytes, "bytes": self.bytes, "mamba_full_memory_ratio": self.ratio}


# SGLang serves attention-free models: Mamba2ForCausalLM (Codestral-Mamba; sgl-project/sglang at 62daa562fb1a,
# python/sglang/srt/models/mamba2.py), MambaForCausalLM and FalconMambaForCausalLM (configs/mamba.py at 583dfd9eb40c:
# full_attention_layer_ids = []). Their cell size is 0, and DefaultPoolConfigurator.calculate_pool_sizes then
# sizes the token pool at --max-total-tokens or the context length instead of dividing by it
# (_zero_kv_max_tokens; python/sglang/srt/.../pool_configurator.py in the version whose configurators take
# a KVCacheConfigurator): those slots cost nothing, and the states' pool is carved as for a hybrid.


def sglang_mamba_pool(kv: KVCache, memory: int, ssm_bytes: int = 4) -> MambaPool | None:
    """The states' pool SGLang carves first from `memory` (None without states); `ssm_bytes`: one SSM state
    element (sglang_states.SSM_BYTES of the dtype SGLang resolves)."""
    if not kv.states:
        return None
    conv = sum(s.n_layers * s.elements * 2 for s in kv.states if s.name == "conv")
    ssm = sum(s.n_layers * s.elements * ssm_bytes for s in kv.states if s.name != "conv")
    return MambaPool(conv, ssm, memory)


def kv_pool(kv: KVCache, engine: str, kv_memory: int, max_model_len: int, block: int | None = None,
            max_batched: int = MAX_BATCHED, ssm_bytes: int = 2, pp: int = 1,
            capability: tuple[int, int] | None = None, async_scheduling: bool = True,
            indexer_kv_dtype: str = "auto", prefix_caching: bool = True, speculative_steps: int = 0,
            sglang_ssm_bytes: int = 4, draft_layers: int | None = None,
            sglang_stages: tuple[tuple[KVCache, int], ...] = (), hisparse: HiSparseOptions | None = None,
            trtllm_v2: bool = False, ranks: int = 1, trtllm_overlap: bool = True,
            trtllm_ranks: PipelineRanks | None = None) -> KVPool:
    """The pool `engine` builds from `kv_memory` bytes for this cache layout (one GPU's share);
    `ssm_bytes`: vLLM's SSM state element (the model's 16 bits; 4 where --mamba-ssm-cache-dtype
    float32, as vLLM's CPU platform sets it for its accelerated kernels); `pp`: pipeline stages;
    `capability`: the card's CUDA compute capability (None: unknown); `async_scheduling`: vLLM's, on
    by default on a GPU and off on its CPU platform (in_flight_tokens); `indexer_kv_dtype`: vLLM's, how
    a sparse-attention indexer keeps its keys (calc.analysis.memory.vllm_indexer); `prefix_caching`: vLLM's,
    on by default, which sets the pages a state group holds per request (state_pages); `speculative_steps`:
    SGLang's --speculative-num-steps (0: none): the draft worker's share of its pool (sglang_dsv4 for DeepSeek-V4,
    sglang_draft for the others), `draft_layers` the draft's layers (None: the model's MTP layers);
    `sglang_ssm_bytes`: one element of SGLang's SSM states (sglang_states.sglang_ssm_dtype); `sglang_stages`: under
    --pp, each SGLang stage's cache and pool bytes, which its DeepSeek-V4 pools are sized from (sglang_dsv4);
    `hisparse`: vLLM's HiSparse host pool and hot buffer (calc.analysis.memory.vllm_hisparse), None: off;
    `trtllm_v2`: TensorRT-LLM's pool is KVCacheManagerV2's, its quota synced over `ranks` ranks
    (calc.analysis.memory.trtllm_v2; the caller checks that it is one it sizes), else V1's; `trtllm_overlap`: its
    overlap scheduler runs (not disable_overlap_scheduler), so V2's max_seq_len is --seq + 1 (trtllm_v2.engine_seq);
    `trtllm_ranks`: under --pp, each rank's layers and budget, whose V2 pools are each rank's (trtllm_v2_pp) and the
    figures here the rank's that holds the fewest tokens."""
    if engine not in ENGINES:
        raise GptcalcError(f"--engine {engine!r}: unknown (choose from {', '.join(ENGINES)})")
    found = ENGINES[engine]
    _refuse_unmodelled(kv, engine)
    if kv_memory < 0:
        raise GptcalcError(f"--kv-memory: must not be negative, got {kv_memory}")
    indexer_dtype = (sglang_index_dtype(kv, capability) if engine == "sglang" and has_block_indexer(kv)
                     else resolve_indexer_kv_dtype(kv, engine, indexer_kv_dtype, capability))
    refuse_draft_flags(engine, speculative_steps, draft_layers)
    if speculative_steps and engine == "trtllm":  # its MTP layer joins the target's manager (trtllm_spec)
        kv, speculative_steps = with_mtp_layers(kv, draft_layers, pp), 0
    if speculative_steps:
        refuse_unmodelled_draft(kv, draft_layers)
    if hisparse is not None:
        return _hisparse_pool(kv, found, kv_memory, max_model_len, _block(kv, found, block, capability),
                              in_flight_tokens(max_batched, pp, async_scheduling), pp, indexer_dtype, hisparse)
    if engine == "vllm" and has_compressed_rows(kv):
        return _compressed_pool(kv, found, kv_memory, max_model_len, block, in_flight_tokens(max_batched, pp,
                                async_scheduling), pp, capability, indexer_dtype)
    if engine == "sglang" and has_compressed_rows(kv):
        pools = (staged_pools(list(sglang_stages), block, speculative_steps > 0) if sglang_stages else
                 compressed_pools(kv, kv_memory, block, pp, speculative=speculative_steps > 0))
        return KVPool(found, pools.page, math.ceil(pools.bytes_per_full_token), pools.kv_memory, max_model_len,
                      compressed=pools)
    backend = _vllm_choice(kv, found, block, capability) if engine == "vllm" else None
    block = backend.block if backend else _block(kv, found, block, capability)
    hybrid = (hybrid_groups(kv, block, in_flight_tokens(max_batched, pp, async_scheduling), ssm_bytes, prefix_caching)
              if engine == "vllm" else None)
    if hybrid is not None:
        block = hybrid.block
    mamba = sglang_mamba_pool(kv, kv_memory, sglang_ssm_bytes) if engine == "sglang" else None
    per_token = (engine_bytes_per_token(kv, indexer_dtype) if engine in ("vllm", "sglang") else
                 trtllm_bytes_per_token(kv) if engine == "trtllm" else kv.bytes_per_token)
    draft = draft_share(kv, per_token, draft_layers, pp) if speculative_steps else None
    if engine == "trtllm" and trtllm_v2 and trtllm_ranks is not None:
        staged = v2_stages(trtllm_ranks, block, ranks, trtllm_overlap)
        return KVPool(found, block, trtllm_bytes_per_token(staged.binding.kv), staged.binding.kv_memory, max_model_len,
                      v2=staged)
    v2 = v2_pool(kv, kv_memory, block, ranks, trtllm_overlap) if engine == "trtllm" and trtllm_v2 else None
    return KVPool(found, block, draft.priced if draft else per_token, kv_memory, max_model_len, hybrid, mamba,
                  draft=draft, backend=backend, v2=v2)


def _vllm_choice(kv: KVCache, found: Engine, block: int | None, capability: tuple[int, int] | None) -> BlockChoice:
    """vLLM's backend and block: the card's (vllm_backends), or for a sparse model the backends that set it
    themselves: DSA's sparse MLA with DeepSeek-V3.2's indexer, whose kernel block is 64 (DEEPSEEK_V32_INDEXER,
    v1/attention/backends/mla/indexer.py:284-285), or MiniMax-M3's sparse attention and indexer (_block)."""
    kinds = {kind.kind for kind in kv.layers}
    if not kinds & {DSA, BLOCK_INDEXER}:
        return vllm_block(kv, capability, block)
    given, block, dsa = block is not None, _block(kv, found, block, capability), DSA in kinds
    name = "sparse MLA + DEEPSEEK_V32_INDEXER" if dsa else "MiniMax-M3's sparse GQA + indexer"
    why = "--block-size" if given else ("the indexer's kernel block (mla/indexer.py:284-285)" if dsa else
                                        "their one block (minimax_m3/common/sparse_attention.py:163-165)")
    return BlockChoice(block, name, why, given, single=False)


def _block(kv: KVCache, found: Engine, block: int | None, capability: tuple[int, int] | None = None) -> int:
    """Tokens a page: the one the model's sparse backends take (DSA's 64 by default, MiniMax-M3's 128:
    vLLM's only; SGLang's default on Hopper and datacenter Blackwell, where its fa3, fa4 and trtllm_mha
    backends take them, and its page of 1 on other CUDA cards, where model_overrides/minimax_m3.py at
    1ee3fb2aa1ca sets none), else --block-size or the engine's default."""
    kinds = {kind.kind for kind in kv.layers}
    if BLOCK_INDEXER in kinds and found.name == "vllm":
        if block not in (None, BLOCK_INDEXER_PAGE):
            raise GptcalcError(f"--block-size {block}: vLLM's MiniMax-M3 backends (its sparse attention and its "
                               f"indexer) take {BLOCK_INDEXER_PAGE} only")
        return BLOCK_INDEXER_PAGE
    if BLOCK_INDEXER in kinds and found.name == "sglang":
        return block or (found.block if capability is not None and capability[0] not in (9, 10) else BLOCK_INDEXER_PAGE)
    return block or (DSA_PAGE if found.name in ("vllm", "sglang") and DSA in kinds else found.block)


def _compressed_pool(kv: KVCache, found: Engine, kv_memory: int, max_model_len: int, block: int | None,
                     in_flight: int, pp: int, capability: tuple[int, int] | None, indexer_dtype: str) -> KVPool:
    """vLLM's pool of a model with compressed rows: every part paged apart, packed in one block
    (calc.analysis.memory.vllm_packed); its backends take --block-size 256 only. Under pipeline
    parallelism vLLM groups the whole model's layers and then keeps each stage's share of every
    group (kv_cache_utils.py _project_kv_cache_groups_to_worker), and on SM12x cards it picks
    FlashInfer's SM120 backend (models/deepseek_v4/nvidia/model.py:1042-1043): neither is modelled."""
    if capability is not None and capability[0] == 12:
        raise GptcalcError(f"--engine vllm: on an SM{capability[0]}{capability[1]} card vLLM serves {kv.model} with "
                           "FlashInfer's SM120 backend, whose pages are not modelled (FlashMLA's, on every other "
                           "CUDA card, are)")
    if pp > 1:
        raise GptcalcError(f"--pp {pp} with --engine vllm: vLLM groups {kv.model}'s pages over the whole model, then "
                           "per stage; that split is not modelled yet (give --tp alone)")
    if block not in (None, COMPRESSED_BLOCK):
        raise GptcalcError(f"--block-size {block}: vLLM's DeepSeek-V4 backends (FlashMLA sparse, the indexer) take "
                           f"{COMPRESSED_BLOCK} only")
    packed = packed_groups(compressed_pages(kv, indexer_dtype), in_flight)
    return KVPool(found, COMPRESSED_BLOCK, packed.bytes_per_token, kv_memory, max_model_len, packed)


def _hisparse_pool(kv: KVCache, found: Engine, kv_memory: int, max_model_len: int, block: int, in_flight: int,
                   pp: int, indexer_dtype: str, options: HiSparseOptions) -> KVPool:
    """vLLM's pools under HiSparse (calc.analysis.memory.vllm_hisparse): a DSA model's latents on the host, its
    indexer keys and resident and hot latent pages on the GPU. Layers that reuse another layer's selection (GLM-5's
    shared indexers) join that layer's hot unit in layer order, which the counts here do not keep: not modelled."""
    if found.name != "vllm":
        raise GptcalcError("--hisparse-host-pool is vLLM's (its HiSparseConnector's host_pool_gib): give --engine vllm")
    if pp > 1:
        raise GptcalcError(f"--pp {pp}: HiSparse does not support pipeline parallelism (vLLM's refusal, "
                           "config/vllm.py:1810-1811)")
    if not any(kind.kind == DSA for kind in kv.layers):
        raise GptcalcError(f"--hisparse-host-pool: HiSparse is only supported for DSA models with index_topk; "
                           f"{kv.model} has no DSA layers")
    layers = {kind: sum(k.n_layers for k in kv.layers if k.kind == kind) for kind in ("MLA", DSA)}
    rows = {kind: {dsa_row_bytes(k, kv, indexer_dtype) for k in kv.layers if k.kind == kind} for kind in layers}
    if sum(layers.values()) != sum(k.n_layers for k in kv.layers) or kv.states or len(rows["MLA"]) != 1:
        raise GptcalcError(f"--hisparse-host-pool: {kv.model} has layers beside its DSA layers, whose HiSparse "
                           "groups are not modelled")
    if layers["MLA"] != layers[DSA]:
        raise GptcalcError(f"--hisparse-host-pool: {kv.model}'s layers share indexers, whose HiSparse hot groups "
                           "follow the layer order: not modelled")
    groups = HiSparse(layers["MLA"], block * rows["MLA"].pop(), block * rows[DSA].pop(), block, options.host_bytes,
                      options.rows, in_flight, shared_host=kv.tp > 1)
    return KVPool(found, block, groups.indexer_page // block, kv_memory, max_model_len, groups)


STATE = "state"  # a group of Mamba / linear-attention layers


@dataclass(frozen=True)
class Chunked:
    """A group of chunked local attention layers (ChunkedLocalAttentionSpec): `size` tokens a chunk."""

    size: int

    def pages(self, max_model_len: int, in_flight: int, block: int) -> int:
        """The chunk and the tokens in flight, frees counted by tokens processed (max_admission_blocks_per_request)."""
        return -(-min(self.size + in_flight, max_model_len) // block)

    def to_json(self) -> dict[str, int]:
        return {"chunk": self.size}


def state_pages(kv: KVCache, prefix_caching: bool = True) -> int:
    """Pages a state group takes per request. vLLM turns prefix caching on by default for a hybrid
    model and off for an attention-free one (ModelConfig.is_prefix_caching_supported); with it comes
    mamba_cache_mode "align" (MambaModelConfig.verify_and_update_config), where a request holds
    2 + speculative + prefill-checkpoint pages, without it (--no-enable-prefix-caching) 1
    (MambaSpec.max_memory_usage_bytes, v1/kv_cache_interface.py:1076-1082). Mamba2 mixers keep one
    prefill checkpoint (MambaMixer2.get_kv_cache_spec)."""
    if not kv.layers or not prefix_caching:
        return 1
    return 2 + any(state.mixer == "mamba2" for state in kv.states)


@dataclass(frozen=True)
class HybridGroups:
    """vLLM's KV cache groups for a model with several kinds of layer: full attention, sliding
    windows, chunked local attention, and Mamba / linear-attention states, every layer's page of one size."""

    group_size: int  # layers per group (padding included)
    windows: tuple[int | str | Chunked | None, ...]  # per group: its window, None for full attention, STATE, a chunk
    page: int  # bytes of one layer's page
    block: int  # tokens per attention page (raised so a state fits one page)
    in_flight: int  # the tokens a sliding group holds beyond its window (in_flight_tokens)
    state_page: int = 0  # a state layer's bytes before padding to `page`
    state_pages: int = 1  # pages a state group takes per request (state_pages)
    scaled: tuple[tuple[int | Chunked | None, int], ...] = ()  # (kind, its tokens a page) where not `block`

    @property
    def groups(self) -> int:
        return len(self.windows)

    def blocks_per_request(self, max_model_len: int, default: int) -> int:
        """The pages one request of max_model_len takes across the groups: every block of a full
        group, the window's blocks plus one of a sliding group, state_pages of a state group, the chunk's
        blocks of a chunked group, each in its own tokens a page (`scaled`)."""
        def one(window: int | str | Chunked | None) -> int:
            if window == STATE:
                return self.state_pages
            block = dict(self.scaled).get(window, default)
            if isinstance(window, Chunked):
                return window.pages(max_model_len, self.in_flight, block)
            if window is None:
                return -(-max_model_len // block)
            return -(-min(int(window) - 1 + self.in_flight, max_model_len) // block) + 1
        return sum(one(window) for window in self.windows)

    def to_json(self) -> dict[str, object]:
        return {"group_size": self.group_size, "groups": self.groups,
                "windows": [w.to_json() if isinstance(w, Chunked) else w for w in self.windows],
                "page_bytes": self.page, "block_size": self.block, "state_page_bytes": self.state_page,
                "state_pages_per_request": self.state_pages,
                "tokens_in_flight": self.in_flight,
                "scaled_block_sizes": [[w.to_json() if isinstance(w, Chunked) else w, b] for w, b in self.scaled]}


def vllm_state_page(kv: KVCache, ssm_bytes: int = 2) -> int:
    """One state layer's page: its conv and recurrent states per sequence, the conv state in the
    model's dtype and the SSM state in `ssm_bytes` (vLLM's MambaStateDtypeCalculator keeps it in the
    conv state's dtype unless --mamba-ssm-cache-dtype says otherwise), or in fp32 where the model
    keeps it so (vLLM's NemotronHForCausalLMConfig defaults Nemotron-H's to float32)."""
    per_block: dict[str, int] = {}
    for state in kv.states:
        size = state.elements * (2 if state.name == "conv" else 4 if state.dtype == "fp32" else ssm_bytes)
        per_block[state.block] = per_block.get(state.block, 0) + size
    return max(per_block.values(), default=0)


# vLLM rounds an MLA hybrid's attention block to a multiple of 128 tokens: its TRTLLM and FlashInfer MLA decode
# kernels need the kernel blocks' count aligned to 128 / kernel block (vllm/platforms/interface.py:1072-1077).
MLA_HYBRID_ALIGNMENT = 128


def aligned_block(block: int, attention_token: int, state_page: int, mla: bool = False) -> int:
    """vLLM raises the attention block so one attention page holds a state page
    (Platform._align_hybrid_block_size, vllm/platforms/interface.py:1060-1094): in steps of the block,
    or of max(block, 128) under MLA (Kimi-Linear), never below the block it had."""
    step = max(block, MLA_HYBRID_ALIGNMENT) if mla else block
    return max(block, step * -(-state_page // (step * attention_token)))


def hybrid_groups(kv: KVCache, block: int, in_flight: int, ssm_bytes: int = 2,
                  prefix_caching: bool = True) -> HybridGroups | None:
    """vLLM's grouping when the layers are of more than one kind, or of one kind with a window (None: full
    attention alone, one group of whole-context pages); `in_flight`: the tokens a sliding group holds beyond
    its window (in_flight_tokens). A model whose every layer has one window (Mistral-7B-v0.1) is one group of
    SlidingWindowSpec layers: vLLM sets the model-wide window when no layer_types says otherwise
    (engine/arg_utils.py:2248-2254), each layer states a SlidingWindowSpec
    (model_executor/layers/attention/attention.py:619-665), and the uniform group's concurrency is its
    window's blocks per request (v1/core/kv_cache_utils.py:1195-1228, kv_cache_interface.py:859-884)."""
    counts: dict[int | str | Chunked | None, int] = {}
    for kind in kv.layers:
        key = Chunked(kind.chunk) if kind.chunk else kind.window
        counts[key] = counts.get(key, 0) + kind.n_layers
    state_layers = {state.block: state.n_layers for state in kv.states}
    if state_layers:
        counts[STATE] = sum(state_layers.values())
    if set(counts) <= {None} and not state_layers:
        return None
    if any(kind.kind == DSA for kind in kv.layers) and len(counts) > 1:
        raise GptcalcError(f"{kv.model}: DSA layers beside other kinds; vLLM's grouping of them is not modelled")
    tokens = _kind_tokens(kv)
    if len(set(tokens.values())) > 1 and state_layers:
        raise GptcalcError(f"{kv.model}: attention layers of different page sizes beside state layers; vLLM aligns "
                           "the state page to the config's one num_key_value_heads x head_dim, which gptcalc's "
                           "layers do not name (platforms/interface.py _align_hybrid_block_size): not modelled")
    state_page = vllm_state_page(kv, ssm_bytes)
    scaled: tuple[tuple[int | Chunked | None, int], ...] = ()
    if tokens:
        token = max(tokens.values())
        mla = any(kind.kind == "MLA" for kind in kv.layers)  # vLLM's use_mla is the model's, not a layer's
        block = aligned_block(block, token, state_page, mla) if state_page else block
        page = block * token
        scaled = tuple((key, scaled_block(block, page, t)) for key, t in tokens.items() if t != token)
    else:
        page = state_page
    fewest, most = min(counts.values()), max(counts.values())
    size = most if 2 * most < 3 * fewest else fewest  # most < 1.5 x fewest: pad up to the most
    windows = tuple(window for window, n in counts.items() for _ in range(-(-n // size)))
    return HybridGroups(size, windows, page, block, in_flight, state_page, state_pages(kv, prefix_caching), scaled)


def _kind_tokens(kv: KVCache) -> dict[int | Chunked | None, int]:
    """One layer's bytes a token for each kind of attention layer (full, a window, a chunk); DSA's keys apart."""
    tokens: dict[int | Chunked | None, int] = {}
    for kind in kv.layers:
        if kind.kind == DSA:
            continue
        key = Chunked(kind.chunk) if kind.chunk else kind.window
        if tokens.setdefault(key, kind.row_bytes(kv.format)) != kind.row_bytes(kv.format):
            raise GptcalcError(f"{kv.model}: layers of one kind with different page sizes; vLLM's grouping of them "
                               "is not modelled")
        tokens[key] = kind.row_bytes(kv.format)
    return tokens


def scaled_block(block: int, page: int, token: int) -> int:
    """Tokens a page of a kind whose layer's page (`block` x `token`) is smaller than the largest, `page`: vLLM
    scales its block by the ratio where the page divides the largest, else pads the page and keeps the block
    (unify_kv_cache_spec_page_size, v1/core/kv_cache_utils.py:1292-1359). Gemma-4's full layers (one KV head
    of 512, V kept beside K) take half the bytes of its sliding ones (several heads of 256): twice the tokens."""
    return block * (page // (block * token)) if page % (block * token) == 0 else block


def padded_context(engine: Engine, n_ctx: int) -> int:
    """llama.cpp's cells: n_ctx rounded up to its padding; other engines allocate by the pool."""
    return -(-n_ctx // engine.block) * engine.block if engine.name == "llamacpp" else n_ctx


# The per-token caches whose pages the engine rules below describe (SGLang also pages DSA's keys).
MODELLED = {"MHA", "GQA", "MQA", "MLA"}
# Tokens per page for DeepSeek's DSA: SGLang sets --page-size 64 (arg_groups/model_overrides/deepseek_v2.py);
# vLLM's sparse FlashMLA takes blocks of a multiple of 64 (flashmla_sparse.py get_supported_kernel_block_sizes).
DSA_PAGE = 64
# vLLM 0.32 pages MiniMax-M3 in 128-token blocks, one sparse block a page: its sparse GQA and indexer
# backends take 128 and no other (vllm/models/minimax_m3/common/sparse_attention.py:163-165, indexer.py:94-96),
# so Platform._preferred_block_size_for_backends picks it (platforms/interface.py:700-745).
BLOCK_INDEXER_PAGE = 128
# SGLang pages MiniMax-M3 in 128-token pages too: on Hopper (fa3) and Blackwell (fa4, trtllm_mha) it sets
# --page-size 128 unless given (sgl-project/sglang at 1ee3fb2aa1ca, arg_groups/model_overrides/minimax_m3.py).
SGLANG_M3 = ("https://github.com/sgl-project/sglang/blob/1ee3fb2aa1cae4ae576917b6ac10c0a0e6512298/python/sglang/srt/"
             "arg_groups/model_overrides/minimax_m3.py (page_size 128)")


def has_block_indexer(kv: KVCache) -> bool:
    return any(kind.kind == BLOCK_INDEXER for kind in kv.layers)


def sglang_index_dtype(kv: KVCache, capability: tuple[int, int] | None) -> str:
    """How SGLang keeps MiniMax-M3's index keys: fp8 where its fp8 attention GEMMs run, in the model's dtype
    (bf16) elsewhere. They run with an fp8_e4m3 cache on datacenter Blackwell (SM10x), where SGLang then picks
    trtllm_mha unless --attention-backend says otherwise (arg_groups/model_overrides/minimax_m3.py at
    1ee3fb2aa1ca; server_args.py m3_fp8_attn_gemm_enabled: fp8_e4m3, trtllm_mha, is_sm100); an fp8_e5m2 cache
    keeps them wide ("fmha_sm100's variant lookup would silently dispatch the e4m3 kernel")."""
    if kv.format.name != "fp8_e4m3":
        return "bf16"
    if capability is None:
        raise GptcalcError(f"--engine sglang with an fp8_e4m3 cache: SGLang keeps {kv.model}'s index keys in fp8 on "
                           f"SM10x cards (trtllm_mha's fp8 attention GEMMs) and in bf16 elsewhere ({SGLANG_M3}): give "
                           "--budget with a GPU so its compute capability decides")
    return "fp8" if capability[0] == 10 else "bf16"


def dsa_row_bytes(kind: KVLayers, kv: KVCache, indexer_dtype: str = "auto") -> int:
    """One token of one layer as vLLM and SGLang store it. DeepSeek-V3.2's sparse attention (a model
    with DSA indexer keys) keeps the indexer key as fp8 with its scales, index_head_dim +
    index_head_dim / 128 x 4 bytes (132 for 128), whatever the cache dtype, and with an fp8 cache the
    latent as fp8 with scales and the rotary key in bf16: kv_lora_rank + kv_lora_rank / 128 x 4 +
    rope x 2 bytes (656 for DeepSeek-V3.2). SGLang: mem_cache/kv_cache_configurator.py
    calculate_mla_kv_cache_dim, model_executor/pool_configurator.py _compute_dsa_indexer_cell_size;
    vLLM: the "fp8_ds_mla" layout (v1/attention/backends/mla/flashmla_sparse.py) and
    DeepseekV32IndexerCache (models/deepseek_v2.py), both in one group whose page is the sum of the
    layers' pages (UniformTypeKVCacheSpecs, v1/kv_cache_interface.py)."""
    if kind.kind == DSA:
        return indexer_key_bytes(kind.k, key_dtype(DSA, indexer_dtype))
    if kind.kind == BLOCK_INDEXER:  # bf16 whatever the cache dtype, unless indexer_kv_dtype says fp8
        return block_indexer_bytes(kind.k, key_dtype(BLOCK_INDEXER, indexer_dtype))
    dsa = any(other.kind == DSA for other in kv.layers)
    if dsa and kind.kind == "MLA" and kv.format.name.startswith("fp8"):
        latent = kind.k - kind.rope
        return latent + latent // QUANT_BLOCK * 4 + kind.rope * 2
    return kind.row_bytes(kv.format)


def engine_bytes_per_token(kv: KVCache, indexer_dtype: str = "auto") -> int:
    """One token over every layer this GPU holds, as vLLM and SGLang lay it out (SGLang's cell size); the
    indexer keys in vLLM's `indexer_dtype` ("auto": each model's default)."""
    return sum(kind.n_layers * dsa_row_bytes(kind, kv, indexer_dtype) for kind in kv.layers)


# Where llama.cpp keeps DeepSeek-V4's caches (how it sizes them is not modelled): llama_kv_cache_dsv4
# (ggml-org/llama.cpp#24162, merged); TensorRT-LLM's home is calc.analysis.memory.trtllm_sparse's.
COMPRESSED_HOMES = {
    "llamacpp": "llama.cpp serves it from llama_kv_cache_dsv4 (src/llama-kv-cache-dsv4.cpp: a window cache and CSA and "
                "HCA caches of compressed cells)",
}


def _sglang_allocated(pool: KVPool, kv: KVCache, cell: int) -> str:
    """SGLang's line for a token pool of `cell` bytes a token (the target's, or its draft worker's, whose layers
    each cost a target layer's bytes): K and V apart, or one "KV size" for MLA's latent."""
    target = pool.draft.cell if pool.draft else pool.bytes_per_token
    per_v = sum(kind.n_layers * kv.format.row_bytes(kind.v) for kind in kv.layers if kind.v) * cell // target
    per_k = cell - per_v  # the main K and, for MiniMax-M3, its index keys as the pool keeps them
    rows = pool.tokens + pool.block  # the buffers hold one page more than the pool (its padding slots)
    sizes = (f"K size: {rows * per_k / 2**30:.2f} GB, V size: {rows * per_v / 2**30:.2f} GB" if per_v else
             f"KV size: {rows * cell / 2**30:.2f} GB")  # MLA: one buffer
    return f"KV Cache is allocated. #tokens: {pool.tokens}, {sizes}"


def _refuse_unmodelled(kv: KVCache, engine: str) -> None:
    """Engines page conv and recurrent states, and DSA's indexer keys, their own way: vLLM's state
    pages (hybrid_groups), SGLang's Mamba pool (MambaPool), both engines' DSA layout and MiniMax-M3's
    index keys (dsa_row_bytes), vLLM's pages of compressed rows (vllm_packed) and SGLang's pools of them
    (sglang_dsv4) are modelled; llama.cpp's recurrent-state buffer, TensorRT-LLM's, and the other
    engines' compressed rows are not yet, so such a model gets no engine line there rather than a wrong one.
    TensorRT-LLM's DSA layout is modelled too (calc.analysis.memory.trtllm_cache)."""
    if engine in ("vllm", "sglang") and has_compressed_rows(kv):
        return
    sized = {DSA, BLOCK_INDEXER} if engine in ("vllm", "sglang") else {DSA} if engine == "trtllm" else set()
    other = sorted({kind.kind for kind in kv.layers} - MODELLED - sized)
    if (kv.states and engine not in ("vllm", "sglang")) or other:
        what = f"{other[0]} keys" if other else "conv and recurrent states"
        why = (f"; {COMPRESSED_HOMES[engine]}" if has_compressed_rows(kv) and engine in COMPRESSED_HOMES else
               f"; {home}" if engine == "trtllm" and (home := trtllm_v2_sparse_home(kv)) else
               f"; {TRTLLM_HYBRID}" if kv.states and engine == "trtllm" else "")
        raise GptcalcError(f"--engine {engine}: {kv.model} keeps {what} beside its KV cache, and how {engine} pages "
                           f"them is not modelled yet{why}; without --engine, memory and kvcache give every part")


def engine_lines(pool: KVPool | None, kv: KVCache, engine: str) -> list[str]:
    """The start-up lines the engine prints about its cache, with our numbers in them."""
    _refuse_unmodelled(kv, engine)
    if pool is None:
        return []
    if engine == "vllm" and isinstance(pool.hybrid, HiSparse):
        return [f"Available KV cache memory: {round(pool.kv_memory / 2**30, 2)} GiB",
                *pool.hybrid.lines(pool.blocks, pool.max_model_len)]
    if engine == "vllm":
        return [*([pool.backend.logged] if pool.backend and pool.backend.logged else []),
                f"Available KV cache memory: {round(pool.kv_memory / 2**30, 2)} GiB",
                f"GPU KV cache size: {pool.printed_tokens:,} tokens, Maximum concurrency for "
                f"{pool.max_model_len:,} tokens per request: {pool.concurrency}x"]
    if engine == "sglang" and pool.compressed is not None:
        return pool.compressed.lines()
    if engine == "sglang":
        mamba = pool.mamba
        states = [] if mamba is None else [
            f"Mamba Cache is allocated. max_mamba_cache_size: {mamba.slots}, conv_state size: "
            f"{(mamba.slots + 1) * mamba.conv_bytes / 2**30:.2f}GB, ssm_state size: "
            f"{(mamba.slots + 1) * mamba.ssm_bytes / 2**30:.2f}GB"]
        draft = pool.draft
        cells = (draft.cell, draft.draft_cell) if draft else (pool.bytes_per_token,)  # the target's, then the draft's
        return [*states, *(_sglang_allocated(pool, kv, cell) for cell in cells)] if kv.layers else states
    if pool.v2 is not None:
        return pool.v2.lines()
    logged = pool.blocks * pool.block * logged_bytes_per_token(kv)  # every pool at the cache dtype's size
    return [f"Number of tokens per block: {pool.block}.",
            f"[MemUsageChange] Allocated {logged / 2**30:.2f} GiB for max "
            f"tokens in paged KV cache ({pool.blocks * pool.block})."]
