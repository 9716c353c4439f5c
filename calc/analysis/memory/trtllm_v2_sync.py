"""How KVCacheManagerV2 agrees one quota over several ranks: bytes to tokens and back, in TensorRT-LLM's floats.

On more than one rank KVCacheManagerV2.__init__ (tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at
NVIDIA/TensorRT-LLM 0004396720) turns its quota into tokens, takes the fewest over ranks and turns those back:

    T = _get_max_tokens_from_quota(int(quota x max_util_for_resume)), allreduce MIN
    quota = min(quota, ceil(_get_quota_from_max_tokens(T) / max_util_for_resume))   (unless T is inf)

so that every rank deals the same tokens. Under pipeline parallelism the ranks hold different layers, so each
prices T with its own (the comment there: "Normalize to tokens because cache costs vary across PP ranks"), and the
MIN is the fewest any stage holds: calc.analysis.memory.trtllm_v2_pp. The two conversions (_get_max_tokens_from_quota_impl and
_get_quota_from_max_tokens_impl, same file) price each layer at its bytes a token (get_layer_bytes_per_token with
Role.ALL) and split the layers by their window (_estimate_full_attn_size_per_token, _estimate_swa_cache_size with
scratch reuse off, its default):

    full     the bytes a token of the full-attention layers
    swa      the bytes a token of the sliding ones (a context token is written to every layer)
    request  the sliding layers' ceil(window / tokens_per_block) x tokens_per_block tokens, in bytes, one request's
    batch    max_batch_size x request
    T(q)     0 below the batch; (q - batch) / (full + swa) up to max_num_tokens context tokens; past them
             max_num_tokens + (q - max_num_tokens x (full + swa) - batch) / full (inf with no full layer)
    Q(T)     int(T x full + min(T, max_num_tokens) x swa + batch)

For identical ranks (tensor parallelism) the round trip returns the quota up to the floats' rounding, a byte or two
lower, so what max_batch_size moves is that last byte and the floor below a batch of windows. Its value is the
executor's: llm_args.py at 0004396720 declares BaseLlmArgs.max_batch_size = Field(default=2048) and max_num_tokens
8192 (normalize_optional_fields_to_defaults puts a None back to them); create_py_executor takes them from
llm_args.get_runtime_sizes() and hands max_batch_size unchanged to KvCacheCreator (py_executor_creator.py at
000429d57d, the version the index holds), whose managers get max_batch_size=self._max_batch_size (_util.py at
0004396720).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["MAX_BATCH_SIZE", "MAX_NUM_TOKENS", "MAX_UTIL_FOR_RESUME", "rank_tokens", "synced_quota"]

# KvCacheConfig.max_util_for_resume's default (tensorrt_llm/llmapi/llm_args.py: "Default is 95%")
MAX_UTIL_FOR_RESUME = 0.95
MAX_NUM_TOKENS = 8192  # BaseLlmArgs.max_num_tokens (llm_args.py at 0004396720), KVCacheManagerV2's max_num_tokens
MAX_BATCH_SIZE = 2048  # BaseLlmArgs.max_batch_size (llm_args.py at 0004396720), KVCacheManagerV2's max_batch_size


def rank_tokens(quota: int, token_bytes: Sequence[int], windows: Sequence[int | None], block: int) -> float:
    """The tokens one rank offers the MIN all-reduce: _get_max_tokens_from_quota(int(quota x max_util_for_resume))
    over its own layers, `token_bytes` each layer's bytes a token, `windows` its window (None: full attention),
    `block` tokens_per_block."""
    return _Costs.of(token_bytes, windows, block).tokens(int(quota * MAX_UTIL_FOR_RESUME))


def synced_quota(quota: int, token_bytes: Sequence[int], windows: Sequence[int | None], block: int,
                 agreed: float | None = None) -> int:
    """The quota a rank keeps after the sync: min(quota, ceil(Q(T) / max_util_for_resume)) over its own layers, T
    the tokens the ranks `agreed` on (their MIN), or for ranks of identical layers (None) the rank's own."""
    costs = _Costs.of(token_bytes, windows, block)
    tokens = costs.tokens(int(quota * MAX_UTIL_FOR_RESUME)) if agreed is None else agreed
    if math.isinf(tokens):
        return quota
    return min(quota, math.ceil(costs.quota(tokens) / MAX_UTIL_FOR_RESUME))


class _Costs:
    """The per-token and per-request bytes the two conversions share."""

    def __init__(self, full: int, swa: int, request: int) -> None:
        self.full, self.swa, self.batch = full, swa, MAX_BATCH_SIZE * request

    @classmethod
    def of(cls, token_bytes: Sequence[int], windows: Sequence[int | None], block: int) -> _Costs:
        sliding = [(size, window) for size, window in zip(token_bytes, windows) if window]
        full = sum(size for size, window in zip(token_bytes, windows) if not window)
        request = sum(-(-window // block) * block * size for size, window in sliding)
        return cls(full, sum(size for size, _ in sliding), request)

    def tokens(self, quota: int) -> float:
        """_get_max_tokens_from_quota_impl."""
        if quota < self.batch:
            return 0
        context = self.full + self.swa
        limit = MAX_NUM_TOKENS * context + self.batch
        if quota <= limit:
            return math.inf if context <= 0 else (quota - self.batch) / context
        return math.inf if self.full <= 0 else MAX_NUM_TOKENS + (quota - limit) / self.full

    def quota(self, tokens: float) -> int:
        """_get_quota_from_max_tokens_impl, its terms summed in TensorRT-LLM's order (the generation tokens' sliding
        term is 0 with scratch reuse off, and adding 0.0 changes no float)."""
        context = min(tokens, MAX_NUM_TOKENS)
        return int(tokens * self.full + self.batch + context * self.swa)
