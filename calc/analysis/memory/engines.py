"""What an inference server will say at start-up about its KV cache, given the memory it set aside.

Each engine carves its KV pool into fixed-size pages and reports the tokens they hold:

    vLLM      blocks = floor(kv_memory / (block_size x bytes per token)),  tokens = blocks x block_size
              "GPU KV cache size: {tokens:,} tokens", "Maximum concurrency for {max_model_len:,} tokens
              per request: {tokens / max_model_len:.2f}x"  (block_size 16 by default, --block-size)
    SGLang    tokens = floor(kv_memory / bytes per token)                   (page size 1 by default)
              "KV Cache is allocated. #tokens: {tokens}, K size: {K / 2^30:.2f} GB, V size: ..."
    TRT-LLM   blocks = floor(kv_memory / (tokens_per_block x bytes per token)), tokens_per_block 32
    llama.cpp allocates n_ctx cells (-c), padded up to a multiple of 256, a second cache for sliding-window
              layers and a recurrent-state buffer: calc.analysis.memory.llamacpp, which prints its lines

bytes per token is the cache of one token on one GPU (per tensor-parallel shard, all layers the GPU
holds). How much memory the engine gives the pool is what it measures at start-up (vLLM: total x
--gpu-memory-utilization minus weights, activation peak and non-torch memory); pass the figure
from your server's log with --kv-memory.

vLLM v1's hybrid allocator (a model with full-attention and sliding-window layers, Gemma-2/3,
gpt-oss) puts the layers of each kind into groups of `group_size` layers (the fewest layers of any
kind, or the most when that is under 1.5x the fewest), pads the last group of a kind, and shares
one pool of pages among the groups (vllm/v1/core/kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size,
get_kv_cache_config_from_groups, _report_kv_cache_config, get_max_concurrency_for_kv_cache_config):

    page      = block_size x bytes per token of one layer
    blocks    = floor(floor(kv_memory / page) / group_size)
    tokens    = floor(blocks / groups) x block_size                      ("GPU KV cache size")
    per request: ceil(max_model_len / block) blocks per full group,
                 ceil(min(window - 1 + max_num_batched_tokens, max_model_len) / block) + 1 per sliding group
    concurrency = blocks / (blocks per request)
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.memory.kv import KVCache
from calc.errors import GptcalcError

__all__ = ["ENGINES", "Engine", "HybridGroups", "KVPool", "hybrid_groups", "engine_lines", "kv_pool", "padded_context", "split_kv_bytes"]

VLLM = "https://github.com/vllm-project/vllm/blob/main/vllm/v1/core/kv_cache_utils.py (get_num_blocks, page_size_bytes)"
VLLM_HYBRID = ("https://github.com/vllm-project/vllm/blob/001cabc1be16a59a70d720ed61a13b678c060a18/vllm/v1/core/"
               "kv_cache_utils.py (hybrid groups) and vllm/v1/kv_cache_interface.py (SlidingWindowSpec.max_memory_usage_bytes)")
MAX_BATCHED = 2048  # vllm serve's max_num_batched_tokens below 70 GiB or on an A100 (8192 above): EngineArgs.get_batch_defaults
SGLANG = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/mem_cache/memory_pool.py (MHATokenToKVPool)"
TRTLLM = "https://github.com/NVIDIA/TensorRT-LLM (KvCacheConfig tokens_per_block)"
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
    hybrid: HybridGroups | None = None  # vLLM's groups of full and sliding-window layers

    @property
    def block_bytes(self) -> int:
        if self.hybrid is not None:
            return self.block * self.hybrid.layer_bytes * self.hybrid.group_size
        return self.block * self.bytes_per_token

    @property
    def blocks(self) -> int:
        if self.hybrid is not None:  # floor(floor(memory / page) / group_size), as get_num_blocks divides
            return self.kv_memory // (self.block * self.hybrid.layer_bytes) // self.hybrid.group_size
        return self.kv_memory // self.block_bytes

    @property
    def tokens(self) -> int:
        if self.hybrid is not None:
            return self.blocks // self.hybrid.groups * self.block
        return self.blocks * self.block

    @property
    def concurrency(self) -> str:
        """Requests of max_model_len the pool holds at once, as vLLM prints it (two decimals)."""
        if self.hybrid is not None:
            return f"{self.blocks / self.hybrid.blocks_per_request(self.max_model_len, self.block):.2f}"
        return f"{self.tokens / self.max_model_len:.2f}"

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine.name, "block_size": self.block, "bytes_per_token": self.bytes_per_token,
                "block_bytes": self.block_bytes, "kv_memory_bytes": self.kv_memory, "blocks": self.blocks,
                "tokens": self.tokens, "max_model_len": self.max_model_len,
                "max_concurrency_numerator": self.tokens, "max_concurrency": self.concurrency,
                "hybrid_groups": self.hybrid.to_json() if self.hybrid else None}


def kv_pool(kv: KVCache, engine: str, kv_memory: int, max_model_len: int, block: int | None = None,
            max_batched: int = MAX_BATCHED) -> KVPool:
    """The pool `engine` builds from `kv_memory` bytes for this cache layout (one GPU's share)."""
    if engine not in ENGINES:
        raise GptcalcError(f"--engine {engine!r}: unknown (choose from {', '.join(ENGINES)})")
    found = ENGINES[engine]
    _refuse_unmodelled(kv, engine)
    if kv_memory < 0:
        raise GptcalcError(f"--kv-memory: must not be negative, got {kv_memory}")
    hybrid = hybrid_groups(kv, max_batched) if engine == "vllm" else None
    return KVPool(found, block or found.block, kv.bytes_per_token, kv_memory, max_model_len, hybrid)


@dataclass(frozen=True)
class HybridGroups:
    """vLLM's KV cache groups for a model with several kinds of attention layer."""

    group_size: int  # layers per group (padding included)
    windows: tuple[int | None, ...]  # one entry per group: its sliding window, None for full attention
    layer_bytes: int  # one token of one layer
    max_batched: int  # --max-num-batched-tokens: the tokens a sliding group holds beyond its window

    @property
    def groups(self) -> int:
        return len(self.windows)

    def blocks_per_request(self, max_model_len: int, block: int) -> int:
        """The pages one request of max_model_len takes across the groups."""
        return sum(-(-max_model_len // block) if window is None else
                   -(-min(window - 1 + self.max_batched, max_model_len) // block) + 1 for window in self.windows)

    def to_json(self) -> dict[str, object]:
        return {"group_size": self.group_size, "groups": self.groups, "windows": list(self.windows),
                "layer_bytes": self.layer_bytes, "max_num_batched_tokens": self.max_batched}


def hybrid_groups(kv: KVCache, max_batched: int = MAX_BATCHED) -> HybridGroups | None:
    """vLLM's grouping when the layers have more than one window (None: one kind, one group)."""
    counts: dict[int | None, int] = {}
    for kind in kv.layers:
        counts[kind.window] = counts.get(kind.window, 0) + kind.n_layers
    if len(counts) < 2:
        return None
    sizes = {kind.row_bytes(kv.format) for kind in kv.layers}
    if len(sizes) > 1:
        raise GptcalcError(f"{kv.model}: layers of different page sizes; vLLM then scales block sizes, "
                           "which --engine vllm does not model")
    fewest, most = min(counts.values()), max(counts.values())
    size = most if 2 * most < 3 * fewest else fewest  # most < 1.5 x fewest: pad up to the most
    windows = tuple(window for window, n in counts.items() for _ in range(-(-n // size)))
    return HybridGroups(size, windows, sizes.pop(), max_batched)


def padded_context(engine: Engine, n_ctx: int) -> int:
    """llama.cpp's cells: n_ctx rounded up to its padding; other engines allocate by the pool."""
    return -(-n_ctx // engine.block) * engine.block if engine.name == "llamacpp" else n_ctx


def split_kv_bytes(kv: KVCache) -> tuple[int, int]:
    """(K bytes, V bytes) of the cache as it stands: llama.cpp and SGLang print them apart."""
    fmt = kv.format
    k = sum(kind.n_layers * fmt.row_bytes(kind.k) * kind.tokens(kv.seq) * kv.batch for kind in kv.layers)
    v = sum(kind.n_layers * (fmt.row_bytes(kind.v) if kind.v else 0) * kind.tokens(kv.seq) * kv.batch
            for kind in kv.layers)
    return k, v


# The per-token caches whose pages the engine rules below describe.
MODELLED = {"MHA", "GQA", "MQA", "MLA"}


def _refuse_unmodelled(kv: KVCache, engine: str) -> None:
    """Engines page conv and recurrent states, and DSA's indexer keys, their own way (vLLM aligns Mamba
    state pages with the attention blocks, SGLang keeps a separate Mamba pool, llama.cpp a recurrent-state
    buffer, vLLM and SGLang store DSA's latent and keys as fp8 with scales): until those rules are
    modelled, such a model gets no engine line rather than a wrong one."""
    other = sorted({kind.kind for kind in kv.layers} - MODELLED)
    if kv.states or other:
        what = "conv and recurrent states" if kv.states else f"{other[0]} keys"
        raise GptcalcError(f"--engine {engine}: {kv.model} keeps {what} beside its KV cache, and how {engine} pages "
                           "them is not modelled yet; without --engine, memory and kvcache give every part")


def engine_lines(pool: KVPool | None, kv: KVCache, engine: str) -> list[str]:
    """The start-up lines the engine prints about its cache, with our numbers in them."""
    _refuse_unmodelled(kv, engine)
    if pool is None:
        return []
    if engine == "vllm":
        return [f"Available KV cache memory: {pool.kv_memory / 2**30:.2f} GiB",
                f"GPU KV cache size: {pool.tokens:,} tokens",
                f"Maximum concurrency for {pool.max_model_len:,} tokens per request: {pool.concurrency}x"]
    if engine == "sglang":
        per_k = sum(kind.n_layers * kv.format.row_bytes(kind.k) for kind in kv.layers)
        per_v = pool.bytes_per_token - per_k
        return [f"KV Cache is allocated. #tokens: {pool.tokens}, K size: {pool.tokens * per_k / 2**30:.2f} GB, "
                f"V size: {pool.tokens * per_v / 2**30:.2f} GB"]
    return [f"{pool.blocks:,} blocks of {pool.block} tokens: {pool.tokens:,} tokens"]
