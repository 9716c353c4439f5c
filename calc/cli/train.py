"""`train`: calc/analysis/train/, drawn by calc/render/train.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import CONTEXT, POSITIVE, TEXT, json_option, model_options

_OPTIMIZERS = ("adamw", "adamw8bit", "sgd", "sgd-momentum", "adafactor")  # calc.analysis.train.OPTIMIZERS


@click.command(context_settings=CONTEXT)
@model_options
@click.option("--seq", "-T", type=POSITIVE, required=True, help="Sequence length T of each training sample.")
@click.option("--micro-batch", "-b", type=POSITIVE, required=True, help="Samples per GPU per forward pass.")
@click.option("--gpus", type=POSITIVE, default=1, show_default=True, help="GPUs in all (dp × tp × pp).")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True,
              help="ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 (FSDP) also weights.")
@click.option("--tp", type=POSITIVE, default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--sp", is_flag=True, help="Sequence parallelism with TP (splits the d-wide activations too).")
@click.option("--pp", type=POSITIVE, default=1, show_default=True, help="Pipeline stages.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none", show_default=True,
              help="Activation recomputation.")
@click.option("--attention", type=click.Choice(["flash", "eager"]), default="flash", show_default=True,
              help="A fused attention kernel (keeps no T×T scores) or explicit QKᵀ, softmax and P·V.")
@click.option("--optimizer", type=click.Choice(_OPTIMIZERS), default="adamw", show_default=True)
@click.option("--lora-rank", type=POSITIVE, default=None, help="Train LoRA adapters of this rank; the base is frozen.")
@click.option("--lora-targets", type=TEXT, default="q,k,v,o,gate,up,down", show_default=True,
              help="Matrices that get adapters, by name.")
@click.option("--qlora", is_flag=True, help="With --lora-rank: the frozen base's layer matrices in 4-bit NF4.")
@click.option("--layers", "show_layer", is_flag=True, help="Add a table of what one layer keeps for backward.")
@json_option
def train(spec: Any, seq: int, micro_batch: int, gpus: int, zero: int, tp: int, sp: bool, pp: int, recompute: str,
          attention: str, optimizer: str, lora_rank: int | None, lora_targets: str, qlora: bool, show_layer: bool,
          as_json: bool) -> None:
    """Memory per GPU to train or fine-tune: weights, gradients, optimizer, activations, logits.

    \b
    Example:
      gptcalc train gpt2-small --seq 1024 --micro-batch 8
      gptcalc train llama-3-8b --seq 2048 --micro-batch 1 --lora-rank 16 --qlora
      gptcalc train llama-2-70b --seq 4096 --micro-batch 1 --gpus 64 --zero 3 --recompute full
    """
    from calc.analysis.train import Setup
    from calc.analysis.train import train as plan
    from calc.render import base as render
    from calc.render.train import activations_table, memory_table, train_headline, train_notes

    targets = tuple(t.strip() for t in lora_targets.split(","))  # an empty name is unknown, not skipped
    result = plan(spec, Setup(seq, micro_batch, gpus, zero, tp, pp, sp, recompute, optimizer, lora_rank, targets,
                              qlora, attention))
    if as_json:
        render.print_json(result.to_json())
        return
    out = render.console()
    out.print(train_headline(result))
    out.print(memory_table(result))
    if show_layer:
        out.print(activations_table(result))
    for note in train_notes(result):
        out.print("  " + note)
