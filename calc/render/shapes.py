"""The rich table for `gptcalc shapes`: one row per step, each block kind once with "× its layers".

Like every table in gptcalc, its totals add up: the params column (each block kind's rows × its
layers, plus the rest) equals the analytic count's total, and the FLOPs column sums to the printed
forward FLOPs.
"""

from __future__ import annotations

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.shapes import FLOP_CONVENTION, Journey, Step
from calc.units import count_with_units

__all__ = ["human_flops", "shapes_notes", "shapes_table"]

_PREFIXES = ((10**18, "E"), (10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def human_flops(n: float, unit: str = "FLOP") -> str:
    """927462912 -> '927.46 MFLOP' (decimal prefixes); `unit` 'MAC' for multiply-accumulates."""
    for size, prefix in _PREFIXES:
        if n >= size:
            return f"{n / size:.2f} {prefix}{unit}"
    return f"{n:g} {unit}"


def _title(j: Journey) -> str:
    if j.title:
        return j.title
    if j.decode:
        return f"{j.model}: decode 1 new token after T={j.seq} cached, batch B={j.batch}"
    return f"{j.model}: prefill of T={j.seq} tokens, batch B={j.batch}"


# (header, justify); `explain` swaps the numbers for a sentence per step so the table still fits.
_NUMBERS = (("step", "left"), ("input", "left"), ("weight [in, out]", "left"), ("output", "left"),
            ("output dims", "left"), ("params", "right"), ("FLOPs", "right"))
_EXPLAIN = (("step", "left"), ("output", "left"), ("output dims", "left"), ("why", "left"))


def _cells(step: Step) -> dict[str, str]:
    label = step.label if step.traced else styled("italic", step.label) + " ·"
    return {
        "step": label,
        "input": ", ".join(map(str, step.inputs)),
        "weight [in, out]": str(step.weight or "") or (f"state {step.state}" if step.state else ""),
        "output": str(step.output),
        "output dims": step.output.symbolic,
        "params": f"{step.params:,}" if step.params else "",
        "FLOPs": f"{step.flops:,}" if step.flops else "",
        "why": step.note,
    }


def shapes_table(j: Journey, explain: bool = False) -> Table:
    """Embeddings, then each block kind (marked × its layers), then the head; totals at the bottom.

    `explain` shows each step's one-sentence note instead of its input, weight and counts.
    """
    columns = _EXPLAIN if explain else _NUMBERS
    table = Table(title=_title(j))
    for header, justify in columns:
        wraps = header in ("step", "why")
        table.add_column(header, justify=justify, no_wrap=not wraps)  # type: ignore[arg-type]

    def add(cells: dict[str, str], style: str | None = None) -> None:
        table.add_row(*(cells.get(header, "") for header, _ in columns), style=style)

    one = len(j.layers) == 1
    for index, step in enumerate(j.steps):
        kind = step.block
        if kind and (index == 0 or j.steps[index - 1].block != kind):
            table.add_section()
            n = j.layers[kind]
            add({"step": styled("bold", f"block{'' if one else ' ' + kind} × {n} layer{'s' if n > 1 else ''}")})
        add(_cells(step), None if step.traced else "dim")
        if kind and (index + 1 == len(j.steps) or j.steps[index + 1].block != kind):
            if not explain:
                add({"step": "one block" if one else f"one {kind} block",
                     "params": f"{j.block_total(kind, 'params'):,}", "FLOPs": f"{j.block_total(kind, 'flops'):,}"},
                    "bold")
            table.add_section()
    if not explain:
        table.add_section()
        add({"step": f"total ({_stack(j)})", "params": f"{j.params:,}", "FLOPs": f"{j.flops:,}"}, "bold")
    return table


def _stack(j: Journey) -> str:
    """'block × 12', or 'dense × 3, moe × 58' for several block kinds."""
    if len(j.layers) == 1:
        return f"block × {j.n_layers}"
    return ", ".join(f"{kind} × {n}" for kind, n in j.layers.items())


def _per_layer(j: Journey) -> str:
    """'70,855,680 (70.86 MFLOP) per layer', or one such figure per block kind."""
    if j.flops_per_layer is not None:
        return f"{j.flops_per_layer:,} ({human_flops(j.flops_per_layer)}) per layer"
    return "per layer: " + ", ".join(f"{kind} {human_flops(j.block_total(kind, 'flops'))}" for kind in j.layers)


def shapes_notes(j: Journey) -> list[str]:
    """The sentences under the table: totals in human units and the conventions behind them."""
    rule, zeros = FLOP_CONVENTION.split("; ", 1)
    notes = [
        f"parameters: {count_with_units(j.params)} (each counted once: {j.counted})",
        f"FLOPs of this pass: {j.flops:,} ({human_flops(j.flops)}), {_per_layer(j)}",
        f"FLOP convention: {rule}",
        f"  {zeros}",
        "weights are shown [in, out] as in x @ W (torch nn.Linear stores [out, in]); "
        "rows marked · explain a step that makes no tensor of its own",
    ]
    if j.decode:
        notes.append(f"decode: queries have length 1; keys and values T+1 = {j.keys} (the cache plus the new token)")
    return [*notes, *j.notes]
