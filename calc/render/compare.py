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
    table.add_row(f"weights ({comparison.dtype})", *(_bytes(c.memory.weights.total_bytes) for c in columns))
    table.add_row(f"KV cache ({seq:,} tokens)", *(_bytes(c.memory.kv.total_bytes) for c in columns))
    table.add_row(styled("bold", "weights + KV cache"), *(styled("bold", _bytes(c.memory.total_bytes)) for c in columns))


def _bytes(n: int) -> str:
    """Exact bytes, then binary units (the GPU tables' unit)."""
    return f"{n:,} B ({human_bytes(n)})"
