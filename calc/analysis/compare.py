"""Several models side by side: parameters component by component, and memory at one dtype and context.

The parameter rows are `breakdown.compare` over each model's analytic breakdown — the same
alignment `verify` uses between sources — so a component key (`q`, `mlp_up`, `experts_down`)
is one row whatever kind of layer holds it, and a model without it shows 0. Memory is the
`memory` command's own answer (`calc.analysis.memory.inference`) at one context for every model,
so the columns are comparable: by default the shortest context among them.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.breakdown import Breakdown, Diff, compare
from calc.analysis.count import count
from calc.analysis.memory import AS_STORED, BudgetSpec, Inference, Layout, inference, weight_choice
from calc.spec.model import ModelSpec

__all__ = ["Column", "Comparison", "compare_models", "column_names"]


@dataclass(frozen=True)
class Column:
    """One model: its spec, its analytic count and its memory at the comparison's dtype and context."""

    name: str  # unique within the comparison (`column_names`): the key of its rows in `params`
    spec: ModelSpec
    breakdown: Breakdown
    memory: Inference

    @property
    def layer_kinds(self) -> str:
        """'32' for a uniform stack; '3 dense + 58 moe' when kinds of layer differ."""
        blocks = self.breakdown.blocks
        if len(blocks) == 1:
            return str(blocks[0].layers)
        return " + ".join(f"{block.layers} {block.name}" for block in blocks)

    def to_json(self) -> dict[str, object]:
        b, m = self.breakdown, self.memory
        return {
            "model": self.name,
            "total": b.total,
            "partial": b.partial,
            "decoder_total": b.decoder_total,
            "non_embedding": b.non_embedding,
            "active": b.active if b.active is not None else b.decoder_total,
            "layers": {block.name: block.layers for block in b.blocks},
            "components": dict(b.components),
            "weights_dtype": m.weights.dtype,
            "kv_bytes_per_token": m.kv.bytes_per_token,
            "weights_bytes": m.weights.total_bytes,
            "kv_cache_bytes": m.kv.total_bytes,
            "memory_bytes": m.total_bytes,
        }


@dataclass(frozen=True)
class Comparison:
    columns: tuple[Column, ...]
    seq: int
    dtype: str  # --quant, --dtype, or "as stored" (each column's weights say theirs)
    kv_dtype: str
    layout: Layout = Layout()
    budget: BudgetSpec | None = None  # --budget: does each model fit one GPU of it?

    def fits(self, column: Column) -> int | None:
        """Bytes left on one GPU of the budget once the busiest GPU holds weights + KV cache (negative:
        short by that much), or None without a budget."""
        return None if self.budget is None else column.memory.headroom(self.budget.bytes_per_gpu)

    @property
    def params(self) -> Diff:
        """Parameter rows aligned by component, with totals (0 where a model lacks a component)."""
        return compare({column.name: column.breakdown for column in self.columns})

    def to_json(self) -> dict[str, object]:
        return {"seq": self.seq, "batch": 1, "dtype": self.dtype, "kv_dtype": self.kv_dtype,
                "layout": {"tp": self.layout.tp, "pp": self.layout.pp, "ep": self.layout.ep},
                **({"budget": {"label": self.budget.label, "bytes_per_gpu": self.budget.bytes_per_gpu}}
                   if self.budget else {}),
                "models": [{**column.to_json(), **({"headroom_bytes": self.fits(column)} if self.budget else {})}
                           for column in self.columns]}


def column_names(specs: list[ModelSpec]) -> list[str]:
    """Each model's name, made unique by its argument position while another column has it
    (`x`, `x (2)`), whatever the models are called: models named `x (2)` and `x` keep their names,
    and no two columns ever share one (the rows of `params` are keyed by it)."""
    names: list[str] = []
    for position, spec in enumerate(specs, 1):
        name = spec.name
        while name in names:
            name = f"{name} ({position})"
        names.append(name)
    return names


def compare_models(specs: list[ModelSpec], seq: int | None = None, dtype: str | None = None,
                   kv_dtype: str = "fp16", quant: str | None = None, layout: Layout = Layout(),
                   budget: BudgetSpec | None = None) -> Comparison:
    """Count each model and size its weights + KV cache (batch 1) at `seq` tokens, per GPU under
    `layout`; `seq` None: the shortest context among the models, which every one of them supports.
    Weights at --quant or --dtype when given, else each model as stored (`weight_choice`)."""
    seq = seq or min(spec.n_positions for spec in specs)
    columns = []
    for name, spec in zip(column_names(specs), specs):
        breakdown = count(spec)
        fmt, scheme = weight_choice(spec, dtype, quant)
        columns.append(Column(name, spec, breakdown, inference(spec, breakdown, seq, 1, fmt, kv_dtype, layout=layout,
                                                               scheme=scheme)))
    return Comparison(tuple(columns), seq, quant or dtype or AS_STORED, kv_dtype, layout, budget)
