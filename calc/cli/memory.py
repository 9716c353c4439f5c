"""`kvcache` and `memory`: calc/analysis/memory.py, drawn by calc/render/memory.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import CONTEXT, DTYPES, POSITIVE, json_option, load_model, model_options, set_option
from calc.errors import GptcalcError


@click.command(context_settings=CONTEXT)
@click.argument("models", nargs=-1, metavar="[MODEL]...")
@click.option("--seq", type=POSITIVE, help="Tokens per sequence  [default: each model's context, n_positions]")
@click.option("--batch", type=POSITIVE, default=1, show_default=True, help="Sequences held at once.")
@click.option("--dtype", type=DTYPES, default="fp16", show_default=True, help="Storage type of the cached K and V.")
@click.option("--gqa", is_flag=True, help="Show each model under MHA, its own attention and MQA, with the saving.")
@set_option
@json_option
def kvcache(models: tuple[str, ...], seq: int | None, batch: int, dtype: str, gqa: bool,
            overrides: tuple[str, ...], as_json: bool) -> None:
    """KV cache bytes per token and in total; no MODEL: every preset.

    bytes = 2 (K and V) x n_layers x n_kv_heads x head_dim x seq x batch x bytes per element.

    \b
    Example:
      gptcalc kvcache llama-7b --seq 4096
      gptcalc kvcache llama-70b qwen2-72b --seq 32768 --dtype bf16 --gqa
      gptcalc kvcache --seq 8192 --json
    """
    from calc.render import base as render, memory as render_memory
    from calc.analysis.memory import kv_cache, kv_variants
    from calc.spec.load import preset_names

    specs = [load_model(model, overrides) for model in (models or preset_names())]
    skipped: list[str] = []
    if gqa:
        variants = []
        for spec in specs:
            try:
                variants.append(kv_variants(spec, seq or spec.n_positions, batch, dtype))
            except GptcalcError as exc:
                if models:  # a model the user named: say why it has no MHA/GQA/MQA variants
                    raise
                skipped.append(str(exc).removeprefix("--gqa: "))
        data, table = [_gqa_json(v) for v in variants], render_memory.gqa_table(variants)
    else:
        caches = [kv_cache(spec, seq or spec.n_positions, batch, dtype) for spec in specs]
        data, table = [kv.to_json() for kv in caches], render_memory.kvcache_table(caches)
    if as_json:
        render.print_json(data)
        return
    out = render.console()
    out.print(table)
    for note in filter(None, (render_memory.context_note(spec, seq) for spec in specs)):
        out.print(f"  {note}")
    for reason in skipped:
        out.print(f"  not shown: {reason}", markup=False)


def _gqa_json(variants: Any) -> dict[str, Any]:
    """The model's own cache at the top level, and all three variants with their saving vs MHA."""
    mha = variants["MHA"].total_bytes
    return {
        **variants["model"].to_json(),
        "variants": {name: {**kv.to_json(), "saving_vs_mha": mha // kv.total_bytes} for name, kv in variants.items()},
    }


@click.command(context_settings=CONTEXT)
@model_options
@click.option("--seq", type=POSITIVE, help="Tokens per sequence  [default: the model's context, n_positions]")
@click.option("--batch", type=POSITIVE, help="Sequences held at once  [default: 1]")
@click.option("--dtype", type=DTYPES, default="fp16", show_default=True, help="Storage type of the weights.")
@click.option("--kv-dtype", type=DTYPES, help="Storage type of the KV cache  [default: --dtype]")
@click.option("--group-size", type=POSITIVE, metavar="G",
              help="fp8/int8/int4 only: count one fp16 scale per G weights (GPTQ/AWQ use 128).")
@click.option("--budget", metavar="SIZE|GPU",
              help="Solve for the longest context at --batch, or with --seq the largest batch, "
                   "that fits, e.g. 80GB, 75GiB or H100-80GB.")
@json_option
def memory(spec: Any, seq: int | None, batch: int | None, dtype: str, kv_dtype: str | None,
           group_size: int | None, budget: str | None, as_json: bool) -> None:
    """Weights + KV cache for inference, and which GPUs they fit in.

    Activations and framework overhead are not included (the output says so).

    \b
    Example:
      gptcalc memory llama-7b --seq 4096
      gptcalc memory llama-70b --dtype int4 --group-size 128 --kv-dtype fp16
      gptcalc memory llama-3-8b --budget H100-80GB --batch 8
      gptcalc memory qwen2-72b --dtype fp8 --budget 141GB --seq 8192 --json
    """
    from calc.render import base as render, memory as render_memory
    from calc.analysis.count import count as count_params
    from calc.analysis.memory import budget_for, inference

    result = inference(spec, count_params(spec), seq or spec.n_positions, batch or 1, dtype, kv_dtype, group_size)
    solved, label = budget_for(spec, budget, result, seq, batch) if budget is not None else (None, "")
    if as_json:
        render.print_json({**result.to_json(), "model": spec.name,
                           **({"budget": {**solved.to_json(), "label": label}} if solved else {})})
        return
    out = render.console()
    for table in (render_memory.weights_table(result), render_memory.inference_table(result),
                  render_memory.gpu_table(result)):
        out.print(table)
    notes = [render_memory.context_note(spec, seq), *render_memory.inference_notes(result),
             *(render_memory.budget_lines(solved, label) if solved else [])]
    for line in filter(None, notes):
        out.print(f"  {line}")
