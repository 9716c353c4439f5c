"""`compare`: calc/analysis/compare.py, drawn by calc/render/compare.py."""

from __future__ import annotations

import click

from calc.cli.options import CONTEXT, json_option, load_model, models_argument, seq_option, set_option, sizing_options


@click.command(context_settings=CONTEXT)
@models_argument
@seq_option
@sizing_options()
@set_option
@json_option
def compare(models: tuple[str, ...], seq: int | None, dtype: str | None, quant: str | None, kv_dtype: str,
            tp: int | None, pp: int | None, ep: int | None, budget: str | None, engine: str | None,
            overrides: tuple[str, ...], as_json: bool) -> None:
    """Models side by side: shape, parameters component by component, KV cache and memory.

    One column per model. Parameter rows line up by component (Q weight with Q weight, experts
    with experts; '-' where a model has none), then totals, active parameters per token, KV
    bytes per token, and weights + KV cache for --seq tokens (batch 1), each model's weights as
    stored unless --dtype or --quant says otherwise; per GPU under --tp/--pp or an NxGPU --budget.

    \b
    Example:
      gptcalc compare llama-2-7b mistral-7b
      gptcalc compare llama-3-8b qwen2-7b gemma-2-9b --seq 8k --dtype bf16
      gptcalc compare mixtral-8x7b llama-2-70b --dtype int4 --kv-dtype fp16 --json
      gptcalc compare gpt-oss-120b qwen3-235b-a22b --budget 4xH100-80GB
    """
    from calc.analysis.compare import compare_models
    from calc.analysis.memory.refusals import engine_seq
    from calc.render import base as render
    from calc.render.compare import compare_headlines, compare_table
    from calc.render.memory import context_note

    from calc.analysis.memory import layout_for, parse_budget

    specs = [load_model(model, overrides) for model in models]
    target = parse_budget(budget) if budget is not None else None
    comparison = compare_models(specs, engine_seq(engine, seq, specs), dtype,
                                kv_dtype, quant, layout_for(target, tp, pp, ep), target)
    if as_json:
        render.print_json(comparison.to_json())
        return
    out = render.console()
    for line in compare_headlines(comparison):
        out.print(line)
    out.print(compare_table(comparison))
    for note in filter(None, (context_note(c.spec, comparison.seq) for c in comparison.columns)):
        out.print("  " + note)
    out.print("  memory: weights + KV cache at batch 1; activations and framework overhead not included "
              "(gptcalc memory MODEL shows them per GPU)")
