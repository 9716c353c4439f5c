"""TensorRT-LLM's KVCacheManagerV2 under pipeline parallelism: every rank its own pools, one token count for all.

Each pipeline rank builds a KVCacheManagerV2 of its own layers from its own budget; the ranks then agree on one token
count and cut their quotas to it, so that the scheduler, which runs the same batches on every rank, never admits a
request one rank cannot hold. Each link at the NVIDIA/TensorRT-LLM commit it was read at:

    layers   tensorrt_llm/mapping.py Mapping.pp_layers (at 05ebebb2c1 and b35ac1b643, the versions the index holds):
             torch.tensor_split(torch.arange(num_layers), pp_size), "If num_layers % pp_size = n != 0, first n ranks
             get one extra layer"; KVCacheManagerV2.__init__ (_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at
             0004396720) keeps get_pp_layers(num_layers, mapping)'s (resource_manager.py: mapping.pp_layers), one
             AttentionLayerConfig a local layer, numbered from 0 in layer order
    windows  _torch/pyexecutor/_util.py at 0004396720, _create_kv_cache_manager: _derive_layer_type_attention_windows
             over every decoder layer of the model ("in global model layer order"), which
             _resolve_v2_max_attention_window_vec projects onto the rank's layers (_project_max_attention_window_vec);
             so a rank of sliding layers alone keeps their windows where the model has two window sizes
    budget   each rank profiles itself: KvCacheCreator.configure_kv_cache_capacity (_util.py at 0004396720) logs its
             own "Estimated max memory in KV cache" from its own peak and hands it to its manager as
             max_gpu_total_bytes; its weights are its layers', the first rank's with the embedding (and a multimodal
             model's towers), the last's with the final norm and LM head (budget.inference's rule with TensorRT-LLM's
             split); its activation peak is its own profiling run's (startup.activation_estimate over its layers:
             every rank forwards the same tokens, and only the last holds the LM head and samples, so the sampler's
             logits are the last rank's alone; a figure given with --activation-memory stands for every rank), the
             non-torch estimate one figure on every rank; a rank left nothing is refused as one GPU is
             (StartupBudget.check)
    choice   no V2 route refuses pipeline parallelism: _validate_or_fallback_kv_cache_manager_v2 (_util.py at
             0004396720) falls back to V1 for a KV connector or beam search only, and "auto" is the model class's
             choice, not the layout's (its hook, get_preferred_kv_cache_manager_version(cls, pretrained_config),
             sees no mapping; trtllm_manager)
    tokens   KVCacheManagerV2.__init__: "Sync resumable token capacity across ranks so the scheduler produces
             identical batches. Normalize to tokens because cache costs vary across PP ranks": on every rank
             T_r = _get_max_tokens_from_quota(int(quota_r x max_util_for_resume)) priced with its own layers,
             T = allreduce(T_r, MIN) over the world (tp x pp ranks; the tp ranks of a stage are identical), then
             quota_r = min(quota_r, ceil(_get_quota_from_max_tokens(T) / max_util_for_resume)), again with its own
             layers (calc.analysis.memory.trtllm_v2_sync); T = inf (every rank's layers slide and fit) keeps quota_r
    pools    each rank splits its quota into pools as one GPU does (calc.analysis.memory.trtllm_v2) and logs its own
             lines

The tokens gptcalc shows are the fewest any rank's pools hold (a request holds blocks on every rank), and the pool
figures (slots, bytes a slot, budget) are that rank's, as are memory's budget table and fit's KV pool
(KVPool.rank_budget); each line is prefixed with the rank it comes from ("[PP rank 1, layers 40-79]", gptcalc's label,
not the engine's log format). Every other figure under --engine trtllm follows TensorRT-LLM's split too: the busiest
GPU the headline and the budget's answer describe is the busiest of these ranks (budget.inference with trtllm_pp_parts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.parallel import stage_layers
from calc.analysis.memory.trtllm_cache import trtllm_bytes_per_token
from calc.analysis.memory.trtllm_v2 import V2Pool, v2_pool
from calc.spec.model import ModelSpec

if TYPE_CHECKING:  # only their instances pass through here: engines, which imports this module, stays light
    from calc.analysis.memory.budget import GPUShare
    from calc.analysis.memory.startup import StartupBudget

__all__ = ["PP_SOURCE", "PipelineRanks", "V2Rank", "V2Stages", "pipeline_ranks", "rank_layers", "rank_name",
           "trtllm_pp_parts", "v2_stages"]

PP_SOURCE = ("tensorrt_llm/mapping.py Mapping.pp_layers at 05ebebb2c1 and b35ac1b643 (tensor_split: the first "
             "n % pp ranks one layer more); tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at "
             "0004396720 KVCacheManagerV2.__init__ (each rank's T from its own layers, allreduce MIN, quota cut to "
             "ceil(Q(T) / 0.95)); _util.py at 0004396720 (windows over the whole model, each rank's own budget)")


def trtllm_pp_parts(n_layers: int, pp: int) -> list[int]:
    """Layers per pipeline rank as Mapping.pp_layers splits them: n // pp each, one more for each of the first
    n % pp ranks (torch.tensor_split)."""
    base, extra = divmod(n_layers, pp)
    return [base + (rank < extra) for rank in range(pp)]


def rank_layers(n_layers: int, pp: int, rank: int) -> range:
    """The layers pipeline rank `rank` of `pp` runs, as Mapping.pp_layers gives them (trtllm_pp_parts)."""
    return stage_layers(trtllm_pp_parts(n_layers, pp), rank)


@dataclass(frozen=True)
class V2Rank:
    """One pipeline rank: its layers, their cache (one tp shard), the bytes its manager is handed and the start-up
    budget they come from (None: --kv-memory, the same figure on every rank)."""

    index: int
    first_layer: int
    n_layers: int
    kv: KVCache
    kv_memory: int
    startup: StartupBudget | None = None

    @property
    def label(self) -> str:
        return f"[{rank_name(self.index, range(self.first_layer, self.first_layer + self.n_layers))}]"


def rank_name(index: int, layers: range) -> str:
    """gptcalc's name for a pipeline rank, in its start-up lines and in the error that refuses it."""
    return f"PP rank {index}, layers {layers.start}-{layers.stop - 1}"


@dataclass(frozen=True)
class PipelineRanks:
    """Every pipeline rank of a layout, and the whole model's cache the windows are derived from."""

    whole: KVCache
    ranks: tuple[V2Rank, ...]


def pipeline_ranks(spec: ModelSpec, shares: Sequence[GPUShare], whole: KVCache, kv_memory: int,
                   budget_of: Callable[..., StartupBudget] | None) -> PipelineRanks:
    """The ranks from what each GPU holds with the layers split as TensorRT-LLM splits them (`shares`:
    budget.inference's with trtllm_pp_parts), each with its own budget: `budget_of(weights, layers=...)`, a rank's
    (startup.startup_budget on one GPU of the layout), or without one (--kv-memory) `kv_memory` on every rank."""
    ranks = []
    for index, share in enumerate(shares):
        layers = rank_layers(spec.n_layers, len(shares), index)
        budget = budget_of(share.weights.total_bytes, layers=layers) if budget_of else None
        if budget:
            # its own weights and profile are not the busiest GPU's: it may have less left
            budget.check(rank_name(index, layers))
        kv = _in_layer_order(spec, share.kv, layers.start, len(layers))
        ranks.append(V2Rank(index, layers.start, len(layers), kv, budget.kv_memory if budget else kv_memory, budget))
    return PipelineRanks(whole, tuple(ranks))


def _in_layer_order(spec: ModelSpec, kv: KVCache, first: int, count: int) -> KVCache:
    """A rank's cache with its kinds in the order of their first layer on that rank, which numbers its life cycles
    (layer_group_id) and orders its mapping lines (trtllm_v2.v2_pool)."""
    order = list(spec.layer_counts(first, first + count))
    return replace(kv, layers=tuple(sorted(kv.layers, key=lambda kind: order.index(kind.block))))


@dataclass(frozen=True)
class V2Stages:
    """Every rank's KVCacheManagerV2 pools after the token sync: `agreed` the MIN of the ranks' tokens."""

    ranks: tuple[V2Rank, ...]
    pools: tuple[V2Pool, ...]
    agreed: float

    @cached_property
    def _binding(self) -> int:
        """The rank whose pools hold the fewest tokens, whose figures stand for the pipeline's; of ranks that hold
        as many, the one that offered the fewest (whose budget set the agreed tokens), then the first."""
        return min(range(len(self.pools)), key=lambda rank: (self.pools[rank].tokens, self.pools[rank].own_tokens))

    @property
    def binding(self) -> V2Rank:
        return self.ranks[self._binding]

    @property
    def tokens(self) -> int:
        return self.pools[self._binding].tokens

    @property
    def slots(self) -> int:
        return self.pools[self._binding].slots

    @property
    def pool_slots(self) -> tuple[int, ...]:
        return self.pools[self._binding].pool_slots

    def lines(self) -> list[str]:
        """Each rank's start-up lines, its profiling line (with a budget) then its manager's, rank by rank."""
        lines = []
        for rank, pool in zip(self.ranks, self.pools):
            own = rank.startup.lines(trtllm_bytes_per_token(rank.kv)) if rank.startup else []
            lines += [f"{rank.label} {line}" for line in (*own, *pool.lines())]
        return lines

    def to_json(self) -> dict[str, object]:
        return {"agreed_tokens": None if math.isinf(self.agreed) else self.agreed, "tokens": self.tokens,
                "binding_pp_rank": self.binding.index, "source": PP_SOURCE,
                "ranks": [{"pp_rank": rank.index, "first_layer": rank.first_layer, "layers": rank.n_layers,
                           "kv_memory_bytes": rank.kv_memory,
                           "activation_bytes": rank.startup.term("activation") if rank.startup else None,
                           "own_tokens": _finite(pool.own_tokens), **pool.to_json()}
                          for rank, pool in zip(self.ranks, self.pools)]}


def _finite(tokens: float) -> float | None:
    """JSON has no infinity: a rank whose every layer slides and fits offers inf tokens, written null."""
    return None if math.isinf(tokens) else tokens


def v2_stages(pipeline: PipelineRanks, block: int, world: int, overlap: bool = True) -> V2Stages:
    """The ranks' pools: each built from its own layers and budget, `world` ranks syncing the quota at the fewest
    tokens any offers (V2Pool.own_tokens, their MIN)."""
    own = [v2_pool(rank.kv, rank.kv_memory, block, world, overlap, pipeline.whole) for rank in pipeline.ranks]
    agreed = min(pool.own_tokens for pool in own)
    return V2Stages(pipeline.ranks, tuple(replace(pool, agreed=agreed) for pool in own), agreed)
