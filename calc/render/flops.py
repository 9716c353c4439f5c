"""Rich tables for `gptcalc flops`: the matmuls by component, the rules of thumb beside ours, time bounds.

The component rows add up to the printed forward total (tests check it); every figure is printed
exact, with decimal prefixes beside it, in the unit the conventions chose (FLOP or MAC).
"""

from __future__ import annotations

from fractions import Fraction

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.flops import Flops
from calc.analysis.flops.bounds import Bounds
from calc.analysis.flops.checks import Check
from calc.render.base import share
from calc.render.shapes import human_flops
from calc.units import bytes_with_units

__all__ = ["bounds_table", "checks_table", "flops_notes", "flops_table", "human_seconds"]


def _unit(f: Flops) -> str:
    return "MAC" if f.conventions.macs else "FLOP"


def _exact(n: Fraction | int) -> str:
    """A count or a per-token average: whole numbers with commas, a fraction to one decimal."""
    n = Fraction(n)
    return f"{n.numerator // n.denominator:,}" if n.denominator == 1 else f"{float(n):,.1f}"


def _title(f: Flops) -> str:
    unit = "MACs" if f.conventions.macs else "FLOPs"
    if f.title:
        return f"{f.title}: forward {unit}"
    if f.decode:
        return f"{f.model}: forward {unit} of one decode step after T={f.seq:,} cached, batch B={f.batch}"
    return f"{f.model}: forward {unit} of a prefill of T={f.seq:,} tokens, batch B={f.batch}"


def flops_headline(f: Flops) -> str:
    """The answer first: the forward pass in total and per token, and (a prefill) a training step."""
    unit, s = ("MAC" if f.conventions.macs else "FLOP"), f.scale
    what = "one decode step" if f.decode else f"a prefill of {f.seq:,} tokens"
    line = (f"{f.model}: {what} x batch {f.batch:,}: " + styled("bold", human_flops(f.forward / s, unit))
            + f" ({f.forward // s:,}), {human_flops(float(f.per_token(f.forward)) / s, unit)} per token")
    return line if f.decode else line + f"; a training step on them {human_flops(f.training()['none'] / s, unit)}"


def flops_table(f: Flops) -> Table:
    """One row per matmul; block rows per layer × layers; the forward total and per token at the bottom."""
    s, unit = f.scale, _unit(f)
    table = Table(title=_title(f))
    for header, justify in (("component", "left"), ("formula", "left"), ("per layer", "right"),
                            ("layers", "right"), (f"{unit}s", "right"), ("human", "right"), ("share", "right")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    previous = None
    for row in f.rows:
        if row.block != previous:
            table.add_section()
            previous = row.block
        kind = " " + styled("dim", f"({row.block})") if row.block and len(f.layers) > 1 else ""
        formula = row.formula.removeprefix("2·") if f.conventions.macs else row.formula
        table.add_row(row.label + kind, formula, f"{row.flops // s:,}" if row.block else "",
                      str(row.layers) if row.block else "", f"{row.total // s:,}", human_flops(row.total // s, unit),
                      share(row.total, f.forward))
    table.add_section()
    table.add_row(styled("bold", "forward total"), "", "", "", styled("bold", f"{f.forward // s:,}"), human_flops(f.forward // s, unit),
                  share(f.forward, f.forward))
    per_token = f.per_token(f.forward) / s
    table.add_row(f"per {f.per} (÷ {f.tokens:,})", "", "", "", _exact(per_token), human_flops(float(per_token), unit), "")
    return table


def flops_notes(f: Flops) -> list[str]:
    """Training steps (prefill), attention's share and the conventions, in sentences."""
    s, unit = f.scale, _unit(f)
    notes = []
    if not f.decode:
        steps = f.training()
        notes += [
            f"training step on these {f.tokens:,} tokens = forward + backward (2× forward): "
            f"{steps['none'] // s:,} ({human_flops(steps['none'] // s, unit)})",
            f"  with selective recomputation (attention scores and values again): {steps['selective'] // s:,} "
            f"({human_flops(steps['selective'] // s, unit)})",
            f"  with full recomputation (every block's forward again): {steps['full'] // s:,} "
            f"({human_flops(steps['full'] // s, unit)})",
            "  MFU counts the step without recomputation (model FLOPs); hardware FLOPs include it",
        ]
    notes.append(f"attention scores and weighted values: {share(f.attention, f.forward)} of the forward pass; "
                 "MoE experts count the k each token is routed to")
    notes += ["conventions: " + line if i == 0 else "  " + line
              for i, line in enumerate(f.conventions.described(f.decode))]
    return notes


def checks_table(f: Flops, rows: tuple[Check, ...]) -> Table:
    """Ours and each rule of thumb per token, weights term and attention term apart, and the difference."""
    s, unit = f.scale, _unit(f)
    table = Table(title=f"per token: ours beside the rules of thumb ({unit}s)")
    for header in ("", "formula", "weights term", "attention term", "total", "ours − rule"):
        table.add_column(header, justify="left" if header in ("", "formula") else "right")
    ours = {c.name: c for c in rows if not c.compare_to}
    for c in rows:
        diff = ""
        if c.compare_to:
            gap = (ours[c.compare_to].total - c.total) / s
            diff = f"{'+' if gap >= 0 else ''}{_exact(gap)} ({float(gap / (c.total / s)):+.1%})" if c.total else ""
        style = "bold" if not c.compare_to else None
        table.add_row(c.name, c.formula, _exact(c.weights / s), _exact(c.attention / s),
                      _exact(c.total / s), diff, style=style)
    return table


CHECK_NOTES = (
    "N = non-embedding parameters (Kaplan's N; a MoE's active ones). Our weights term is 2× each weight a token "
    "multiplies: the LM head",
    "  too (2·d_model·vocab, which N leaves out), never a norm's or bias's parameters (which N counts).",
    "Kaplan's attention term is half of QKᵀ plus A·V (4·n_ctx·d_attn per layer) — the causal average; PaLM's "
    "12·L·H·Q·T is both in full,",
    "  times 3, with no sliding window: it equals ours exactly without --causal-half when no layer has a window and "
    "values are as wide as keys.",
)


def human_seconds(t: Fraction) -> str:
    for size, unit in ((1, "s"), (Fraction(1, 1000), "ms"), (Fraction(1, 10**6), "µs")):
        if t >= size:
            return f"{float(t / size):.3g} {unit}"
    return f"{float(t * 10**9):.3g} ns"


def bounds_table(f: Flops, all_bounds: list[Bounds]) -> Table:
    """Per GPU: prefill (and training step) time bounds, or a decode step's read bound and tokens/s."""
    first = all_bounds[0]
    if f.decode:
        table = Table(title=f"decode lower bounds: (weights read + KV cache read) / bandwidth, {first.dtype}")
        headers = ("GPU", "bandwidth", "weights read", "KV cache read", "step ≥", "tokens/s ≤ (B / step)")
    else:
        table = Table(title=f"prefill lower bounds: FLOPs / peak bf16, and at MFU {float(first.mfu):.0%}")
        headers = ("GPU", "peak bf16", "prefill ≥ (100%)", f"prefill at MFU {float(first.mfu):.0%}",
                   f"training step at MFU {float(first.mfu):.0%}")
    for header in headers:
        table.add_column(header, justify="left" if header == "GPU" else "right")
    for b in all_bounds:
        if f.decode:
            table.add_row(b.gpu.name, f"{b.gpu.bandwidth / 10**9:,.0f} GB/s", bytes_with_units(b.weight_bytes),
                          bytes_with_units(b.kv_bytes), human_seconds(b.decode_step_seconds),
                          f"{float(b.tokens_per_second):,.1f}")
        else:
            training = b.compute_seconds(b.training_flops, b.mfu) if b.training_flops else None
            table.add_row(b.gpu.name, f"{b.gpu.bf16_flops / 10**12:,.1f} TFLOP/s", human_seconds(b.compute_seconds(b.flops)),
                          human_seconds(b.compute_seconds(b.flops, b.mfu)), human_seconds(training) if training else "")
    return table


def bounds_notes(f: Flops) -> list[str]:
    if f.decode:
        return ["a decode step reads every weight it multiplies once (a MoE: k experts per layer, the fewest a batch "
                "can read; not the embedding table,",
                "  of which a lookup reads B rows, unless the head is tied to it) and the whole KV cache once;",
                "  step ≥ max(bytes / bandwidth, FLOPs / peak): a bound, real steps are slower (kernels, overheads)"]
    return ["time ≥ FLOPs / (peak dense bf16 × MFU): a bound; peaks are vendor datasheet figures (calc/analysis/memory/gpus.py)"]
