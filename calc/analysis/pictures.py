"""The numbers behind `plot` and `report`: memory against context, and where the parameters sit.

Exact integers, like everything else in calc.analysis; the renderers turn them into pictures.
Memory at each context is the `memory` command's own answer (`calc.analysis.memory.inference`),
taken at sample points rather than drawn as a line through two of them, so a cache that does not
grow linearly with the context would still be drawn as it is. Parameters are grouped by the part
whose formula produced them (calc/parts/: one home per kind), so the groups are the model's own
structure: embedding, attention, MLP, experts, norms, LM head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.breakdown import Breakdown
from calc.analysis.count import count
from calc.analysis.memory import (ENGINES, GPU, GPUS, Layout, find_gpu, gpu_suggestion, inference, kv_layers,
                                  padded_context, parse_budget, weight_choice)
from calc.errors import GptcalcError
from calc.parts import attention, embedding, mla, mlp, moe, norm
from calc.spec.model import ModelSpec

__all__ = ["GROUPS", "MAX_CONTEXT", "MAX_MODELS", "MemoryCurve", "check_drawable", "groups", "memory_curves", "parse_gpus"]

# What one picture holds. Contexts up to 10^15 tokens (the bound of --seq-max, well inside the 2^53
# a float axis places exactly; past 2^63 matplotlib cannot place a point at all), and at most 64
# models: a line or a bar each (800 bars took minutes to lay out, and no one reads them).
MAX_CONTEXT = 10**15
MAX_MODELS = 64

HEAD = ("project_out", "lm_head", "lm_head_bias")
# Group -> the part modules' component keys, in the order a token meets them.
GROUPS: dict[str, tuple[str, ...]] = {
    "embedding": tuple(key for key in embedding.LABELS if key not in HEAD),
    "attention": (*mla.LABELS, *attention.LABELS),
    "MLP": tuple(mlp.LABELS),
    "experts and router (MoE)": tuple(moe.LABELS),
    "norms": tuple(norm.LABELS),
    "LM head": HEAD,
}
_GROUP_OF = {key: group for group, keys in GROUPS.items() for key in keys}


def groups(b: Breakdown) -> dict[str, int]:
    """Parameters per group (every group, 0 when absent); a component no part names goes to 'other'."""
    totals = dict.fromkeys([*GROUPS, "other"], 0)
    for name, n in b.components.items():
        totals[_GROUP_OF.get(name, "other")] += n
    return totals


@dataclass(frozen=True)
class MemoryCurve:
    """One model's weights + KV cache (batch 1) at each sampled context."""

    model: str
    context: int  # the model's n_positions: beyond it the curve is an extrapolation
    weights_bytes: int
    seqs: tuple[int, ...]
    total_bytes: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "context": self.context, "weights_bytes": self.weights_bytes,
                "points": [{"seq": s, "total_bytes": t} for s, t in zip(self.seqs, self.total_bytes)]}


def memory_curves(specs: list[ModelSpec], seq_max: int, dtype: str | None = None, kv_dtype: str = "fp16",
                  points: int = 64, quant: str | None = None, layout: Layout = Layout(),
                  engine: str | None = None) -> list[MemoryCurve]:
    """Each model from 1 token to `seq_max` at `points` evenly spaced contexts, plus the contexts
    where its line turns — its own context and its sliding windows, past which those layers stop
    growing — so the corners are drawn where they are. Weights as `compare` sizes them
    (`weight_choice`: --quant, --dtype, else as stored), per GPU under `layout`, each context as
    `engine` holds it (llama.cpp pads it to its cells)."""
    check_drawable(len(specs))
    if seq_max > MAX_CONTEXT:
        raise GptcalcError(f"a picture draws contexts up to {MAX_CONTEXT:,} tokens, not {seq_max:,} (the longest "
                           "n_positions of the models, unless --seq-max says less)")
    grid = {max(1, seq_max * i // (points - 1)) for i in range(points)}
    curves = []
    for spec in specs:
        breakdown = count(spec)
        fmt, scheme = weight_choice(spec, dtype, quant)
        corners = {spec.n_positions, *(kind.window for kind in kv_layers(spec) if kind.window)}
        seqs = sorted(grid | {seq for seq in corners if seq < seq_max})
        held = [seq if engine is None else padded_context(ENGINES[engine], seq) for seq in seqs]
        totals = [inference(spec, breakdown, seq, 1, fmt, kv_dtype, layout=layout, scheme=scheme) for seq in held]
        curves.append(MemoryCurve(spec.name, spec.n_positions, totals[0].weights.total_bytes, tuple(seqs),
                                  tuple(t.total_bytes for t in totals)))
    return curves


def check_drawable(models: int) -> None:
    """One picture holds at most MAX_MODELS models (the tables take any number)."""
    if models > MAX_MODELS:
        raise GptcalcError(f"a picture draws at most {MAX_MODELS} models, not {models:,}")


def parse_gpus(text: str | None) -> list[GPU]:
    """`--gpus H100,4090,8xH100-80GB` -> the GPUs, in the order given; N x a card is one line at the N
    cards' memory together (`--budget`'s NxGPU form); an unknown name is bad input."""
    gpus = []
    for name in filter(None, (part.strip() for part in (text or "").split(","))):
        budget = parse_budget(name) if find_gpu(name) is None and "x" in name.lower() else None
        gpu = budget.gpu if budget is not None else find_gpu(name)
        if gpu is None:
            raise GptcalcError(f"--gpus: unknown GPU {name!r}{gpu_suggestion(name)} "
                               f"(known: {', '.join(g.name for g in GPUS)})")
        gpus.append(gpu if budget is None or budget.count == 1 else replace(
            gpu, name=f"{budget.count} x {gpu.name}", marketed=f"{budget.count} x {gpu.marketed}",
            mib=gpu.mib * budget.count))
    return gpus
