"""`flops`: calc/analysis/flops/, drawn by calc/render/flops.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from calc.cli.options import (CONTEXT, KV_DTYPE, SHARE, TEXT, WEIGHT_DTYPE, image_options, json_option, model_options,
                              pass_options)

if TYPE_CHECKING:
    from fractions import Fraction


@click.command(context_settings=CONTEXT)
@model_options
@pass_options
@click.option("--causal-half", is_flag=True, help="Count attention over the causal mask's pairs only (default: in full).")
@click.option("--macs", is_flag=True, help="Multiply-accumulates (half the FLOPs) instead of FLOPs.")
@click.option("--last-logit", is_flag=True, help="The LM head on the last position only (default: every position).")
@click.option("--gpu", "gpus", type=TEXT, multiple=True, metavar="NAME",
              help="GPU for the time bounds, from the catalog docs/memory.md lists: h100, a100-80gb, 4090, mi300x ... (repeatable; default those first three).")
@click.option("--mfu", type=SHARE, default="0.5", show_default=True,
              help="Model FLOPs utilisation assumed for the prefill and training time.")
@click.option("--dtype", type=WEIGHT_DTYPE, default="bf16", show_default=True,
              help="Storage format of the weights a decode step reads (bf16, fp8, int4, q4_0 ...).")
@click.option("--kv-dtype", type=KV_DTYPE, default="bf16", show_default=True,
              help="Storage format of the KV cache a decode step reads.")
@image_options("its tower's FLOPs for them come first (the text pass's --seq counts their tokens).")
@json_option
def flops(spec: Any, seq: int, batch: int, decode: bool, causal_half: bool, macs: bool, last_logit: bool,
          gpus: tuple[str, ...], mfu: Fraction, dtype: str, kv_dtype: str, image: str | None, images: int,
          as_json: bool) -> None:
    """Forward and training FLOPs per component, the rules of thumb beside them, and time bounds.

    \b
    Example:
      gptcalc flops gpt2-small --seq 1024
      gptcalc flops llama-3-8b --seq 8192 --causal-half --gpu h100
      gptcalc flops mixtral-8x7b --seq 4096 --decode --batch 8
      gptcalc flops Qwen/Qwen3-VL-8B-Instruct --image 1024x1024 --seq 1100
    """
    from calc.analysis.flops import Conventions
    from calc.analysis.flops import flops as count_flops
    from calc.api import flops_json, image_flops
    from calc.analysis.flops.bounds import bounds
    from calc.analysis.flops.checks import checks
    from calc.analysis.memory.gpus import RATED, rated_gpu
    from calc.render import base as render
    from calc.render.flops import (CHECK_NOTES, bounds_notes, bounds_table, checks_table, flops_headline, flops_notes,
                                   flops_table)
    from calc.render.shapes import human_flops

    conventions = Conventions(macs, causal_half, last_logit)
    result = count_flops(spec, seq, batch, decode, conventions)
    tower = image_flops(spec, image, images, conventions)
    rules = checks(spec, result)
    chosen = [rated_gpu(name) for name in gpus or RATED]
    limits = [bounds(spec, result, gpu, mfu, dtype, kv_dtype) for gpu in chosen]
    if as_json:
        render.print_json(flops_json(result, rules, limits, decode, tower))
        return
    out = render.console()
    if tower:
        out.print(flops_table(tower))
        out.print(f"  the tower's forward pass on {images} image(s) ({image}); the text pass below is separate: "
                  f"together {human_flops((tower.forward + result.forward) // result.scale, 'MAC' if macs else 'FLOP')}")
    out.print(flops_headline(result))
    out.print(flops_table(result))
    for note in flops_notes(result):
        out.print("  " + note)
    out.print(checks_table(result, rules))
    for note in CHECK_NOTES:
        out.print("  " + note)
    out.print(bounds_table(result, limits))
    for note in bounds_notes(result):
        out.print("  " + note)

