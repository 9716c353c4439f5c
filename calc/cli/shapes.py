"""`shapes`: calc/analysis/shapes/, drawn by calc/render/shapes.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import CONTEXT, image_options, json_option, model_options, pass_options


@click.command(context_settings=CONTEXT)
@model_options
@pass_options
@click.option("--explain", is_flag=True, help="Add a column saying in a sentence what each step does.")
@image_options("its journey from patches to tokens at the decoder's width comes first.")
@json_option
def shapes(spec: Any, seq: int, batch: int, decode: bool, explain: bool, image: str | None, images: int,
           as_json: bool) -> None:
    """Every matrix's shape from token ids to the next token, with weights, params and FLOPs.

    \b
    Example:
      gptcalc shapes gpt2-small --seq 5
      gptcalc shapes qwen2-72b --seq 1000 --decode --explain
      gptcalc shapes llama-3-8b --seq 16 --batch 4 --json
      gptcalc shapes Qwen/Qwen3-VL-8B-Instruct --image 1024x1024 --seq 1100
    """
    from calc.render import base as render
    from calc.render.shapes import shapes_notes, shapes_table
    from calc.analysis.shapes import journey

    steps = journey(spec, seq, batch, decode)
    tower, tokens = _through_tower(spec, image, images)
    if as_json:
        data = steps.to_json()
        if tower:
            data["image"] = {**tower.to_json(), "images": images, "per_image": tokens.to_json()}
        render.print_json(data)
        return
    out = render.console()
    for walk in [tower, steps] if tower else [steps]:
        out.print(shapes_table(walk, explain))
        for note in shapes_notes(walk):
            out.print("  " + note)
    if tower:
        out.print(f"  the {images} image(s) are {images * tokens.tokens:,} of the decoder's positions: --seq counts "
                  "them with the text")


def _through_tower(spec: Any, image: str | None, images: int) -> tuple[Any, Any]:
    """--image: the images' journey through the vision tower and one image's tokens; (None, None) without it."""
    from calc.analysis.shapes.tower import tower_journey
    from calc.towers.images import parse_image

    return (None, None) if image is None else tower_journey(spec, *parse_image(image), images)
