"""What an inference server will say at start-up about its KV cache, given the memory it set aside.

Each engine carves its KV pool into fixed-size pages and reports the tokens they hold:

    vLLM      blocks = floor(kv_memory / (block_size x bytes per token)),  tokens = blocks x block_size
              "GPU KV cache size: {tokens:,} tokens", "Maximum concurrency for {max_model_len:,} tokens
              per request: {tokens / max_model_len:.2f}x"  (block_size 16 by default, --block-size)
    SGLang    tokens = floor(kv_memory / bytes per token)                   (page size 1 by default)
              "KV Cache is allocated. #tokens: {tokens}, K size: {K / 2^30:.2f} GB, V size: ..."
    TRT-LLM   blocks = floor(kv_memory / (tokens_per_block x bytes per token)), tokens_per_block 32
    llama.cpp allocates n_ctx cells (-c), padded up to a multiple of 256, and prints the K and V
              buffers: "KV self size = {MiB:.2f} MiB, K (f16): ..., V (f16): ..."

bytes per token is the cache of one token on one GPU (per tensor-parallel shard, all layers the GPU
holds). How much memory the engine gives the pool is what it measures at start-up (vLLM: total x
--gpu-memory-utilization minus weights, activation peak and non-torch memory); pass the figure
from your server's log with --kv-memory. vLLM's hybrid allocator sizes sliding-window layers by
their window; the figures here count every layer at full length, as its single-type pool does.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.memory.kv import KVCache
from calc.errors import GptcalcError

__all__ = ["ENGINES", "Engine", "KVPool", "engine_lines", "kv_pool", "padded_context", "split_kv_bytes"]

VLLM = "https://github.com/vllm-project/vllm/blob/main/vllm/v1/core/kv_cache_utils.py (get_num_blocks, page_size_bytes)"
SGLANG = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/mem_cache/memory_pool.py (MHATokenToKVPool)"
TRTLLM = "https://github.com/NVIDIA/TensorRT-LLM (KvCacheConfig tokens_per_block)"
LLAMACPP = "https://github.com/ggml-org/llama.cpp/blob/master/src/llama-kv-cache.cpp (cells padded to 256)"


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

    @property
    def block_bytes(self) -> int:
        return self.block * self.bytes_per_token

    @property
    def blocks(self) -> int:
        return self.kv_memory // self.block_bytes

    @property
    def tokens(self) -> int:
        return self.blocks * self.block

    @property
    def concurrency(self) -> str:
        """Requests of max_model_len the pool holds at once, as vLLM prints it (two decimals)."""
        return f"{self.tokens / self.max_model_len:.2f}"

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine.name, "block_size": self.block, "bytes_per_token": self.bytes_per_token,
                "block_bytes": self.block_bytes, "kv_memory_bytes": self.kv_memory, "blocks": self.blocks,
                "tokens": self.tokens, "max_model_len": self.max_model_len,
                "max_concurrency_numerator": self.tokens, "max_concurrency": self.concurrency}


def kv_pool(kv: KVCache, engine: str, kv_memory: int, max_model_len: int, block: int | None = None) -> KVPool:
    """The pool `engine` builds from `kv_memory` bytes for this cache layout (one GPU's share)."""
    if engine not in ENGINES:
        raise GptcalcError(f"--engine {engine!r}: unknown (choose from {', '.join(ENGINES)})")
    found = ENGINES[engine]
    if kv_memory < 0:
        raise GptcalcError(f"--kv-memory: must not be negative, got {kv_memory}")
    return KVPool(found, block or found.block, kv.bytes_per_token, kv_memory, max_model_len)


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


def engine_lines(pool: KVPool | None, kv: KVCache, engine: str) -> list[str]:
    """The start-up lines the engine prints about its cache, with our numbers in them."""
    if engine == "llamacpp":
        k, v = split_kv_bytes(kv)
        t = "f16" if kv.dtype == "fp16" else kv.dtype
        return [f"llama_kv_cache: size = {(k + v) / 2**20:.2f} MiB ({kv.seq} cells, {kv.n_layers} layers, "
                f"{kv.batch}/{kv.batch} seqs), K ({t}): {k / 2**20:.2f} MiB, V ({t}): {v / 2**20:.2f} MiB"]
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
