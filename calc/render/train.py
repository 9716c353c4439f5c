"""Rich tables for `gptcalc train`: per-GPU memory rows that add up to the total, and one layer's activations.

Bytes are printed exact beside binary (GiB) and decimal (GB) units: the ZeRO paper quotes decimal GB.
"""

from __future__ import annotations

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.train import PRECISIONS, Setup, Training
from calc.analysis.train.activations import WRITTEN_GELU
from calc.analysis.train.budget import Answer
from calc.analysis.train.frameworks import FRAMEWORKS
from calc.units import human_bytes

__all__ = ["budget_lines", "activations_table", "memory_table", "moments_table", "train_notes"]

_OPTIMIZER = {"adamw": "AdamW: m and v", "adamw8bit": "8-bit AdamW: uint8 m and v + absmax per 256",
              "paged-adamw8bit": "paged 8-bit AdamW: uint8 m and v (unified memory)",
              "adamw8bit-torchao": "torchao's 8-bit AdamW: uint8 m and v + scale per 256",
              "sgd": "SGD: none", "sgd-momentum": "SGD with momentum: one fp32 buffer",
              "adafactor": "Adafactor: factored second moment"}
_WHERE = {"gpu": "", "cpu": " (host)", "managed": " (unified)"}


def _setup(t: Training) -> str:
    s = t.setup
    lora = f", {'QLoRA' if s.qlora else 'LoRA'} r={s.lora_rank}" if s.lora_rank else ""
    gpus = f"{s.gpus} GPU{'s' if s.gpus > 1 else ''} = dp {s.dp} × tp {s.tp}{' (SP)' if s.sp else ''} × pp {s.pp}" \
        + (f" × cp {s.cp}" if s.cp > 1 else "")
    frame = f", {s.framework} conventions" if s.framework else ""
    every = f" every {s.checkpoint_every} layers" if s.checkpoint_every > 1 else ""
    return (f"{t.model}, memory per GPU: {gpus}, ZeRO-{s.zero}, {_batches(t.setup)}, {s.precision} precision, {s.loss} loss, recompute {s.recompute}{every}, "
            f"{s.attention} attention{', compiled layers' if s.compile else ''}{lora}"
            f"{f', float8 {s.float8}' if s.float8 != 'none' else ''}{frame}")


def _batches(s: Setup) -> str:
    """What an optimizer step runs: K accumulated micro-batches, or under --pp K pipeline steps, each of its
    micro-batches (Setup.microbatches: --pp-microbatches, else pp), not K micro-batches."""
    shape, sync = f"micro-batch {s.micro_batch} × seq {s.seq:,}", " (no_sync)" if s.no_sync else ""
    if s.grad_accumulation == 1:
        return shape
    if s.pp > 1:
        return f"{shape}, {s.grad_accumulation} pipeline steps of {s.microbatches} micro-batches{sync}"
    return f"micro-batch {s.micro_batch} × {s.grad_accumulation} accumulated{sync} × seq {s.seq:,}"


def _bytes(n: int) -> tuple[str, str, str]:
    return f"{n:,}", human_bytes(n), human_bytes(n, binary=False)


def train_headline(t: Training) -> str:
    """The answer first: the peak one GPU allocates to train, and when it happens."""
    where = f" on pipeline {t.stage.name()}" if t.stage else ""
    return (f"{t.model}: training peaks at " + styled("bold", human_bytes(t.allocated))
            + f" ({t.allocated:,} B) allocated per GPU{where}, {t.peak.name}")


def memory_table(t: Training) -> Table:
    table = Table(title=_setup(t))
    for header in ("", "what", "before sharding", "÷", "per GPU (B)", "GiB units", "GB units"):
        table.add_column(header, justify="left" if header in ("", "what") else "right")
    trained = t.held.adapter_params or t.held.params
    p = PRECISIONS[t.setup.precision]
    weight, grad = (p.adapter, p.adapter_grads) if t.setup.lora_rank else (p.weight, p.grad)
    what = {"weights": f"{trained:,} params × {weight} B",
            "frozen_weights": "NF4 layers + 16-bit rest" if t.setup.qlora else f"{t.held.params:,} params × 2 B (bf16)",
            "gradients": f"{trained:,} × {grad} B",
            "master_weights": f"{trained:,} × 4 B", "optimizer": _OPTIMIZER[t.setup.optimizer],
            "optimizer_gpu": "absmax per 256; tensors under 100,000 elements"}
    for row in t.states:
        table.add_row(row.label + _WHERE[row.where], what[row.key], f"{row.full:,}", str(row.shards),
                      *_bytes(row.per_gpu))
    table.add_section()
    for kind, n, terms in t.layers:
        per_layer = t.layer_bytes(terms)
        name = "activations" + (f" ({kind})" if len(t.layers) > 1 else "")
        table.add_row(name, f"{per_layer:,} per layer × {n}", "", "", *_bytes(per_layer * n))
    table.add_row("activations outside the layers", "ids, final norm, head input, what the loss keeps", "", "",
                  *_bytes(t.layer_bytes(t.outside)))
    return table


def moments_table(t: Training) -> Table:
    """What is allocated at each moment of a step; the largest is the peak."""
    table = Table(title="allocated at each moment of a step (the peak is what max_memory_allocated reports)")
    for header in ("moment", "beyond the states", "allocated (B)", "GiB units", "GB units"):
        table.add_column(header, justify="left" if header in ("moment", "beyond the states") else "right")
    states = {r.label for r in t.states}
    peak = t.peak
    for m in t.moments:
        extra = ", ".join(what for what, b in m.parts if what not in states and b)
        cells = (m.name + (" ← peak" if m is peak else ""), extra, *_bytes(m.allocated))
        table.add_row(*(styled("bold", c) for c in cells) if m is peak else cells)
    o = t.setup.overheads
    table.add_section()
    idle = max(m.cached for m in t.moments)
    table.add_row(f"reserved ({'blocks held idle, ' if idle else ''}assumed +{o.allocator_pct}% allocator slack)",
                  f"{human_bytes(idle)} idle in the cache: {next(m.name for m in t.moments if m.cached == idle)}"
                  if idle else "", *_bytes(t.reserved))
    table.add_row(f"nvidia-smi (+ {human_bytes(o.cuda_context)} CUDA context, assumed)", "", *_bytes(t.nvidia_smi))
    return table


def activations_table(t: Training) -> Table:
    """What one layer of each kind keeps for backward, term by term."""
    compiled = ", torch.compile" if t.setup.compile else ""
    table = Table(title=f"activations kept for backward, one layer (bf16, recompute {t.setup.recompute}{compiled})")
    for header in ("block", "tensor", "bytes per GPU"):
        table.add_column(header, justify="right" if header == "bytes per GPU" else "left")
    for kind, _, terms in dict((kind, (kind, n, terms)) for kind, n, terms in t.layers).values():
        for term in terms:
            table.add_row(kind, term.label, f"{t.setup.term_bytes(term):,}")
        table.add_section()
    return table


def _split(split: str) -> str:
    """How --pp-split assigned the layers, in words."""
    return {"even": "evenly (⌈L/p⌉ a stage, the last the rest)",
            "torchtitan": "as torchtitan's generate_split_points (⌊L/p⌋ first, the remainder one a middle stage, "
                          "the rest last)"}.get(split, f"as given ({split})")


def train_notes(t: Training) -> list[str]:
    s = t.setup
    whose = f"pipeline {t.stage.name()}" if t.stage else "the whole model"
    notes = [f"parameters on this GPU ({whose}, 1/{s.tp} of each matrix): {t.held.params:,}"
             + (f"; trained: {t.held.adapter_params:,} LoRA adapter parameters" if s.lora_rank else "")]
    if t.stage and s.pp_schedule == "interleaved-1f1b":
        notes.append(f"pipeline (interleaved 1F1B, {s.virtual} stages a rank, {s.microbatches} micro-batches a step): each "
                     "rank's stages counted together, each with its own parameters, layers and the micro-batches "
                     "torch's schedule order has in flight there at each of the rank's backwards, and torch's "
                     "pipelining buffers; the peak is the largest rank's; layers split over "
                     f"{s.pp * s.virtual} stages {_split(s.pp_split)}:")
    elif t.stage:
        notes.append(f"pipeline (1F1B, {s.microbatches} micro-batches a step): each stage counted with its own "
                     "parameters, layers and micro-batches in flight (min(n, p − i) on stage i at first) "
                     "and torch's pipelining buffers (each micro-batch's output, receive buffers); the peak is the "
                     f"largest stage's; layers split {_split(s.pp_split)}:")
    if t.stage:
        notes += [f"  {name}, {layers} layers: {human_bytes(size)} allocated, {moment}"
                  for name, layers, moment, size in t.stage_peaks]
    if t.stage and s.framework and s.pp_microbatches is None and FRAMEWORKS[s.framework].pp_microbatches:
        notes.append(FRAMEWORKS[s.framework].pp_microbatches)
    if t.korthikanti is not None:
        ours = sum(n * t.layer_bytes(terms) for _, n, terms in t.layers)
        # their GPT-3 layer's GELU is Megatron's fused one, which keeps its input alone
        written = sum(n * t.layer_bytes(tuple(x for x in terms if x.label.startswith(WRITTEN_GELU)))
                      for _, n, terms in t.layers)
        notes += [f"Korthikanti et al. (arXiv 2205.05198), 34·s·b·h + 5·a·s²·b per layer with dropout: "
                  f"{t.korthikanti:,} B ({human_bytes(t.korthikanti)}); ours, {'with' if t.dropout else 'no'} "
                  f"dropout: {ours:,} B",
                  "  the difference: " + ("LayerNorm's mean and rstd, which ours keeps and they leave out (8·s·b)"
                                          if t.dropout else "their dropout masks (2·s·b·h + a·s²·b bytes) and "
                                          "dropped-out P (2·a·s²·b), less LayerNorm's mean and rstd they leave out "
                                          "(8·s·b)") + (f"; and {written:,} B the GELU written out in python ops "
                                                         "keeps beyond their fused one" if written else "")]
    p = PRECISIONS[s.precision]
    notes.append(p.label + (f"; LoRA adapters {'fp32' if p.adapter == 4 else 'bf16'}, the base frozen"
                            if s.lora_rank else "") + "; activations bf16")
    notes.append(f"loss: {s.loss_run.label}")
    if s.gathered:
        notes.append("tensor parallelism as DTensor runs it (torchtitan): the column-parallel linears (Q/K/V, the "
                     "MLP's first, the head) keep their all-gathered input" + (", the norms a 1/tp shard" if s.sp else ""))
    if t.all_experts:
        notes.append("MoE as transformers runs it (Llama4TextMoe): every expert over every token, the ones not picked "
                     "weighed 0; torchtitan and torchtune route the top-k rows through grouped matmuls "
                     "(--moe-form grouped)")
    if s.recompute == "selective" and s.attention == "flash":
        notes.append("--recompute selective changes (almost) nothing under flash attention: a fused kernel keeps "
                     "no T×T scores, which is what selective recomputation drops; only its log-sum-exp goes")
    if s.float8 != "none":
        notes.append(f"float8 ({s.float8}, torchao Float8Linear on the layers' linears): each saves its bf16 input and "
                     "weight as without it; the fp8 casts exist while a matmul runs"
                     + ("; FSDP gathers the matrices in fp8" if s.float8 == "tensorwise-all-gather" else ""))
    if s.cp > 1:
        notes.append(f"context parallelism over {s.cp} GPUs: each holds {s.local_seq:,} of the {s.seq:,} tokens; "
                     f"states sharded over dp × cp = {s.shards}; ring attention's buffers in a layer's backward")
    if s.optimizer == "paged-adamw8bit":
        notes.append("paged optimizer: its large uint8 states live in CUDA unified memory, outside torch's allocated "
                     "and reserved figures; nvidia-smi shows them while resident, and the driver pages them out under "
                     "pressure (the absmax vectors and small tensors' states are ordinary GPU tensors)")
    if s.compile and s.lora_rank and s.recompute == "full":
        notes.append("--compile with LoRA: the layer rebuilt in a checkpointed backward is counted as the eager one, "
                     "frozen (a compiled frozen layer's backward, measured on the CPU, has no rule yet)")
    notes.append(f"peak at: {t.peak.name}; allocated {human_bytes(t.allocated)} "
                 f"({human_bytes(t.allocated, binary=False)}), reserved ~{human_bytes(t.reserved)}, "
                 f"nvidia-smi ~{human_bytes(t.nvidia_smi)}")
    notes.append("not counted: " + ("" if s.compiled_backward else
                                    "a layer's backward working set beyond its rebuilt activations, ")
                 + "DDP's gradient buckets, the framework's own buffers")
    return notes


def budget_lines(a: "Answer") -> list[str]:
    """The verdict on --budget and the inverse answers."""
    verdict = (f"fits: {human_bytes(a.needed)} of {human_bytes(a.capacity)} per GPU ({a.label}), "
               f"{human_bytes(a.capacity - a.needed)} to spare") if a.fits else \
        (f"does not fit: needs {human_bytes(a.needed)}, {a.label} has {human_bytes(a.capacity)} per GPU")
    lines = [styled("bold", verdict),
             f"  largest micro-batch that fits at this sequence length: {a.max_micro_batch:,}" if a.max_micro_batch
             else "  not even a micro-batch of 1 fits at this sequence length",
             f"  longest sequence that fits at this micro-batch: {a.max_seq:,} tokens" if a.max_seq
             else "  not even one token fits at this micro-batch"]
    if not a.fits:
        lines.append(f"  the first memory saver that fits as given: {a.setting}" if a.setting
                     else "  no recompute/offload setting makes it fit as given: more GPUs (--gpus, --zero 3) or LoRA/QLoRA")
    return lines
