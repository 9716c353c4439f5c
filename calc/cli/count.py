"""`count` and `presets`: calc/analysis/count.py, drawn by calc/render/base.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import CONTEXT, json_option, load_model, models_argument, set_option


@click.command(context_settings=CONTEXT)
@models_argument
@set_option
@json_option
def count(models: tuple[str, ...], overrides: tuple[str, ...], as_json: bool) -> None:
    """Parameters per component, per layer and in total, exact.

    Several models: one table, a column per model, components lined up (`compare` adds memory).

    A config.json of a model_type gptcalc has no adapter for is counted by transformers' own
    model on the meta device when transformers is installed (exact, but not analytic: rows by
    module name).

    \b
    Example:
      gptcalc count gpt2-small
      gptcalc count llama-70b --json
      gptcalc count gpt2-small --set qkv_bias=false --set tie_embeddings=false
      gptcalc count llama-2-7b mistral-7b
    """
    if len(models) > 1:
        return _count_several(models, overrides, as_json)
    from calc.analysis.count import count as count_params
    from calc.errors import UnsupportedModelType
    from calc.render import base as render

    try:
        spec = load_model(models[0], overrides)
    except UnsupportedModelType as exc:
        return _count_with_transformers(exc, as_json)
    breakdown = count_params(spec)
    if as_json:
        from calc.api import count_json

        render.print_json(count_json(spec, breakdown))
        return
    out = render.console()
    out.print(render.count_table(spec, breakdown))
    for note in render.count_notes(spec, breakdown):
        out.print("  " + note)


def _count_several(models: tuple[str, ...], overrides: tuple[str, ...], as_json: bool) -> None:
    """The comparison's shape and parameter sections; JSON: each model's `count --json`."""
    from calc.analysis.compare import compare_models
    from calc.render import base as render
    from calc.render.compare import compare_table

    comparison = compare_models([load_model(model, overrides) for model in models])
    if as_json:
        from calc.api import count_json

        render.print_json([count_json(c.spec, c.breakdown) for c in comparison.columns])
        return
    out = render.console()
    out.print(compare_table(comparison, memory=False))
    out.print(f"  gptcalc compare {' '.join(models)} adds KV cache and memory; gptcalc count MODEL explains one model")


def _count_with_transformers(exc: Any, as_json: bool) -> None:
    """`count` of a model_type without an adapter: transformers' model, clearly not analytic."""
    from calc.arch.fallback import transformers_breakdown
    from calc.render import base as render

    breakdown = transformers_breakdown(exc)
    if as_json:
        render.print_json(breakdown.to_json())
        return
    out = render.console()
    out.print(render.module_table(breakdown))
    out.print(f"  {render.FALLBACK_NOTE}")


@click.command(context_settings=CONTEXT)
@json_option
def presets(as_json: bool) -> None:
    """All presets side by side: shape of each model and its exact total (alias: list).

    \b
    Example:
      gptcalc presets
      gptcalc list --json
    """
    from calc.analysis.count import by_family
    from calc.render import base as render
    from calc.spec.load import load_spec, preset_names

    rows = by_family(map(load_spec, preset_names()))
    if as_json:
        render.print_json([{**spec.model_dump(), "total": b.total} for spec, b in rows])
        return
    render.console().print(render.presets_table(rows))
