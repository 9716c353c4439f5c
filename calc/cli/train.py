"""`train`: calc/analysis/train/, drawn by calc/render/train.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import CONTEXT, POSITIVE, TEXT, json_option, model_options

# calc.analysis.train's OPTIMIZERS, PRECISIONS, LOSSES, FRAMEWORKS, FLOAT8 (kept here so that --help imports no analysis)
_OPTIMIZERS = ("adamw", "adamw8bit", "paged-adamw8bit", "adamw8bit-torchao", "sgd", "sgd-momentum", "adafactor")
_PRECISIONS = ("mixed", "deepspeed-bf16", "mixed-fp32-grads", "bf16", "fp32-autocast", "fsdp-mixed")
_LOSSES = ("fp32", "chunked", "chunked-compiled", "compiled", "linear-chunked", "fp32-chunked", "fp32-whole-chunked",
           "fused")
_FRAMEWORKS = ("torchtune", "litgpt", "hf", "torchtitan", "deepspeed", "megatron")
_FLOAT8 = ("none", "tensorwise", "tensorwise-all-gather", "rowwise")


@click.command(context_settings=CONTEXT)
@model_options
@click.option("--seq", "-T", type=POSITIVE, required=True, help="Sequence length T of each training sample.")
@click.option("--micro-batch", "-b", type=POSITIVE, required=True, help="Samples per GPU per forward pass.")
@click.option("--gpus", type=POSITIVE, default=1, show_default=True, help="GPUs in all (dp × tp × pp).")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True,
              help="ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 (FSDP) also weights.")
@click.option("--tp", type=POSITIVE, default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--sp", is_flag=True, help="Sequence parallelism with TP (splits the d-wide activations too).")
@click.option("--tp-impl", type=click.Choice(["megatron", "dtensor"]),
              help="How TP keeps activations: megatron (a column-parallel linear saves its input's SP shard) or "
                   "dtensor (torch's plan, torchtitan: it saves the all-gathered input; loss under loss_parallel).  "
                   "[default: megatron]")
@click.option("--pp", type=POSITIVE, default=1, show_default=True, help="Pipeline stages.")
@click.option("--pp-split", type=TEXT, metavar="even|torchtitan|N,N,...",
              help="With --pp: the layers each stage holds: even (⌈L/p⌉ a stage, the last the rest), torchtitan (its "
                   "generate_split_points: ⌊L/p⌋ first, the remainder one a middle stage, the rest last), a list of "
                   "layers per stage, or torchtitan's pipeline_parallel_split_points (layers.15,layers.31,...).  "
                   "[default: even]")
@click.option("--pp-schedule", type=click.Choice(["1f1b", "interleaved-1f1b"]), default="1f1b", show_default=True,
              help="With --pp: torch's Schedule1F1B (one stage a rank) or ScheduleInterleaved1F1B (--pp-virtual "
                   "stages a rank, torch's own order; Megatron-LM's interleaved schedule runs the same order), "
                   "each step of --pp-microbatches micro-batches.")
@click.option("--pp-virtual", type=POSITIVE, metavar="V",
              help="With --pp-schedule interleaved-1f1b: stages a rank holds, rank r the stages r, r + pp, ...; the "
                   "layers split over pp × V stages by --pp-split.  [default: 2, torchtitan's without split points]")
@click.option("--pp-microbatches", type=POSITIVE, metavar="N",
              help="With --pp: micro-batches a pipeline step runs (torchtitan's pipeline_parallel_microbatches, "
                   "Megatron-LM's num_microbatches = global batch ÷ (micro-batch × dp), DeepSpeed's "
                   "gradient_accumulation_steps under its pipeline engine); 1f1b needs N ≥ --pp, interleaved-1f1b "
                   "a multiple of its rounds, max(1, N ÷ pp).  [default: --pp, torchtitan's in December 2024; "
                   "pp × V since its 90567fc98]")
@click.option("--cp", type=POSITIVE, default=1, show_default=True,
              help="Context-parallel GPUs (torchtitan): each holds seq/cp tokens; ZeRO/FSDP shards over dp × cp.")
@click.option("--float8", type=click.Choice(_FLOAT8), default="none", show_default=True,
              help="torchao Float8Linear on the layers' linears (fp8 casts are transient; tensorwise-all-gather: "
                   "FSDP gathers fp8 weights).")
@click.option("--framework", type=click.Choice(_FRAMEWORKS),
              help="Take precision, loss, recompute, optimizer kernel, MoE form and dropout from this framework's "
                   "defaults (options given beside it win).")
@click.option("--moe-form", type=click.Choice(["reference", "grouped"]),
              help="How a MoE runs: as the model's reference code (transformers' Llama-4 runs every expert over every "
                   "token) or top-k rows through grouped matmuls (torchtitan, torchtune).  [default: reference]")
@click.option("--dropout/--no-dropout", default=None,
              help="Keep the config's dropout (masks in training) or run without it (torchtune, litgpt, torchtitan "
                   "models have none).  [default: --dropout]")
@click.option("--tied-head/--untied-head", "tied", default=None,
              help="Keep the config's tied head, or give the model its own head as litgpt's GPT always has.  "
                   "[default: --tied-head]")
@click.option("--norm-upcast/--no-norm-upcast", default=None,
              help="Eager RMSNorms upcast a bf16 input and keep it and the rsqrt in fp32 (litgpt, torchtune without "
                   "compile), or keep them at the activation width.  [default: --no-norm-upcast]")
@click.option("--compile", "compiled", is_flag=True,
              help="The layers run under torch.compile (torchtitan's training.compile, torchtune's compile: True; "
                   "both default to off): each keeps what inductor's partitioner saves, measured for Llama layers.")
@click.option("--repeat-kv/--no-repeat-kv", default=None,
              help="The model repeats K and V to every query head before its fused attention, which then keeps (and "
                   "under --cp rotates) them so: torchtitan's Llama before its 2026-01-27 'GQA without kv repeats', "
                   "torchtune's MultiHeadAttention.  [default: --no-repeat-kv]")
@click.option("--fused-gelu/--written-gelu", default=None,
              help="The model's GELU is torch's fused F.gelu (litgpt's own model), not the python form a config's "
                   "gelu_new, gelu_fast or gelu_python names in transformers, which keeps 2 to 6 more tensors of the "
                   "MLP's width.  [default: --written-gelu]")
@click.option("--precision", type=click.Choice(_PRECISIONS),
              help="mixed: bf16 + fp32 master and states (16 B/param with AdamW; LoRA adapters fp32 as PEFT upcasts "
                   "them); deepspeed-bf16: the same, LoRA adapters bf16 with fp32 masters; bf16: pure bf16 (8); "
                   "mixed-fp32-grads: Megatron (18); fp32-autocast: HF Trainer (16); fsdp-mixed: torchtitan (16).  "
                   "[default: mixed]")
@click.option("--loss", type=click.Choice(_LOSSES),
              help="What the loss keeps and holds: fp32 logits + log-softmax, torchtune's chunked or linear-chunked "
                   "cross-entropy, a compiled one (torchtitan), litgpt's fp32-chunked (lora.py) or fp32-whole-chunked "
                   "(full.py), or a fused (Liger) kernel.  "
                   "[default: fp32]")
@click.option("--recompute", type=click.Choice(["none", "selective", "op", "full"]),
              help="Activation recomputation: selective drops the attention scores; op is torchtitan's per-op policy "
                   "(keeps every other matmul's output); full keeps each layer's input.  [default: none]")
@click.option("--checkpoint-every", type=POSITIVE, default=1, show_default=True,
              help="With --recompute full: checkpoint only every k-th layer.")
@click.option("--attention", type=click.Choice(["flash", "eager"]), default="flash", show_default=True,
              help="A fused attention kernel (keeps no T×T scores) or explicit QKᵀ, softmax and P·V.")
@click.option("--optimizer", type=click.Choice(_OPTIMIZERS), default="adamw", show_default=True)
@click.option("--optimizer-impl", type=click.Choice(["foreach", "fused"]),
              help="torch's foreach AdamW makes one state-sized temporary in the step; fused none.  [default: foreach]")
@click.option("--optimizer-in-backward", is_flag=True,
              help="Step each parameter as its gradient is ready (torchtune's optimizer_in_bwd): no full set of gradients.")
@click.option("--grad-accumulation", type=POSITIVE, default=1, show_default=True, metavar="N",
              help="Micro-batches per optimizer step: the later ones run beside the gradients accumulated so far. "
                   "With --pp: pipeline steps per optimizer step, each of --pp-microbatches micro-batches "
                   "(torchtitan's gradient_accumulation_steps beside num_pp_microbatches); Megatron-LM's and "
                   "DeepSpeed's micro-batches under PP are --pp-microbatches.")
@click.option("--no-sync/--sync", default=None,
              help="With --grad-accumulation: reduce only on the last micro-batch (FSDP's no_sync, litgpt), so each GPU "
                   "accumulates unsharded gradients, or reduce-scatter every micro-batch (FSDP2: torchtune, "
                   "torchtitan).  [default: --sync]")
@click.option("--fsdp1/--fsdp2", "fsdp1", default=None,
              help="With --zero 3: torch's FSDP1 (litgpt) keeps its root unit (embedding, final norm, head) gathered "
                   "through backward and gathers with no copy-out buffer; FSDP2 (torchtune, torchtitan) reshards it.  "
                   "[default: --fsdp2]")
@click.option("--fsdp-head-unit", is_flag=True,
              help="With FSDP2: the output projection is its own unit, resharded after forward (torchtune's "
                   "custom_sharded_layers: ['tok_embeddings', 'output']): gathered only while it runs, the last "
                   "layer prefetched at its last chunk in backward.")
@click.option("--offload", type=TEXT, default=None, metavar="optimizer,params,activations",
              help="Keep these on the host: optimizer (master + states), params (FSDP CPU offload: all states), "
                   "activations (all but one layer's).")
@click.option("--lora-rank", type=POSITIVE, default=None, help="Train LoRA adapters of this rank; the base is frozen.")
@click.option("--lora-targets", type=TEXT, default="q,k,v,o,gate,up,down", show_default=True,
              help="Matrices that get adapters, by name (also head: the output projection; experts_gate_up, "
                   "experts_down: PEFT's target_parameters on a MoE's fused expert stacks; linear_qkv, linear_proj, linear_fc1, "
                   "linear_fc2: megatron-core's modules). A name no layer of the "
                   "model has is refused; the default takes those the model has. A checkpoint's fused q|k|v or "
                   "gate|up linear takes one adapter (PEFT's), so its parts are targeted together.")
@click.option("--lora-per-part/--lora-whole", "lora_per_part", default=None,
              help="An adapter on each part of a checkpoint's fused q|k|v or gate|up linear, as litgpt's and "
                   "torchtune's own models take them (their profiles set it), so a part may be targeted alone; not "
                   "PEFT's one adapter on the whole module.  [default: --lora-whole]")
@click.option("--lora-dropout", is_flag=True, help="LoRA dropout > 0: each adapter keeps its dropped-out input and mask.")
@click.option("--qlora", is_flag=True, help="With --lora-rank: the frozen base's layer matrices in 4-bit NF4.")
@click.option("--no-double-quant", is_flag=True, help="With --qlora: NF4 with an fp32 absmax per 64 (bitsandbytes' default).")
@click.option("--bnb", type=click.Choice(["0.42.0", "current"]),
              help="With --qlora: the bitsandbytes it runs under; 0.42.0 (litgpt's pin) keeps each 4-bit linear's input "
                   "as long as the graph lives and dequantises through fp16.  [default: current]")
@click.option("--allocator-overhead", type=click.IntRange(0, 1000), default=5, show_default=True, metavar="PCT",
              help="Reserved = allocated + this percent (the caching allocator's slack; an assumption).")
@click.option("--cuda-context", type=TEXT, default="512MiB", show_default=True, metavar="SIZE",
              help="nvidia-smi = reserved + this (CUDA context and libraries; an assumption).")
@click.option("--budget", type=TEXT, metavar="GPU|NxGPU|SIZE",
              help="Does it fit (nvidia-smi figure ≤ the GPU's memory)? If not, or to see the margin: the largest "
                   "micro-batch, the longest sequence and the cheapest recompute/offload setting that fit.")
@click.option("--layers", "show_layer", is_flag=True, help="Add a table of what one layer keeps for backward.")
@json_option
def train(spec: Any, seq: int, micro_batch: int, gpus: int, zero: int, tp: int, sp: bool, tp_impl: str | None,
          pp: int, pp_split: str | None, pp_schedule: str, pp_virtual: int | None, pp_microbatches: int | None,
          cp: int,
          float8: str, framework: str | None, moe_form: str | None, dropout: bool | None, tied: bool | None,
          norm_upcast: bool | None, compiled: bool, repeat_kv: bool | None, fused_gelu: bool | None,
          precision: str | None, loss: str | None, recompute: str | None, checkpoint_every: int,
          attention: str, optimizer: str, optimizer_impl: str | None, optimizer_in_backward: bool,
          grad_accumulation: int, no_sync: bool | None, fsdp1: bool | None, fsdp_head_unit: bool, offload: str | None,
          lora_rank: int | None, lora_targets: str, lora_per_part: bool | None, lora_dropout: bool, qlora: bool, no_double_quant: bool,
          bnb: str | None, allocator_overhead: int, cuda_context: str, budget: str | None, show_layer: bool, as_json: bool) -> None:
    """Memory per GPU to train or fine-tune: states, activations, the loss, and the peak of a step.

    \b
    Example:
      gptcalc train gpt2-small --seq 1024 --micro-batch 8
      gptcalc train llama-3.1-8b --seq 2048 --micro-batch 2 --lora-rank 8 --framework torchtune
      gptcalc train llama-3-8b --seq 2048 --micro-batch 1 --lora-rank 16 --qlora --budget 1xRTX-4090
      gptcalc train llama-2-70b --seq 4096 --micro-batch 1 --gpus 64 --zero 3 --recompute full
      gptcalc train llama-3.1-8b --seq 65536 --micro-batch 1 --gpus 8 --cp 2 --zero 3 --framework torchtitan
    """
    from calc.analysis.train import Setup
    from calc.analysis.train import train as plan
    from calc.analysis.train.budget import solve
    from calc.analysis.train.frameworks import resolve
    from calc.analysis.train.peak import Overheads
    from calc.errors import GptcalcError
    from calc.render import base as render
    from calc.render.train import activations_table, budget_lines, memory_table, moments_table, train_headline, train_notes

    targets = tuple(t.strip() for t in lora_targets.split(","))  # an empty name is unknown, not skipped
    try:
        overheads = Overheads.parse(allocator_overhead, cuda_context)
    except ValueError as exc:
        raise GptcalcError(f"--cuda-context: {exc}") from None
    options = resolve(framework, {"precision": precision, "loss": loss, "recompute": recompute,
                                  "optimizer_impl": optimizer_impl, "tp_impl": tp_impl, "moe_form": moe_form,
                                  "dropout": dropout, "no_sync": no_sync, "fsdp1": fsdp1, "tied": tied,
                                  "norm_upcast": norm_upcast, "bnb": bnb, "pp_split": pp_split,
                                  "repeat_kv": repeat_kv, "fused_gelu": fused_gelu, "lora_per_part": lora_per_part})
    setup = Setup(seq, micro_batch, gpus, zero, tp, pp, sp, optimizer=optimizer, lora_rank=lora_rank,
                  lora_targets=targets, qlora=qlora, attention=attention, checkpoint_every=checkpoint_every,
                  optimizer_in_backward=optimizer_in_backward, grad_accumulation=grad_accumulation,
                  fsdp_head_unit=fsdp_head_unit,
                  offload=tuple(o.strip() for o in offload.split(",")) if offload else (),
                  lora_dropout=lora_dropout, double_quant=not no_double_quant, cp=cp, float8=float8,
                  compile=compiled, overheads=overheads, pp_schedule=pp_schedule, pp_virtual=pp_virtual,
                  pp_microbatches=pp_microbatches, **options)
    result = plan(spec, setup)
    answer = solve(spec, setup, budget) if budget else None
    if as_json:
        render.print_json({**result.to_json(), **({"budget": answer.to_json()} if answer else {})})
        return
    out = render.console()
    out.print(train_headline(result))
    out.print(memory_table(result))
    out.print(moments_table(result))
    if show_layer:
        out.print(activations_table(result))
    for note in train_notes(result):
        out.print("  " + note)
    for line in budget_lines(answer) if answer else ():
        out.print(line)
