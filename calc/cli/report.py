"""`report`: calc/analysis/compare.py and calc/analysis/pictures.py, drawn by calc/render/report.py."""

from __future__ import annotations

import click

from calc.cli.options import (
    CONTEXT, TEXT, load_model, models_argument, seq_option, seq_max_option, set_option, sizing_options,
    wrote
)


@click.command(context_settings=CONTEXT)
@models_argument
@seq_option
@seq_max_option
@sizing_options(gpus=True)
@set_option
@click.option("-o", "--output", type=TEXT, required=True, help="The HTML file to write (-: standard output).")
def report(models: tuple[str, ...], seq: int | None, seq_max: int | None, dtype: str | None, quant: str | None,
           kv_dtype: str, tp: int | None, pp: int | None, ep: int | None, gpus: str | None, engine: str | None,
           overrides: tuple[str, ...], output: str) -> None:
    """One self-contained HTML page: the side-by-side table, the pictures, each model's tables.

    Opens offline (nothing fetched; pictures inline as SVG), for sharing a sizing decision. Its
    controls (context, batch, weight and KV formats, GPU and count, engine) recompute every model's
    memory per GPU from exact coefficients the page embeds, with the state in the URL fragment
    (#seq=131072&batch=4&gpus=2xH100-80GB). Without matplotlib the page has the tables and says
    the pictures need it.

    \b
    Example:
      gptcalc report llama-3.1-8b qwen2.5-7b mistral-7b --seq 32k --gpus H100,4090 -o report.html
      gptcalc report llama-2-70b mixtral-8x7b --dtype int4 --kv-dtype fp16 -o sizing.html
    """
    import shlex

    from calc.analysis.compare import compare_models
    from calc.analysis.memory.refusals import engine_seq
    from calc.analysis.memory import Layout
    from calc.outputs import output_path, write_atomic
    from calc.render.report import report_html

    path = output_path(output, stdout_ok=True)  # before the work, not after it
    specs = [load_model(model, overrides) for model in models]
    layout = Layout(tp or 1, pp or 1, ep or 1)
    comparison = compare_models(specs, engine_seq(engine, seq, specs), dtype,
                                kv_dtype, quant, layout)
    sizing = {"--dtype": dtype, "--quant": quant, "--tp": tp, "--pp": pp, "--ep": ep, "--engine": engine}
    pictures = _pictures(comparison, seq_max or max(spec.n_positions for spec in specs), gpus,
                         dict(dtype=dtype, quant=quant, layout=layout, engine=engine))
    settings = ["--seq", str(comparison.seq), *(arg for key, value in sizing.items() if value for arg in (key, str(value))),
                "--kv-dtype", comparison.kv_dtype, "--seq-max", str(seq_max or max(spec.n_positions for spec in specs)),
                *(["--gpus", gpus] if gpus else []), *(arg for pair in overrides for arg in ("--set", pair))]
    from calc.analysis.coefficients import coefficients

    page = report_html(comparison, pictures, shlex.join(["gptcalc", "report", *models, *settings]),
                       [{**coefficients(spec), "name": column.name} for spec, column in zip(specs, comparison.columns)])
    write_atomic(path, lambda handle: handle.write(page.encode("utf-8")))
    if path is not None:
        wrote(path, "" if pictures else " (no pictures: pip install 'gptcalc[plot]')")


def _pictures(comparison, seq_max: int, gpus: str | None,  # type: ignore[no-untyped-def]
              sizing: dict) -> dict[str, str] | None:  # type: ignore[type-arg]
    """Title -> inline SVG of both plots; None when matplotlib is missing (the tables still go out)."""
    from calc.analysis.pictures import groups, memory_curves, parse_gpus
    from calc.render import plot

    lines = parse_gpus(gpus)
    if not plot.available():
        return None
    specs = [column.spec for column in comparison.columns]
    curves = memory_curves(specs, seq_max, kv_dtype=comparison.kv_dtype, **sizing)
    memory = plot.memory_figure(curves, lines, seq_max, comparison.dtype, comparison.kv_dtype)
    params = plot.params_figure([(c.name, groups(c.breakdown)) for c in comparison.columns])
    return {"Memory against context": plot.svg_text(memory), "Where the parameters sit": plot.svg_text(params)}
