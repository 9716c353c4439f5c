"""Rich tables for `gptcalc train`: per-GPU memory rows that add up to the total, and one layer's activations.

Bytes are printed exact beside binary (GiB) and decimal (GB) units: the ZeRO paper quotes decimal GB.
"""

from __future__ import annotations

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.train import Training
from calc.units import human_bytes

__all__ = ["activations_table", "memory_table", "train_notes"]

_OPTIMIZER = {"adamw": "AdamW: fp32 m and v", "adamw8bit": "8-bit AdamW: int8 m and v + absmax per 2,048",
              "sgd": "SGD: none", "sgd-momentum": "SGD with momentum: one fp32 buffer",
              "adafactor": "Adafactor: factored fp32 second moment"}


def _setup(t: Training) -> str:
    s = t.setup
    lora = f", {'QLoRA' if s.qlora else 'LoRA'} r={s.lora_rank}" if s.lora_rank else ""
    gpus = f"{s.gpus} GPU{'s' if s.gpus > 1 else ''} = dp {s.dp} × tp {s.tp}{' (SP)' if s.sp else ''} × pp {s.pp}"
    return (f"{t.model}, memory per GPU: {gpus}, ZeRO-{s.zero}, micro-batch {s.micro_batch} × seq "
            f"{s.seq:,}, recompute {s.recompute}, {s.attention} attention{lora}")


def _bytes(n: int) -> tuple[str, str, str]:
    return f"{n:,}", human_bytes(n), human_bytes(n, binary=False)


def train_headline(t: Training) -> str:
    """The answer first: what one GPU holds to train, in total."""
    return f"{t.model}: training takes " + styled("bold", human_bytes(t.total)) + f" ({t.total:,} B) per GPU"


def memory_table(t: Training) -> Table:
    table = Table(title=_setup(t))
    for header in ("", "what", "before sharding", "÷", "per GPU (B)", "GiB units", "GB units"):
        table.add_column(header, justify="left" if header in ("", "what") else "right")
    trained = t.held.adapter_params or t.held.params
    what = {"weights": f"{trained:,} params × {4 if t.setup.lora_rank else 2} B",
            "frozen_weights": "NF4 layers + 16-bit rest" if t.setup.qlora else f"{t.held.params:,} params × 2 B (bf16)",
            "gradients": f"{trained:,} × {4 if t.setup.lora_rank else 2} B",
            "master_weights": f"{trained:,} × 4 B", "optimizer": _OPTIMIZER[t.setup.optimizer]}
    for row in t.states:
        table.add_row(row.label, what[row.key], f"{row.full:,}", str(row.shards), *_bytes(row.per_gpu))
    table.add_section()
    for kind, n, terms in t.layers:
        per_layer = t.layer_bytes(terms)
        name = "activations" + (f" ({kind})" if len(t.layers) > 1 else "")
        table.add_row(name, f"{per_layer:,} per layer × {n}", "", "", *_bytes(per_layer * n))
    table.add_row("activations outside the layers", "ids, final norm, head input, log-softmax", "", "",
                  *_bytes(t.layer_bytes(t.outside)))
    table.add_row("logits", "B·T·vocab × 4 B (fp32), held for the loss", "", "", *_bytes(t.logits))
    table.add_section()
    table.add_row(styled("bold", "total"), "", "", "", *(styled("bold", cell) for cell in _bytes(t.total)))
    return table


def activations_table(t: Training) -> Table:
    """What one layer of each kind keeps for backward, term by term."""
    table = Table(title=f"activations kept for backward, one layer (bf16, recompute {t.setup.recompute})")
    for header in ("block", "tensor", "bytes per GPU"):
        table.add_column(header, justify="right" if header == "bytes per GPU" else "left")
    for kind, _, terms in t.layers:
        for term in terms:
            table.add_row(kind, term.label, f"{term.bytes(t.setup.tp, t.setup.sp):,}")
        table.add_section()
    return table


def train_notes(t: Training) -> list[str]:
    s = t.setup
    notes = [f"parameters on this GPU (the busiest pipeline stage, 1/{s.tp} of each matrix): {t.held.params:,}"
             + (f"; trained: {t.held.adapter_params:,} LoRA adapter parameters" if s.lora_rank else "")]
    if s.pp > 1:
        first = sum(n for _, n, _ in t.layers) // s.pp
        notes.append(f"pipeline: the first stage's {first} layers keep {s.pp} micro-batches in flight (1F1B), so "
                     f"their activations count {s.pp} times; the parameters are the busiest stage's")
    if t.korthikanti is not None:
        ours = sum(n * t.layer_bytes(terms) for _, n, terms in t.layers)
        notes += [f"Korthikanti et al. (arXiv 2205.05198), 34·s·b·h + 5·a·s²·b per layer with dropout: "
                  f"{t.korthikanti:,} B ({human_bytes(t.korthikanti)}); ours, no dropout: {ours:,} B",
                  "  the difference: their dropout masks (2·s·b·h + a·s²·b bytes) and dropped-out P (2·a·s²·b), "
                  "less LayerNorm's mean and rstd they leave out (8·s·b)"]
    notes.append("mixed precision: bf16 weights, gradients and activations; fp32 master weights and optimizer "
                  "states" + ("; LoRA adapters fp32 throughout, the base frozen" if s.lora_rank else ""))
    notes.append("not counted: framework and CUDA context, allocator fragmentation, communication buffers, "
                 "the transient memory of backward")
    return notes
