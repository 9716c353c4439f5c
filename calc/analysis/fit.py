"""`gptcalc fit`: the smallest layouts that serve a model at a context, under an engine's own budget.

For each GPU type and each count (1, 2, 4, 8, then whole nodes of 8 up to MAX_GPUS), the layouts a
server runs: tensor parallel within a node (tp = count up to 8), pipeline stages across nodes
(pp = count / 8), and for a MoE the same with each stage's routed experts split whole over its tp
GPUs (ep = tp). Each is validated by `validate_layout` (the rules memory and budgets apply), sized with the
weights as stored (quantisation included) on the busiest GPU, and given the engine's start-up budget
(calc/analysis/memory/startup.py): a layout serves when its KV pool holds `concurrency` requests of
`seq` tokens. Under TensorRT-LLM a layout with pipeline stages is split as it splits the layers, each rank
with its own budget and pools (calc.analysis.memory.trtllm_v2_pp): the row's pool is the rank's whose pools
hold the fewest tokens. Candidates are ranked by GPU count, then by the card's memory (the smaller card first),
then by the most requests they hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.budget import inference
from calc.analysis.memory.engines import KVPool
from calc.analysis.memory.gpus import GPU, find_gpu
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.parallel import Layout, pp_partitions, stage_layers, validate_layout, whole_cache
from calc.analysis.memory.pool_settings import PoolSettings
from calc.analysis.memory.refusals import refuse_unserved
from calc.analysis.memory.schemes import Scheme
from calc.analysis.memory.sglang_dp import DpAttention
from calc.analysis.memory.sglang_dsv4 import sglang_stages
from calc.analysis.memory.startup import (Reserves, StartupBudget, engine_extra_weights, startup_budget,
                                          vllm_batch_defaults)
from calc.analysis.memory.stored import StoredWeights
from calc.analysis.memory.trtllm_v2_pp import pipeline_ranks, rank_layers, trtllm_pp_parts
from calc.analysis.memory.trtllm_workspace import refuse_mla_workspace
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["Candidate", "DEFAULT_GPUS", "MAX_GPUS", "fit", "parse_gpus"]

DEFAULT_GPUS = ("H100-80GB", "H200", "B200")
NODE = 8  # GPUs one node's NVLink joins: tensor parallelism stays within it
MAX_GPUS = 64


def parse_gpus(text: str) -> tuple[GPU, ...]:
    """--gpus H100,H200,B200: catalog names or aliases, comma-separated, none repeated."""
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise GptcalcError(f"--gpus {text!r}: an empty name (give names separated by commas: H100,H200)")
    gpus = []
    for name in names:
        gpu = find_gpu(name)
        if gpu is None:
            raise GptcalcError(f"--gpus: unknown GPU {name!r}")
        if gpu not in gpus:
            gpus.append(gpu)
    return tuple(gpus)


def layouts(spec: ModelSpec) -> list[Layout]:
    """Every layout tried, fewest GPUs first: tp within a node, pp across nodes, and for a MoE the
    same with each stage's experts split whole over its tp GPUs (vLLM's --enable-expert-parallel
    without data parallelism: ep = tp)."""
    moe = any(block.is_moe for block in spec.blocks.values())
    counts = [1, 2, 4, 8] + list(range(2 * NODE, MAX_GPUS + 1, NODE))
    found = []
    for count in counts:
        tp, pp = min(count, NODE), max(count // NODE, 1)
        found.append(Layout(tp, pp))
        if moe and tp > 1:
            found.append(Layout(tp, pp, tp))
    return found


@dataclass(frozen=True)
class Candidate:
    """One GPU type and layout, its budget and the pool it leaves."""

    gpu: GPU
    layout: Layout
    weights_bytes: int  # the busiest GPU's
    budget: StartupBudget  # the busiest GPU's; where each pipeline rank has its own, the pool's rank's (trtllm_v2_pp)
    pool: KVPool | None  # None: nothing left for the cache
    seq: int
    concurrency: int
    groups: int = 1  # SGLang's DP-attention groups: each runs its own requests from its own pool (sglang_dp)

    @property
    def requests(self) -> float:
        """Requests of `seq` tokens the pools hold: the engine's max concurrency (a DP-attention group's, times the
        groups), not rounded as printed."""
        return self.pool.max_concurrency * self.groups if self.pool else 0.0

    @property
    def headroom(self) -> int:
        """Pool bytes left once `concurrency` requests of `seq` tokens hold theirs (pages are linear in requests)."""
        if self.pool is None or not self.requests:
            return 0
        return int(self.budget.kv_memory * (1 - self.concurrency / self.requests))

    @property
    def serves(self) -> bool:
        """Whole requests, as the engine admits them (18.996 holds 18, though it prints 19.00)."""
        return self.pool is not None and self.pool.requests * self.groups >= self.concurrency

    def to_json(self) -> dict[str, object]:
        return {"gpu": self.gpu.name, "gpus": self.layout.gpus, "tp": self.layout.tp, "pp": self.layout.pp,
                "ep": self.layout.ep, "dp_attention_groups": self.groups, "weights_bytes_per_gpu": self.weights_bytes,
                "kv_memory_bytes": self.budget.kv_memory, "tokens": self.pool.printed_tokens if self.pool else 0,
                "max_concurrency": self.pool.concurrency if self.pool else "0.00", "serves": self.serves,
                "headroom_bytes": self.headroom,
                "budget": self.budget.to_json()}


def _skipped(layout: Layout, exc: GptcalcError | str, cards: tuple[str, ...] = ()) -> str:
    """One 'not tried' reason; `cards`: the GPUs of --gpus it holds for where others of that layout were tried
    (a card's own refusal, such as a key dtype its compute capability lacks), none where it holds for all."""
    where = f" on {', '.join(cards)}" if cards else ""
    return f"tp {layout.tp} pp {layout.pp} ep {layout.ep}{where}: {exc}"


def fit(spec: ModelSpec, breakdown: Breakdown, seq: int, gpus: tuple[GPU, ...], engine: str = "vllm",
        concurrency: int = 1, dtype: str = "fp16", kv_dtype: str = "fp16", scheme: Scheme | None = None,
        stored: StoredWeights | None = None, reserves: Reserves = Reserves(),
        pool_settings: PoolSettings = PoolSettings(),
        dp_attention: DpAttention | None = None) -> tuple[list[Candidate], list[str]]:
    """The layouts that serve `concurrency` requests of `seq` tokens, best first, and why others were skipped;
    `pool_settings`: the server flags each pool is sized with, as memory's (SGLang's draft worker: its weights
    out of the budget too, calc.analysis.memory.sglang_draft); `dp_attention`: SGLang's DP attention, each layout's
    weights and reserve as it lays them out (calc.analysis.memory.sglang_dp; a layout whose tp it does not divide
    is skipped)."""
    if seq > spec.n_positions:
        raise GptcalcError(f"--seq {seq:,}: longer than {spec.name}'s context of {spec.n_positions:,} tokens")
    pool_settings.refuse_other_engines(engine)  # once, not as every layout's
    refuse_unserved(spec, engine)
    cache = kv_cache(spec, seq, 1, kv_dtype)  # the model's cache kinds, which no layout changes
    pool_settings.refuse_for_model(cache, engine)
    if dp_attention is not None:
        dp_attention.refuse(spec, engine, bool(spec.towers), bool(pool_settings.speculative_num_steps))
    if engine == "trtllm":
        refuse_mla_workspace(cache)
    served: list[Candidate] = []
    skipped: dict[str, None] = {}
    for layout in layouts(spec):
        try:
            validate_layout(spec, layout)
            ranked = engine == "trtllm" and layout.pp > 1  # each rank as TensorRT-LLM splits the layers, its own budget
            result = inference(spec, breakdown, seq, 1, dtype, kv_dtype, layout=layout, scheme=scheme, stored=stored,
                               parts=trtllm_pp_parts(spec.n_layers, layout.pp) if ranked else None)
            if dp_attention is not None:
                result = dp_attention.held(spec, breakdown, result, layout)
            whole = whole_cache(spec, engine, layout, seq, 1, kv_dtype)  # the layout's, whichever GPU
        except GptcalcError as exc:
            skipped[_skipped(layout, exc)] = None
            continue
        draft = pool_settings.draft(engine, spec, result.weights, layout)
        refused: dict[str, list[str]] = {}  # each reason, the cards of this layout it held on
        for gpu in gpus:
            extra = engine_extra_weights(engine, spec, result.weights, gpu, layout.tp, layout.ep,
                                         attention_tp=dp_attention.attention_tp(layout.tp) if dp_attention else None,
                                         layers=stage_layers(pp_partitions(spec.n_layers, layout.pp),
                                                             result.busiest_stage))
            budget_of = partial(startup_budget, engine, spec, gpu, tp=layout.tp, pp=layout.pp, reserves=reserves,
                                extra=extra, max_model_len=seq, encoder_tp=layout.tp if spec.towers else None,
                                draft=draft, dp=dp_attention.size if dp_attention is not None else None)
            budget = budget_of(result.weights.total_bytes,
                               layers=rank_layers(spec.n_layers, layout.pp, result.busiest_stage) if ranked else None)
            try:
                stages = (sglang_stages(spec, breakdown, result.weights, whole, layout, budget.kv_memory, False)
                          if engine == "sglang" and whole else ())
                ranks = pipeline_ranks(spec, result.gpus, whole, budget.kv_memory, budget_of) if ranked else None
                pool = (pool_settings.pool(spec, result.kv, engine, budget.kv_memory, seq, None,
                                           reserves.max_batched or vllm_batch_defaults(budget.total)[0], layout,
                                           gpu.capability, stages, trtllm_ranks=ranks)
                        if budget.kv_memory > 0 else None)
            except GptcalcError as exc:  # a layout whose pages the engine model does not cover, or not on this card
                refused.setdefault(str(exc), []).append(gpu.name)
                continue
            own = pool.rank_budget if pool else None  # under TensorRT-LLM's --pp: the budget of the rank whose pool
            candidate = Candidate(gpu, layout, result.weights.total_bytes, own or budget, pool, seq, concurrency,
                                  dp_attention.size if dp_attention is not None else 1)
            if candidate.serves:
                served.append(candidate)
        for reason, cards in refused.items():
            skipped[_skipped(layout, reason, tuple(cards) if len(cards) < len(gpus) else ())] = None
    served.sort(key=lambda c: (c.layout.gpus, c.gpu.mib, -c.requests, c.layout.ep))
    return served, list(skipped)
