"""`shapes`: calc/analysis/shapes/, drawn by calc/render/shapes.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import CONTEXT, json_option, model_options, pass_options


@click.command(context_settings=CONTEXT)
@model_options
@pass_options
@click.option("--explain", is_flag=True, help="Add a column saying in a sentence what each step does.")
@json_option
def shapes(spec: Any, seq: int, batch: int, decode: bool, explain: bool, as_json: bool) -> None:
    """Every matrix's shape from token ids to the next token, with weights, params and FLOPs.

    \b
    Example:
      gptcalc shapes gpt2-small --seq 5
      gptcalc shapes qwen2-72b --seq 1000 --decode --explain
      gptcalc shapes llama-3-8b --seq 16 --batch 4 --json
    """
    from calc.render import base as render
    from calc.render.shapes import shapes_notes, shapes_table
    from calc.analysis.shapes import journey

    steps = journey(spec, seq, batch, decode)
    if as_json:
        render.print_json(steps.to_json())
        return
    out = render.console()
    out.print(shapes_table(steps, explain))
    for note in shapes_notes(steps):
        out.print("  " + note)
