"""The side-by-side table of `compare` (and of `count` given several models): a column per model.

Three sections: each model's shape, its parameters component by component (one row per
component key, so the same matrix lines up across models; '-' where a model has none), and
memory at the comparison's dtype and context. Parameter rows add up to each column's total.
"""

from __future__ import annotations

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.breakdown import label
from calc.analysis.compare import Column, Comparison
from calc.render.base import SHAPE_HEADERS, shape_cells
from calc.units import human_bytes, human_count

__all__ = ["compare_table"]


def compare_headlines(comparison: Comparison) -> list[str]:
    """The answer first: each model's total, and its memory (and with a budget whether it fits)."""
    lines = []
    for c in comparison.columns:
        line = (f"{c.name}: {human_count(c.breakdown.total)} parameters, weights + KV cache "
                + styled("bold", human_bytes(c.memory.total_bytes)) + f" at seq {comparison.seq:,}")
        left = comparison.fits(c)
        if left is not None:
            line += f"; {'fits' if left >= 0 else 'does not fit'} {comparison.budget.label}"  # type: ignore[union-attr]
        lines.append(line)
    return lines


def compare_table(comparison: Comparison, memory: bool = True) -> Table:
    """One table, a column per model; `memory=False` leaves out the bytes section (`count`)."""
    columns = comparison.columns
    table = Table(title=" vs ".join(column.name for column in columns))
    table.add_column("")
    for column in columns:
        table.add_column(column.name, justify="right")
    _shape(table, columns)
    table.add_section()
    _params(table, comparison)
    if memory:
        table.add_section()
        _memory(table, comparison)
    return table


def _shape(table: Table, columns: tuple[Column, ...]) -> None:
    cells = [shape_cells(column.spec) for column in columns]
    for i, header in enumerate(SHAPE_HEADERS):
        values = [column.layer_kinds for column in columns] if header == "layers" else [c[i] for c in cells]
        table.add_row(header, *values)
    table.add_row("attention", *(" + ".join(dict.fromkeys(kind.kind for kind in c.memory.kv.layers))
                                 for c in columns))


def _params(table: Table, comparison: Comparison) -> None:
    columns = comparison.columns
    diff = comparison.params
    for row in diff.rows:
        table.add_row(label(row.component), *(_count_cell(row.component, row.values[c.name], c) for c in columns))
    if any(c.breakdown.towers or c.breakdown.partial for c in columns):  # a multimodal model's encoders
        table.add_row("towers (vision, audio)", *(f"{c.breakdown.towers_total:,}" + (" (partial)" * c.breakdown.partial)
                                                  for c in columns))
    table.add_section()
    table.add_row(styled("bold", "total"), *(styled("bold", f"{c.breakdown.total:,}") for c in columns))
    table.add_row("", *(human_count(c.breakdown.total) for c in columns))
    table.add_row("non-embedding", *(f"{c.breakdown.non_embedding:,}" for c in columns))
    table.add_row("active per token", *(f"{_active(c):,}" for c in columns))


def _count_cell(component: str, n: int, column: Column) -> str:
    if n:
        return f"{n:,}"
    return "tied" if component == "lm_head" and column.breakdown.tied else "-"


def _active(column: Column) -> int:
    """A MoE's parameters per token; a dense model uses all of them."""
    active = column.breakdown.active
    return column.breakdown.decoder_total if active is None else active  # a text token: the decoder


def _memory(table: Table, comparison: Comparison) -> None:
    columns, seq = comparison.columns, comparison.seq
    table.add_row(f"KV bytes per token ({comparison.kv_dtype})", *(f"{c.memory.kv.bytes_per_token:,}" for c in columns))
    stored = comparison.dtype == "as stored"  # each model's own format, named in its cell
    table.add_row(f"weights ({comparison.dtype})", *(_bytes(c.memory.weights.total_bytes)
                                                      + (f" {c.memory.weights.dtype}" if stored else "") for c in columns))
    table.add_row(f"KV cache ({seq:,} tokens)", *(_bytes(c.memory.kv.total_bytes) for c in columns))
    layout = comparison.layout
    where = f" per GPU (busiest of {layout.gpus}: tp {layout.tp} x pp {layout.pp})" if layout.gpus > 1 else ""
    table.add_row(styled("bold", "weights + KV cache" + where),
                  *(styled("bold", _bytes(c.memory.total_bytes)) for c in columns))
    if comparison.budget is not None:
        table.add_row(f"fits {comparison.budget.label}?", *(_fits(comparison.fits(c)) for c in columns))


def _fits(left: int | None) -> str:
    if left is None:
        return "-"
    return styled("green", "yes") + f", {human_bytes(left)} left" if left >= 0 else \
        styled("red", "no") + f", {human_bytes(-left)} short"


def _bytes(n: int) -> str:
    """Exact bytes, then binary units (the GPU tables' unit)."""
    return f"{n:,} B ({human_bytes(n)})"
