"""What a mechanism keeps while a sequence is generated: its cache, stated by the mechanism itself.

Every token mixer answers `cache()` with a `CacheSpec`, as vLLM's layers answer with a
`KVCacheSpec` (vllm/v1/kv_cache_interface.py: FullAttentionSpec, SlidingWindowSpec,
MLAAttentionSpec, MambaSpec), so `kvcache`, `memory` and the engines loop over specs and never ask
which mechanism a layer has. A spec has two parts:

- `tokens`: what grows with the sequence — K and V rows per token (attention), one latent per
  token (MLA) and, with DeepSeek-V3.2's sparse attention, the indexer's key per token, for all
  tokens, a sliding window of them, or one row per `ratio` tokens (DeepSeek-V4's compressed
  blocks: a row stands for `ratio` tokens, so the part grows at 1/ratio of a row per token);
- `states`: what one sequence keeps whatever its length — a convolution's last inputs and a
  recurrent (SSM, delta-rule) state. Mamba2 and gated DeltaNet layers keep only these: their
  memory is constant in the sequence length.

Element counts are for the whole layer; `heads` says how tensor parallelism divides them (each of
`tp` GPUs holds heads / tp of them), None when every GPU holds all of it (MLA's latent, DeepSeek-V4's
single K = V head and its compressors' states).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CacheSpec", "StateSpec", "StateDtype", "TokenSpec"]

StateDtype = Literal["model", "fp32"]


@dataclass(frozen=True)
class TokenSpec:
    """One layer's per-token cache: K and V elements per token (V = 0 when one latent stands for both)."""

    k: int
    v: int
    kind: str  # MHA, GQA, MQA or MLA: how the rows were derived, for the tables
    n_heads: int
    n_kv_heads: int
    head_dim: int
    heads: int | None  # tensor parallelism splits the rows by these heads; None: whole on every GPU
    window: int | None = None  # a sliding window: at most this many tokens kept
    sinks: bool = False
    expanded: tuple[int, int] | None = None  # MLA: the per-head (K, V) a cache that expands the latent holds
    rope: int = 0  # MLA: the shared rotary key's width inside k (engines' fp8 layouts keep it 16-bit)
    ratio: int = 1  # one row kept per this many tokens (a compressed block); 1: a row per token
    chunk: int | None = None  # chunked local attention (Llama-4): keys of the token's own chunk only


@dataclass(frozen=True)
class StateSpec:
    """A per-sequence state of fixed size: rows x `cols` elements. A conv window keeps (kernel - 1)
    past inputs of each channel; a recurrent state is heads x key width x value width (cols 1).

    Tensor parallelism splits `rows` over `heads`; `group_rows` belong to `groups` shared groups
    (Mamba2's B and C channels) that split only as far as the groups go: a GPU keeps at least one
    group, as vLLM replicates groups when tp exceeds them (extra_groups_for_head_shards in
    vllm/model_executor/layers/mamba/mamba_utils.py)."""

    name: str  # "conv", "recurrent", or a compressor's ("compressor window", ...)
    rows: int
    cols: int
    heads: int | None  # tensor parallelism splits the rows by these heads; None: whole on every GPU
    group_rows: int = 0  # rows per group, on top of `rows`
    groups: int = 1
    dtype: StateDtype = "model"  # "fp32" where the model keeps its state in fp32 whatever its weights

    @property
    def elements(self) -> int:
        return (self.rows + self.group_rows * self.groups) * self.cols

    def splits(self, tp: int) -> bool:
        """Whether `tp` GPUs can share this state: a whole one always, else tp must divide its heads."""
        return self.heads is None or tp == 1 or self.heads % tp == 0

    def per_gpu(self, tp: int) -> int:
        """Elements on one of `tp` GPUs; `tp` must divide the heads (a whole state is on every GPU)."""
        if self.heads is None:
            return self.elements
        return (self.rows // tp + self.group_rows * max(self.groups // tp, 1)) * self.cols


@dataclass(frozen=True)
class CacheSpec:
    """A mechanism's whole cache for one layer: what grows per token, and what is fixed per sequence."""

    tokens: tuple[TokenSpec, ...] = ()  # usually one; DeepSeek-V3.2's MLA adds its indexer's keys
    states: tuple[StateSpec, ...] = ()
