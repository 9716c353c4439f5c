"""`fit`: calc/analysis/fit.py, drawn by calc/render/fit.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from calc.cli.options import (CONTEXT, POSITIVE, TEXT, TOKENS, complete_model, dp_attention_options, dtype_option,
                              json_option, kv_dtype_option, max_batched_option, pool_options, quant_option, set_option)

if TYPE_CHECKING:
    from calc.analysis.memory.pool_settings import PoolSettings


@click.command(context_settings=CONTEXT)
@click.argument("model", type=TEXT, metavar="MODEL", shell_complete=complete_model)
@set_option
@click.option("--seq", type=TOKENS, required=True, help="Tokens per request: 8192, 32k, 128k (k = 1,024).")
@click.option("--gpus", type=TEXT, default="H100,H200,B200", show_default=True, metavar="GPU,GPU,...",
              help="GPU types to try (names from the catalog: H100, H200, B200, A100-80GB, L40S, RTX-4090, MI300X, ...).")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm"]), default="vllm", show_default=True,
              help="Whose start-up budget sizes the KV pool.")
@click.option("--concurrency", type=POSITIVE, default=1, show_default=True, help="Requests of --seq tokens held at once.")
@dtype_option
@quant_option
@kv_dtype_option
@max_batched_option
@pool_options
@dp_attention_options
@click.option("--top", type=POSITIVE, default=10, show_default=True, help="Candidates shown.")
@json_option
def fit(model: str, overrides: tuple[str, ...], seq: int, gpus: str, engine: str, concurrency: int, dtype: str | None,
        quant: str | None, kv_dtype: str, max_batched: int | None, pool_settings: PoolSettings, dp_attention: Any,
        top: int, as_json: bool) -> None:
    """The smallest layouts (GPU type x count, TP/PP/EP) that serve MODEL at --seq, ranked.

    Each layout is checked as a server checks it (TP divides the heads, EP the experts, PP at most the
    layers) and sized with the engine's own start-up budget (see `gptcalc memory --engine`), the
    weights as stored unless --dtype/--quant say otherwise (gpt-oss: MXFP4 experts).

    \b
    Example:
      gptcalc fit llama-3-70b --seq 32k
      gptcalc fit deepseek-v3 --seq 128k --quant fp8 --gpus H200,B200 --concurrency 8
      gptcalc fit qwen3-235b-a22b --seq 32k --engine sglang --json
    """
    from calc.analysis.count import count as count_params
    from calc.analysis.fit import fit as find_layouts, parse_gpus
    from calc.analysis.memory import weight_choice
    from calc.analysis.memory.kv import kv_cache
    from calc.analysis.memory.trtllm_manager import manager_note
    from calc.analysis.memory.startup import Reserves
    from calc.cli.options import load_model
    from calc.render import base as render, fit as render_fit

    spec = load_model(model, overrides)
    weights, scheme = weight_choice(spec, dtype, quant)
    candidates, skipped = find_layouts(spec, count_params(spec), seq, parse_gpus(gpus), engine, concurrency, weights,
                                       kv_dtype, scheme, reserves=Reserves(max_batched=max_batched),
                                       pool_settings=pool_settings, dp_attention=dp_attention)
    shown = candidates[:top]
    note = (manager_note(spec, kv_cache(spec, seq, 1, kv_dtype), 1, pool_settings.kv_cache_manager_v2,
                         overlap=pool_settings.overlap_scheduler)
            if engine == "trtllm" else None)  # whose pools the tokens are
    if note and any(c.pool is not None and c.pool.per_rank for c in shown):
        note += ("; a layout with pipeline parallelism has each rank's V2 pools, its quota cut to the fewest tokens "
                 "any rank holds, and the tokens shown are that fewest, the KV pool that rank's budget and the weights "
                 "the busiest rank's, the layers split as TensorRT-LLM splits them (calc.analysis.memory.trtllm_v2_pp)")
    if as_json:
        render.print_json({"model": spec.name, "seq": seq, "concurrency": concurrency, "engine": engine,
                           "dp_attention": dp_attention.size if dp_attention is not None else None,
                           "candidates": [c.to_json() for c in shown], "skipped_layouts": skipped,
                           **({"engine_note": note} if note else {})})
        return
    out = render.console()
    out.print(render_fit.header(spec.name, seq, concurrency, engine))
    for rank, candidate in enumerate(shown, 1):
        out.print(render_fit.candidate_line(rank, candidate))
    if not shown:
        out.print("  none of these GPUs serves it in up to 64 of them")
    for reason in skipped:
        out.print(f"  not tried: {reason}")
    if note:
        out.print("  " + note)
