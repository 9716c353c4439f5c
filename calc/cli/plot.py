"""`plot memory` and `plot params`: calc/analysis/pictures.py, drawn by calc/render/plot.py."""

from __future__ import annotations

import click

from calc.cli.options import (
    CONTEXT, TEXT, load_model, models_argument, seq_max_option, set_option, sizing_options, wrote
)

output_option = click.option("-o", "--output", type=TEXT, required=True,
                             help="File to write: .png or .svg (the suffix picks the format).")


@click.group(context_settings=CONTEXT)
def plot() -> None:
    """Pictures: memory against context with your GPUs as lines, and where the parameters sit.

    Needs matplotlib: pip install 'gptcalc[plot]'.

    \b
    Example:
      gptcalc plot memory llama-3.1-8b qwen2.5-7b --seq-max 128k --gpus H100,4090 -o memory.png
      gptcalc plot params gpt2-small llama-2-7b mixtral-8x7b deepseek-v3 -o params.svg
    """


@plot.command(context_settings=CONTEXT)
@models_argument
@seq_max_option
@sizing_options(gpus=True)
@set_option
@output_option
def memory(models: tuple[str, ...], seq_max: int | None, dtype: str | None, quant: str | None, kv_dtype: str,
           tp: int | None, pp: int | None, ep: int | None, gpus: str | None, engine: str | None,
           overrides: tuple[str, ...], output: str) -> None:
    """Weights + KV cache (batch 1) against context, one line per model, GPUs as lines.

    Each line is dotted past its model's own context.

    \b
    Example:
      gptcalc plot memory llama-3.1-8b --seq-max 128k --gpus H100,4090 -o memory.png
      gptcalc plot memory llama-2-70b qwen2-72b --dtype int4 --kv-dtype fp16 --gpus A100-80GB,H200 -o m.svg
      gptcalc plot memory gpt-oss-120b deepseek-v3 --gpus 8xH100-80GB,8xB200 -o big.png
    """
    from calc.analysis.memory import Layout
    from calc.analysis.pictures import memory_curves, parse_gpus
    from calc.render.plot import memory_figure, picture_path, save

    path = picture_path(output)
    specs = [load_model(model, overrides) for model in models]
    lines = parse_gpus(gpus)
    seq_max = seq_max or max(spec.n_positions for spec in specs)
    curves = memory_curves(specs, seq_max, dtype, kv_dtype, quant=quant, layout=Layout(tp or 1, pp or 1, ep or 1),
                           engine=engine)
    save(memory_figure(curves, lines, seq_max, quant or dtype or "as stored", kv_dtype), path)
    wrote(path)


@plot.command(context_settings=CONTEXT)
@models_argument
@set_option
@output_option
def params(models: tuple[str, ...], overrides: tuple[str, ...], output: str) -> None:
    """Where the parameters sit: a bar per model split into embedding, attention, MLP, experts, norms, head.

    \b
    Example:
      gptcalc plot params gpt2-small llama-2-7b mixtral-8x7b -o params.png
    """
    from calc.analysis.count import count
    from calc.analysis.pictures import groups
    from calc.render.plot import params_figure, picture_path, save

    path = picture_path(output)
    specs = [load_model(model, overrides) for model in models]
    save(params_figure([(spec.name, groups(count(spec))) for spec in specs]), path)
    wrote(path)
