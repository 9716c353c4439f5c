"""The server flags that shape an engine's KV pool beyond its memory, as one value.

`memory` and `fit` both size a vLLM, SGLang or TensorRT-LLM pool from the same flags (vLLM's async scheduling, prefix
caching and indexer key dtype, SGLang's speculative draft steps and layers and SSM state dtype, TensorRT-LLM's choice of
KV cache manager). The CLI builds them
once (calc/cli/options.py pool_options) and both commands hand this object on, so a flag added here reaches
both; what the layout and the card add (pipeline stages, tensor-parallel ways, compute capability, SGLang's
stages under pipeline parallelism) and memory's own vLLM HiSparse come with each pool asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from calc.errors import GptcalcError

if TYPE_CHECKING:  # the engines' modules load when a pool is asked for, not with every `memory` (start-up time)
    from calc.analysis.memory.engines import KVPool
    from calc.analysis.memory.kv import KVCache
    from calc.analysis.memory.parallel import Layout
    from calc.analysis.memory.sglang_draft import DraftWeights
    from calc.analysis.memory.weights import Weights
    from calc.spec.model import ModelSpec

__all__ = ["PoolSettings"]

_NOT_TRTLLM = ("--use-kv-cache-manager-v2 and --disable-overlap-scheduler set TensorRT-LLM's KV cache manager: give "
               "--engine trtllm")
_NOT_VLLM = "--no-async-scheduling and --no-enable-prefix-caching set vLLM's pool: give --engine vllm"
WITH_POOL = " with --budget or --kv-memory"  # memory's: its pool needs a GPU budget or the log's figure too


@dataclass(frozen=True)
class PoolSettings:
    """vLLM's --async-scheduling, --indexer-kv-dtype and --enable-prefix-caching, SGLang's
    --speculative-num-steps, --speculative-draft-layers (None: the model's MTP layers) and --mamba-ssm-dtype
    (None: the model's default there), TensorRT-LLM's kv_cache_config.use_kv_cache_manager_v2 ("auto": the model
    class's preference, calc.analysis.memory.trtllm_manager) and its overlap scheduler (on unless
    disable_overlap_scheduler; it builds the managers for --seq + 1 tokens, trtllm_v2.engine_seq), at their
    defaults unless given."""

    async_scheduling: bool = True
    indexer_kv_dtype: str = "auto"
    prefix_caching: bool = True
    speculative_num_steps: int = 0
    speculative_draft_layers: int | None = None
    mamba_ssm_dtype: str | None = None
    kv_cache_manager_v2: str = "auto"
    overlap_scheduler: bool = True

    def pool(self, spec: ModelSpec, kv: KVCache, engine: str, kv_memory: int, max_model_len: int, block: int | None,
             max_batched: int, layout: Layout, capability: tuple[int, int] | None,
             stages: tuple[tuple[KVCache, int], ...] = (), hisparse: Any = None,
             trtllm_ranks: Any = None) -> KVPool:
        """The pool `engine` builds from `kv_memory` bytes on one GPU of `layout` (engines.kv_pool), these
        flags applied; SGLang's SSM states take the dtype it resolves on that card and tp (sglang_states);
        `stages`: SGLang's pipeline stages (sglang_dsv4.sglang_stages), `hisparse`: vLLM's (memory's),
        `trtllm_ranks`: TensorRT-LLM's pipeline ranks, which a V2 pool under --pp is built from
        (trtllm_v2_pp.pipeline_ranks)."""
        from calc.analysis.memory.engines import kv_pool
        from calc.analysis.memory.sglang_states import sglang_ssm_bytes

        if self._vllm_set and engine != "vllm":
            raise GptcalcError(_NOT_VLLM + WITH_POOL)
        return kv_pool(kv, engine, kv_memory, max_model_len, block, max_batched, pp=layout.pp, capability=capability,
                       async_scheduling=self.async_scheduling, indexer_kv_dtype=self.indexer_kv_dtype,
                       prefix_caching=self.prefix_caching, speculative_steps=self.speculative_num_steps,
                       draft_layers=self.speculative_draft_layers, sglang_stages=stages,
                       sglang_ssm_bytes=sglang_ssm_bytes(spec.sglang, engine, self.mamba_ssm_dtype, capability,
                                                         layout.tp), hisparse=hisparse,
                       trtllm_v2=self._trtllm_v2(spec, kv, engine), ranks=layout.gpus,
                       trtllm_overlap=self.overlap_scheduler, trtllm_ranks=trtllm_ranks)

    def draft(self, engine: str, spec: ModelSpec, weights: Weights, layout: Layout) -> DraftWeights | None:
        """SGLang's draft worker's weights on one GPU of `layout`, which its pool's profiling charges
        (sglang_draft.draft_weights), where a draft runs (--speculative-num-steps); None elsewhere. One test for
        memory and fit, and a layout's alone: the card does not change them."""
        if engine != "sglang" or not self.speculative_num_steps:
            return None
        from calc.analysis.memory.sglang_draft import draft_weights

        return draft_weights(spec, weights, layout, self.speculative_draft_layers)

    def _trtllm_v2(self, spec: ModelSpec, kv: KVCache, engine: str) -> bool:
        """Whether TensorRT-LLM's pool is KVCacheManagerV2's (trtllm_manager.sizes_v2); the setting is its alone."""
        if engine != "trtllm":
            if self._trtllm_set:
                raise GptcalcError(_NOT_TRTLLM + WITH_POOL)
            return False
        from calc.analysis.memory.trtllm_manager import sizes_v2

        return sizes_v2(spec, kv, self.kv_cache_manager_v2)

    @property
    def _vllm_set(self) -> bool:
        """Whether a switch of vLLM's pool is turned off (async scheduling, prefix caching): no other engine's
        pool reads them, so another engine would ignore it silently."""
        return not self.async_scheduling or not self.prefix_caching

    @property
    def _trtllm_set(self) -> bool:
        """Whether a flag of TensorRT-LLM's KV cache manager is given (not at its default)."""
        return self.kv_cache_manager_v2 != "auto" or not self.overlap_scheduler

    def refuse_other_engines(self, engine: str) -> None:
        """Refuse, once, a flag of another engine's pool than `engine`'s (vLLM's --indexer-kv-dtype,
        --no-async-scheduling and --no-enable-prefix-caching, SGLang's draft
        flags and --mamba-ssm-dtype, TensorRT-LLM's manager flags) or draft layers without draft steps: fit sizes
        every layout's pool with the same flags, so each would fail alike, and one `Error:` says it as memory does
        (memory's own refusal of the last two, sizing its one pool, adds its --budget or --kv-memory)."""
        from calc.analysis.memory.sglang_draft import refuse_draft_flags
        from calc.analysis.memory.vllm_indexer import refuse_off_vllm

        refuse_off_vllm(engine, self.indexer_kv_dtype)
        refuse_draft_flags(engine, self.speculative_num_steps, self.speculative_draft_layers)
        if self.mamba_ssm_dtype is not None and engine != "sglang":
            from calc.analysis.memory.sglang_states import NOT_SGLANG

            raise GptcalcError(NOT_SGLANG)
        if self._trtllm_set and engine != "trtllm":
            raise GptcalcError(_NOT_TRTLLM)
        if self._vllm_set and engine != "vllm":
            raise GptcalcError(_NOT_VLLM)

    def refuse_for_model(self, kv: KVCache, engine: str) -> None:
        """What these flags ask of the model's cache `kv` that `engine` refuses or gptcalc does not model, whatever
        the layout (vLLM's indexer keys in a dtype its indexer does not take, or with no indexer; SGLang's draft
        where its share is not modelled; TensorRT-LLM's MTP layer where trtllm_spec does not size it): fit says it once, before any layout, in the words kv_pool gives memory."""
        if engine == "vllm":
            from calc.analysis.memory.vllm_indexer import resolve_indexer_kv_dtype

            resolve_indexer_kv_dtype(kv, engine, self.indexer_kv_dtype, None)  # the card's part: each GPU's pool
        elif engine == "trtllm" and self.speculative_num_steps:
            from calc.analysis.memory.trtllm_spec import with_mtp_layers

            with_mtp_layers(kv, self.speculative_draft_layers, 1)  # the layout's part (--pp): each layout's pool
        elif engine == "sglang" and self.speculative_num_steps:
            from calc.analysis.memory.sglang_draft import refuse_unmodelled_draft

            refuse_unmodelled_draft(kv, self.speculative_draft_layers)

    def refuse_without_pool(self) -> None:
        """With no pool to size (no engine, or no budget or --kv-memory), a flag given would be ignored:
        say which and what it needs instead."""
        if self.mamba_ssm_dtype is not None:
            from calc.analysis.memory.sglang_states import NOT_SGLANG

            raise GptcalcError(NOT_SGLANG + WITH_POOL)
        if self.speculative_num_steps or self.speculative_draft_layers:
            raise GptcalcError("--speculative-num-steps and --speculative-draft-layers set SGLang's or TensorRT-LLM's "
                               "pool: give --engine sglang or trtllm" + WITH_POOL)
        if self._trtllm_set:
            raise GptcalcError(_NOT_TRTLLM + WITH_POOL)
        if self.indexer_kv_dtype != "auto":
            from calc.analysis.memory.vllm_indexer import check_indexer_kv_dtype

            check_indexer_kv_dtype(self.indexer_kv_dtype)
            raise GptcalcError("--indexer-kv-dtype sets the pages of vLLM's pool: give --engine vllm" + WITH_POOL)
        if self._vllm_set:
            raise GptcalcError(_NOT_VLLM + WITH_POOL)
