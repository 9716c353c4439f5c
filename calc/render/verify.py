"""The `verify` table: one column per source of truth, the differences, ✓/✗, then the totals.

It draws any number of sources from a `calc.analysis.breakdown.Diff`: the first source is the reference
(analytic), each other source gets its own difference column against it, so a checkpoint column
drops in beside torch without changing this module.
"""

from __future__ import annotations

from typing import Any

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.breakdown import Diff, label
from calc.render.checkpoint import problem_lines, verify_checkpoint_lines
from calc.units import human_count
from calc.verify import WITHOUT_TORCH, Verification, diff_verdict

__all__ = ["difference_columns", "load_lines", "transformers_lines", "verify_lines", "verify_table"]

OK, BAD = styled("green", "✓"), styled("bold red", "✗")


def difference_columns(diff: Diff) -> list[str]:
    """`difference` for two sources; `<source> − <reference>` for each further source otherwise."""
    reference, *others = diff.sources
    if len(others) == 1:
        return ["difference"]
    return [f"{source} − {reference}" for source in others]


def _differences(values: dict[str, int], sources: tuple[str, ...]) -> list[str]:
    """Each source against the reference; blank where a source has no value (a tower row of a
    source that builds the decoder alone)."""
    reference = values[sources[0]]
    return ["" if s not in values else f"{values[s] - reference:+,}" if values[s] != reference else "0"
            for s in sources[1:]]


def verify_table(model: str, diff: Diff, verdict: str | None = None) -> Table:
    """Rows of components (label and key), one count column per source, differences, ✓/✗, totals.

    `verdict` is the headline (`Verification.verdict`, which also decides the exit code); without
    one, the diff's own."""
    verdict = verdict or diff_verdict(diff)
    table = Table(title=f"{model}: {' vs '.join(diff.sources)} ({verdict})")
    table.add_column("component")
    for header in (*diff.sources, *difference_columns(diff)):
        table.add_column(header, justify="right")
    table.add_column("", justify="center")
    for row in diff.rows:
        name = f"{label(row.component)} " + styled("dim", f"({row.component})")
        cells = [f"{row.values[s]:,}" if s in row.values else "—" for s in diff.sources]
        table.add_row(name, *cells, *_differences(row.values, diff.sources), OK if row.ok else BAD,
                      style=None if row.ok else "red")
    table.add_section()
    totals_ok = len(set(diff.totals.values())) <= 1
    table.add_row(styled("bold", "total"), *(styled("bold", f"{diff.totals[s]:,}") for s in diff.sources),
                  *_differences(diff.totals, diff.sources), OK if totals_ok else BAD)
    table.add_row("", *(human_count(diff.totals[s]) for s in diff.sources), *[""] * (len(diff.sources) - 1), "")
    return table


def verify_lines(result: Verification) -> list[str]:
    """The sentences under the table: how the head is treated, each mismatch by name, then the
    checkpoint's own findings."""
    diff, breakdowns = result.diff, result.sources
    lines = []
    tied = {name for name, b in breakdowns.items() if b.tied}
    if tied:
        untied = sorted(set(breakdowns) - tied)
        lines.append(f"LM head tied to the token embedding in {', '.join(sorted(tied))}: counted once (0 for the head)"
                     + (f"; untied in {', '.join(untied)}" if untied else ""))
    lines.append("buffers (rotary frequencies, causal masks) are not parameters and are not counted")
    lines += [towers_line(b, [name for name, other in breakdowns.items() if other.towers], list(breakdowns))
              for b in breakdowns.values() if b.towers or b.partial][:1]
    for row in diff.mismatches:
        values = ", ".join(f"{source} {value:,}" for source, value in row.values.items())
        lines.append(styled("red", f"✗ mismatch: {label(row.component)} ({row.component}): {values}"))
    if diff.ok:
        lines.append(styled("green", f"✓ all {len(diff.rows)} components and the total agree"))
    if result.transformers is not None:
        lines += transformers_lines(result.transformers)
    if result.checkpoint is not None:
        lines += verify_checkpoint_lines(result.checkpoint)
    if result.loaded is not None:
        lines += load_lines(result.loaded)
    if result.without_torch:
        lines.append(f"note: {WITHOUT_TORCH}")
    return lines


def towers_line(b: Any, counting: list[str], every: list[str]) -> str:
    """How a multimodal model's towers were compared: row by row among the sources that count them
    (`counting`: the formulas, transformers' whole model, a checkpoint); the totals are the language
    model's unless every source counts the towers (the torch reference builds the decoder alone)."""
    if b.partial:
        return f"PARTIAL: the {', '.join(b.uncounted)} are not counted; the totals compared are the language model's"
    towers = f"the towers ({', '.join(t.name for t in b.towers)}: {b.towers_total:,} parameters)"
    if len(counting) == len(every) > 1:
        return f"{towers} are compared row by row among {', '.join(counting)}, and in the totals"
    if len(counting) < 2:
        return (f"{towers} are counted by count, not compared here (no other source counts them): the totals "
                f"compared are the language model's ({b.decoder_total:,})")
    return (f"{towers} are compared row by row among {', '.join(counting)}; the torch reference builds the "
            f"language model alone, so the totals compared are the language model's ({b.decoder_total:,})")


def transformers_lines(source: Any) -> list[str]:
    """What transformers' model was compared by, and what of it disagrees."""
    lines = [source.note]
    if source.report is not None:
        lines += problem_lines(source.report) or ["✓ every transformers parameter has the name and shape the spec implies"]
    elif source.total is not None:
        mark = "✓" if source.ok else "✗"
        lines.append(f"{mark} transformers' total {source.total:,}, analytic {source.analytic_total:,}")
    return lines


def load_lines(loaded: Any) -> list[str]:
    """`--load`'s verdict, then transformers' logits on the same weights (or why they were not compared)."""
    ran = loaded.ok or loaded.transformers is not None  # transformers is compared only after our forward pass passed
    lines = [f"{'✓' if ran else '✗'} --load: {loaded.message}"]
    if loaded.transformers is not None:
        comparison = loaded.transformers
        mark = ("✓" if comparison.ok else "✗") if comparison.compared else "•"
        lines.append(f"{mark} --load: {comparison.message}")
    return lines
