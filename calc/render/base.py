"""The tables of `count` and `presets`, and the shared console/JSON helpers.

Renderers take result objects and draw them; they compute nothing a test would need to trust.
Every count table's rows add up to its printed total (tests check this, as torchinfo does).
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from calc.render.markup import styled
from calc.render.output import console
from calc.render.table import Table

from calc.analysis.breakdown import Breakdown, label
from calc.spec.model import ModelSpec
from calc.units import count_with_units, human_count

__all__ = ["FALLBACK_NOTE", "SHAPE_HEADERS", "shape_cells", "console", "count_notes", "count_table", "module_table",
           "partial_mark", "presets_table", "print_json", "share"]


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour codes: it is for programs)."""
    print(json.dumps(data, indent=2))


def share(part: int, total: int) -> str:
    return f"{100 * part / total:.2f}%" if total else "-"


def count_table(spec: ModelSpec, b: Breakdown) -> Table:
    """The breakdown: outside-the-stack rows, each kind of block x its layers, then each tower's rows
    and subtotal (with the decoder's subtotal above them), the grand total. A partial total says so
    in the title and on its row."""
    table = Table(title=f"{spec.name}: {b.total:,} parameters ({human_count(b.total)}){partial_mark(b)}")
    for column, justify in (("component", "left"), ("per layer", "right"), ("count", "right"),
                            ("human", "right"), ("share", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    total = b.total

    def row(text: str, count: int, per_layer: str = "", style: str | None = None) -> None:
        table.add_row(text, per_layer, f"{count:,}", human_count(count), share(count, total), style=style)

    for name in ("token_embedding", "position_embedding", "embedding_norm", "project_in"):
        if b.get(name):
            row(label(name), b.get(name))
    for block in b.blocks:
        for name, per_layer in block.per_layer.items():
            row(f"  {label(name)}", per_layer * block.layers, f"{per_layer:,}")
        kind = "" if len(b.blocks) == 1 else f" {block.name}"
        row(styled("bold", f"{block.layers}{kind} blocks") + f" ({block.per_layer_total:,} per block)", block.total,
            style="bold")
    for copy in b.shared:
        for name, n in copy.per_layer.items():
            row(f"  {label(name)}", n)
        row(styled("bold", f"shared block {copy.name}") + " (stored once)",
            copy.total, style="bold")
    for name in ("final_norm", "project_out"):
        if b.get(name):
            row(label(name), b.get(name))
    if b.tied:
        table.add_row(label("lm_head"), "", "0 (tied to token embedding)", "0", share(0, total))
    else:
        row(label("lm_head"), b.get("lm_head"))
    if b.get("lm_head_bias"):
        row(label("lm_head_bias"), b.get("lm_head_bias"))
    if b.towers:
        row(styled("bold", "language model (decoder)"), b.decoder_total, style="bold")
    for tower in b.towers:
        table.add_section()
        layers = {name for name, n in tower.per_layer.items() if n}
        for name, n in tower.components.items():
            per_layer = f"{tower.per_layer[name]:,}" if name in layers else ""
            row(f"  {label(name)}", n, per_layer)
        row(styled("bold", f"{tower.name} tower ({tower.kind}, {tower.layers} layers)"), tower.total, style="bold")
    table.add_section()
    what = "total (partial)" if b.partial else "total"
    table.add_row(styled("bold", what), "", styled("bold", f"{total:,}"), human_count(total), "100.00%")
    row("non-embedding", b.non_embedding)
    if b.active is not None:
        row("active per token (MoE)", b.active)
    return table


def partial_mark(b: Breakdown) -> str:
    """What a title adds when the total leaves out part of the checkpoint (empty when it does not)."""
    return f" — PARTIAL: the {', '.join(b.uncounted)} not counted" if b.partial else ""


def count_notes(spec: ModelSpec, b: Breakdown) -> list[str]:
    """The sentences under the table: attention, tying, MoE, what is not counted."""
    attention = dict(spec.attention_parts())
    mixers = {name: spec.blocks[name].attention for name in spec.layer_counts() if spec.blocks[name].attention}
    kinds: dict[str, list[str]] = {}  # one line per distinct token mixer, naming the blocks that have it
    for name, part in mixers.items():
        kinds.setdefault(part.describe(), []).append(name)
    if len(kinds) == 1:
        notes = [f"{'attention' if attention else 'token mixer'}: {next(iter(kinds))}"]
    else:
        notes = [f"{'attention' if attention.keys() >= set(mixers) else 'token mixer'} in {', '.join(names)} "
                 f"blocks: {text}" for text, names in kinds.items()]
    notes += [f"{name} blocks: {block.moe.describe()}" for name, block in spec.blocks.items() if block.is_moe]
    notes += [f"shared block {copy.name}: {copy.description}" for copy in b.shared]
    if b.tied:
        notes.append(
            f"LM head tied to the token embedding: tying saves {count_with_units(b.tied_saving)} parameters "
            f"(untied total would be {count_with_units(b.total + b.tied_saving)})"
        )
    notes += active_notes(spec, b)
    if b.active is not None and b.towers:
        notes.append("active parameters are the language model's, for a text token; towers not included")
    notes += [f"{tower.name} tower: {tower.description}; {count_with_units(tower.total)} parameters" for tower in b.towers]
    if any(getattr(part, "rope", None) for part in attention.values()):
        notes.append("rotary position embedding: no parameters (its sin/cos tables are buffers)")
    if b.extra:
        stored = "; ".join(f"{label(name)} {count_with_units(extra)}" for name, extra in b.extra.items())
        notes.append(f"stored in the checkpoint but not in the model's total: {stored}; "
                     f"checkpoint total {count_with_units(b.stored_total)}")
    if b.unstored:
        declared = "; ".join(f"{label(name)} {count_with_units(n)}" for name, n in b.unstored.items())
        notes.append(f"declared by the config but not in its released checkpoint (in no total): {declared}")
    return notes + list(spec.notes)


def active_notes(spec: ModelSpec, b: Breakdown) -> list[str]:
    """Active parameters per token under each convention vendors use, the vendor's own marked."""
    from calc.analysis.active import CONVENTIONS, VENDOR, active_counts

    counts = active_counts(b, spec.model_type)
    vendor = VENDOR.get(spec.model_type)
    notes = [f"active per token, {CONVENTIONS[c.convention][0]}: {count_with_units(c.params)}"
             + (" <- the vendor's convention" if c.vendor else "") for c in counts]
    return notes + ([f"the vendor's figure: {vendor[1]}"] if vendor and counts else [])


SHAPE_HEADERS = ("layers", "d_model", "heads", "KV heads", "head_dim", "d_ff", "vocab", "context")


def shape_cells(spec: ModelSpec) -> tuple[str, ...]:
    """A model's shape as SHAPE_HEADERS cells (the first attention and the first MLP in the stack;
    "-" where a hybrid has none: a pure Mamba2 model has no heads to show)."""
    a = next((part for _, part in spec.attention_parts()), None)
    m = next((spec.blocks[name].mlp for name in spec.layer_counts() if spec.blocks[name].mlp), None)
    heads = (str(a.n_heads), str(a.n_kv_heads), str(a.head_dim)) if a else ("-", "-", "-")
    d_ff = "-" if m is None else f"{m.n_experts}×{m.d_ff:,}" if m.kind == "moe" else f"{m.d_ff:,}"
    return (str(spec.n_layers), f"{spec.d_model:,}", *heads, d_ff, f"{spec.vocab_size:,}", f"{spec.n_positions:,}")


def presets_table(rows: Iterable[tuple[ModelSpec, Breakdown]]) -> Table:
    """Every preset's shape and exact total, one row each (the first layer kind's shape)."""
    table = Table(title="presets")
    for header in ("name", *SHAPE_HEADERS, "params", "", "active"):
        table.add_column(header, justify="left" if header == "name" else "right")
    for spec, b in rows:
        table.add_row(spec.name, *shape_cells(spec), f"{b.total:,}", human_count(b.total),
                      human_count(b.active) if b.active else "")
    return table


FALLBACK_NOTE = ("not analytic: gptcalc has no adapter for this model_type, so this is transformers' own model "
                 "built on the meta device, counted by module; exact, but unexplained and unverified")


def module_table(b: Breakdown) -> Table:
    """transformers' model counted by module name (a model_type without an adapter)."""
    table = Table(title=f"{b.model}: {b.total:,} parameters ({human_count(b.total)}) — not analytic{partial_mark(b)}")
    for column in ("module", "count", "human", "share"):
        table.add_column(column, justify="left" if column == "module" else "right")
    for name, n in b.components.items():
        table.add_row(name, f"{n:,}", human_count(n), share(n, b.total))
    table.add_section()
    what = "total (partial)" if b.partial else "total"
    table.add_row(styled("bold", what), styled("bold", f"{b.total:,}"), human_count(b.total), "100.00%")
    return table
