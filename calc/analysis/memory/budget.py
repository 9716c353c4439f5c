"""What inference holds (weights + KV cache), and the inverse question: what fits in a budget.

    free       = budget - weights
    max batch  = floor(free / kv(seq, batch=1))                  # the cache is linear in the batch
    max seq    = the largest s with kv(s, batch) <= free          # kv(s) stops growing on windowed layers

A cache of only sliding-window layers (Mistral-7B-v0.1) stops growing at its window: memory then
does not bound the context, the model's n_positions does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.gpus import GPU, GPUS, find_gpu, gpu_suggestion
from calc.analysis.memory.kv import KVCache, kv_cache
from calc.analysis.memory.offload import Offload, offload, on_gpu
from calc.analysis.memory.parallel import Layout, stage_kv, stages, validate_layout
from calc.analysis.memory.towers import tower_params
from calc.analysis.memory.schemes import Scheme
from calc.analysis.memory.stored import StoredWeights
from calc.analysis.memory.weights import Weights, weights
from calc.errors import GptcalcError
from calc.inputs import strict_int
from calc.spec.model import ModelSpec
from calc.units import parse_bytes

if TYPE_CHECKING:  # engines load only when a pool is sized, not with every budget (start-up time)
    from calc.analysis.memory.engines import KVPool

__all__ = ["Budget", "Inference", "budget_for", "inference", "logits_bytes", "parse_budget", "solve_budget"]


def logits_bytes(spec: ModelSpec, seq: int, batch: int) -> int:
    """fp32 logits for every prompt position during prefill: batch x seq x vocab_size x 4 B."""
    return batch * seq * spec.vocab_size * 4


@dataclass(frozen=True)
class GPUShare:
    """What one GPU holds: its shard of the weights and the cache of its layers."""

    weights: Weights
    kv: KVCache

    @property
    def total_bytes(self) -> int:
        return self.weights.total_bytes + self.kv.total_bytes


@dataclass(frozen=True)
class Inference:
    """What inference holds for the whole run: the weights plus the KV cache at seq x batch, on the
    busiest GPU of the layout (the whole model on one GPU by default)."""

    weights: Weights
    kv: KVCache
    logits_bytes: int  # an estimate shown beside the total, never added to it
    layout: Layout = Layout()
    gpus: tuple[GPUShare, ...] = ()  # one per pipeline stage (each stands for its tp GPUs)
    model_weights_bytes: int = 0  # the whole model's weights, all GPUs together
    offload: Offload | None = None  # routed experts kept in system RAM (not in the GPU figures)

    @property
    def total_bytes(self) -> int:
        return self.weights.total_bytes + self.kv.total_bytes

    @property
    def busiest_stage(self) -> int:
        """The pipeline stage whose GPU the figures are (an engine that profiles each rank sizes its budget)."""
        return _busiest(self.gpus)

    def headroom(self, capacity: int) -> int:
        """Bytes left on a device of `capacity` bytes (negative: it does not fit)."""
        return capacity - self.total_bytes

    def to_json(self) -> dict[str, object]:
        return {
            "layout": {"tp": self.layout.tp, "pp": self.layout.pp, "ep": self.layout.ep, "gpus": self.layout.gpus},
            "per_gpu": self.layout.gpus > 1,
            "model_weights_bytes": self.model_weights_bytes,
            "cpu_experts": self.offload.to_json() if self.offload else None,
            "stages": [{"weights_bytes": g.weights.total_bytes, "kv_bytes": g.kv.total_bytes, "total_bytes": g.total_bytes}
                       for g in self.gpus],
            "weights": self.weights.to_json(),
            "kv_cache": self.kv.to_json(),
            "total_bytes": self.total_bytes,
            "not_included": ["activations", "framework and CUDA context overhead", "prefill logits"],
            "prefill_logits_bytes_estimate": self.logits_bytes,
            "gpus": [
                {"gpu": g.name, "bytes": g.bytes, "fits": self.headroom(g.bytes) >= 0,
                 "headroom_bytes": self.headroom(g.bytes)}
                for g in GPUS
            ],
        }


def inference(spec: ModelSpec, breakdown: Breakdown, seq: int, batch: int = 1, dtype: str = "fp16",
              kv_dtype: str | None = None, group_size: int | None = None, expanded: bool = False,
              layout: Layout = Layout(), scheme: Scheme | None = None,
              stored: StoredWeights | None = None, cpu_experts: int = 0, text_only: bool = False,
              encoder_replicated: bool = False, parts: list[int] | None = None) -> Inference:
    """Weights at `dtype` (or as a checkpoint stores them) and the cache at `kv_dtype`: 16-bit unless
    given, whatever the weights are (servers keep a 16-bit cache for quantised weights unless told
    otherwise). Under a layout of several GPUs the figures are the busiest GPU's. `cpu_experts` blocks
    (from 0) keep their routed experts in system RAM, as llama.cpp's --n-cpu-moe does. A multimodal
    model's towers sit with the first stage (calc/analysis/memory/towers.py) unless `text_only`. `parts`: the layers
    per pipeline stage where an engine splits them otherwise than vLLM (TensorRT-LLM's: trtllm_v2_pp)."""
    validate_layout(spec, layout)
    towers = {} if text_only else tower_params(breakdown, layout, encoder_replicated)
    whole = weights(breakdown, dtype, group_size, scheme, spec, stored)
    if text_only:
        whole = replace(whole, params={name: n for name, n in whole.params.items() if name in breakdown.components})
    kv = kv_cache(spec, seq, batch, kv_dtype or "fp16", layout.tp, expanded)
    order = list(breakdown.components)
    if cpu_experts and layout.gpus > 1:
        raise GptcalcError("--cpu-experts: llama.cpp's expert offload is for one GPU; drop --tp/--pp or a multi-GPU --budget")
    moved = offload(spec, breakdown, whole, cpu_experts) if cpu_experts else None
    shares = tuple(GPUShare(replace(whole, params={**on_gpu({n: st.params[n] for n in order if n in st.params}, moved),
                                                   **(towers if st.index == 0 else {})}),
                            stage_kv(spec, kv, st))
                   for st in stages(spec, breakdown, layout, parts))
    busiest = shares[_busiest(shares)]
    return Inference(busiest.weights, busiest.kv, logits_bytes(spec, seq, batch), layout, shares, whole.total_bytes,
                     moved)


def _busiest(shares: tuple[GPUShare, ...]) -> int:
    """The stage whose GPU holds the most weights and cache, the first of equals."""
    return max(range(len(shares)), key=lambda stage: shares[stage].total_bytes)


@dataclass(frozen=True)
class BudgetSpec:
    """--budget read: bytes per GPU, how many GPUs, and how to say it."""

    bytes_per_gpu: int
    count: int
    label: str
    gpu: GPU | None = None  # the catalog's card, when the budget names one


def parse_budget(text: str) -> BudgetSpec:
    """`--budget`: a GPU name (its reported memory), N x a GPU ('2xH100-80GB', '8 x A100-40GB'), or a size
    with a unit such as 80GB or 75GiB. A bare number is refused: 80 could be GB, GiB or bytes."""
    names = ", ".join(g.name for g in GPUS)
    count, _, rest = text.strip().partition("x")
    if count.strip().isascii() and count.strip().isdigit() and rest and find_gpu(rest):
        gpus = strict_int(count.strip(), "--budget")
        if gpus < 1:
            raise GptcalcError(f"--budget {text!r}: at least one GPU")
        single = parse_budget(rest)
        return BudgetSpec(single.bytes_per_gpu, gpus, f"{gpus} x {single.label}", single.gpu)
    if gpu := find_gpu(text):
        return BudgetSpec(gpu.bytes, 1, f"{gpu.name} (reported total {gpu.mib:,} MiB)", gpu)
    if text.strip().replace("_", "").replace(".", "", 1).isdigit():
        raise GptcalcError(f"--budget {text!r}: give a unit (80GB, 80GiB) or a GPU ({names})")
    try:
        return BudgetSpec(parse_bytes(text), 1, text)
    except ValueError as exc:
        if hint := gpu_suggestion(text.strip()) or (gpu_suggestion(rest) if rest else ""):
            raise GptcalcError(f"--budget {text!r}: unknown GPU{hint}") from None
        raise GptcalcError(f"--budget: {exc}, or a GPU ({names}), or N of them (2xH100-80GB)") from None


def _largest(fits, hi: int) -> int:  # type: ignore[no-untyped-def]
    """The largest n in [0, hi] with fits(n), for a monotone `fits` that holds at 0."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


@dataclass(frozen=True)
class Budget:
    """The inverse question: the longest seq at a batch, or the largest batch at a seq, that fits."""

    budget_bytes: int
    weights_bytes: int
    kv: KVCache  # the model's cache layout (its seq and batch are not used)
    solve_for: str  # "seq" or "batch"
    fixed: int  # the batch (solving for seq) or the seq (solving for batch)
    context: int  # the model's n_positions
    pool: KVPool | None = None  # the engine's pool (memory --engine): it answers the largest batch

    @property
    def engine(self) -> KVPool | None:
        """The engine's pool when it answers: solving for the batch, its blocks hold `requests` of
        --seq tokens, which is what the engine admits (its pages, not the format's bytes per token)."""
        return self.pool if self.pool is not None and self.solve_for == "batch" else None

    @property
    def free_bytes(self) -> int:
        return self.budget_bytes - self.weights_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.kv.bytes_per_token

    def cache_bytes(self, seq: int, batch: int) -> int:
        """The cache at seq x batch (windowed layers capped), fixed per-sequence states included."""
        return self.kv.bytes_at(seq, batch)

    @property
    def by_memory(self) -> int | None:
        """The most memory allows; None when the cache stops growing below the budget (all layers windowed)."""
        free = max(self.free_bytes, 0)
        if self.engine is not None:
            return self.engine.requests
        if self.solve_for == "batch":
            return free // self.cache_bytes(self.fixed, 1)
        growing = sum(k.bytes_per_token(self.kv.format) for k in self.kv.layers if not k.window) * self.fixed
        windows = max((k.window or 0) for k in self.kv.layers) if self.kv.layers else 0
        if not growing:
            return None if self.cache_bytes(windows, self.fixed) <= free else \
                _largest(lambda s: self.cache_bytes(s, self.fixed) <= free, windows)
        return _largest(lambda s: self.cache_bytes(s, self.fixed) <= free, free // growing + windows)

    @property
    def answer(self) -> int:
        """by_memory, and for seq also no more than the model's context."""
        if self.solve_for == "batch":
            return self.by_memory or 0
        return self.context if self.by_memory is None else min(self.by_memory, self.context)

    @property
    def limited_by(self) -> str:
        if self.free_bytes < 0:
            return "weights"
        if self.by_memory == 0:
            return "memory"
        return "context" if self.by_memory is None or self.answer < self.by_memory else "memory"

    def to_json(self) -> dict[str, object]:
        return {
            "budget_bytes": self.budget_bytes,
            "weights_bytes": self.weights_bytes,
            "free_bytes": self.free_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "solve_for": self.solve_for,
            "batch" if self.solve_for == "seq" else "seq": self.fixed,
            f"max_{self.solve_for}": self.answer,
            f"max_{self.solve_for}_by_memory": self.by_memory,
            "limited_by": self.limited_by,
            "answered_by": self.engine.engine.name if self.engine else "kv_cache",
        }


def solve_budget(spec: ModelSpec, budget_bytes: int, weights_bytes: int, kv_dtype: str,
                 solve_for: str, fixed: int, expanded: bool = False) -> Budget:
    """Solve weights + kv(seq, batch) <= budget for seq (fixed = batch) or batch (fixed = seq)."""
    if solve_for not in ("seq", "batch"):
        raise ValueError(f"solve_for must be 'seq' or 'batch', not {solve_for!r}")
    if fixed < 1:
        raise GptcalcError(f"--{'batch' if solve_for == 'seq' else 'seq'}: must be at least 1, got {fixed}")
    return Budget(budget_bytes, weights_bytes, kv_cache(spec, 1, 1, kv_dtype, expanded=expanded), solve_for, fixed,
                  spec.n_positions)


def layout_for(budget: BudgetSpec | None, tp: int | None, pp: int | None, ep: int | None) -> Layout:
    """The layout from --tp/--pp/--ep, or from the budget's GPU count (all tensor parallel) when
    neither --tp nor --pp is given; a count that disagrees with tp x pp is bad input."""
    if budget and budget.count > 1 and tp is None and pp is None:
        tp = budget.count
    layout = Layout(tp or 1, pp or 1, ep or 1)
    if budget and budget.count > 1 and budget.count != layout.gpus:
        raise GptcalcError(f"--budget {budget.label}: {budget.count} GPUs, but --tp x --pp = {layout.gpus}")
    return layout


def budget_for(spec: ModelSpec, budget: BudgetSpec, result: Inference, seq: int | None,
               batch: int | None, pool: KVPool | None = None) -> Budget:
    """`memory --budget`: with --seq, the largest batch; otherwise the longest context at --batch
    (default 1). Both given leaves nothing to solve for. Under pipeline parallelism each stage is
    solved with its own weights and layers, and the tightest stage answers. With an engine's `pool`
    the largest batch is the requests its blocks hold, so the answer and the engine's line agree."""
    if seq and batch:
        raise GptcalcError("--budget: give --seq (to solve for the batch) or --batch (to solve for the context), not both")
    solve_for, fixed = ("batch", seq) if seq else ("seq", batch or 1)
    if fixed < 1:
        raise GptcalcError(f"--{'batch' if solve_for == 'seq' else 'seq'}: must be at least 1, got {fixed}")
    answers = [Budget(budget.bytes_per_gpu, share.weights.total_bytes, share.kv, solve_for, fixed, spec.n_positions,
                      pool) for share in result.gpus]
    return min(answers, key=lambda b: (b.answer, b.free_bytes))
