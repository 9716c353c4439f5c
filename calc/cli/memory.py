"""`kvcache` and `memory`: calc/analysis/memory/, drawn by calc/render/memory.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import (CONTEXT, KV_DTYPE, POSITIVE, TEXT, TOKENS, WEIGHT_DTYPE, complete_model, json_option, load_model,
                              one_model, set_option)
from calc.errors import GptcalcError


SEQ_HELP = "Tokens per sequence: 4096, 32k or 128k (k = 1,024, so 128k = 131,072; the output says what it read)."
KV_HELP = ("Storage type of the cached K and V: fp16 (bf16 is as wide), fp32, fp8_e4m3, fp8_e5m2, or llama.cpp's "
           "q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl (block scales included: q8_0 is 8.5 bits).")
TP_HELP = "Tensor-parallel GPUs: the cache per GPU (KV heads split, replicated past their count; MLA latent whole)."
MLA_HELP = "MLA models: cache expanded per-head K and V (transformers' eager attention) instead of the latent."


@click.command(context_settings=CONTEXT)
@click.argument("models", type=TEXT, nargs=-1, metavar="[MODEL]...")
@click.option("--seq", type=TOKENS, help=SEQ_HELP + "  [default: each model's context, n_positions]")
@click.option("--batch", type=POSITIVE, default=1, show_default=True, help="Sequences held at once.")
@click.option("--dtype", "--kv-dtype", "dtype", type=KV_DTYPE, default="fp16", show_default=True, help=KV_HELP)
@click.option("--tp", type=POSITIVE, default=1, show_default=True, help=TP_HELP)
@click.option("--mla-expanded", is_flag=True, help=MLA_HELP)
@click.option("--gqa", is_flag=True, help="Show each model under MHA, its own attention and MQA, with the saving.")
@set_option
@json_option
def kvcache(models: tuple[str, ...], seq: int | None, batch: int, dtype: str, tp: int, mla_expanded: bool, gqa: bool,
            overrides: tuple[str, ...], as_json: bool) -> None:
    """KV cache bytes per token and in total, by layer kind; no MODEL: every preset.

    bytes = n_layers x (K + V elements per token) x tokens kept x batch x bytes per element, where
    K = V = n_kv_heads x head_dim, sliding-window layers keep at most their window, and MLA keeps
    one latent of kv_lora_rank + qk_rope_head_dim.

    \b
    Example:
      gptcalc kvcache llama-7b --seq 4096
      gptcalc kvcache llama-70b qwen2-72b --seq 32768 --dtype bf16 --gqa
      gptcalc kvcache mistral-7b deepseek-v3 --seq 32k --kv-dtype q8_0
      gptcalc kvcache --seq 8192 --json
    """
    from calc.render import base as render, memory as render_memory
    from calc.analysis.memory import kv_cache, kv_variants
    from calc.analysis.memory.parallel import check_tp
    from calc.analysis.count import by_family
    from calc.spec.load import preset_names

    specs = [load_model(model, overrides) for model in models]
    if not models:  # every preset, in the order `presets` lists them
        specs = [spec for spec, _ in by_family(load_model(name, overrides) for name in preset_names())]
    for spec in specs:
        check_tp(spec, tp)
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
        caches = [kv_cache(spec, seq or spec.n_positions, batch, dtype, tp, mla_expanded) for spec in specs]
        data, table = [kv.to_json() for kv in caches], render_memory.kvcache_table(caches)
    if as_json:
        render.print_json(data)
        return
    out = render.console()
    out.print(table)
    notes = [render_memory.seq_note(seq), *(render_memory.context_note(spec, seq) for spec in specs),
             *(note for kv in ([] if gqa else caches) for note in render_memory.kv_notes(kv))]
    for note in filter(None, notes):
        out.print("  " + note)
    for reason in skipped:
        out.print(f"  not shown: {reason}")


def _gqa_json(variants: Any) -> dict[str, Any]:
    """The model's own cache at the top level, and all three variants with their saving vs MHA."""
    mha = variants["MHA"].total_bytes
    return {
        **variants["model"].to_json(),
        "variants": {name: {**kv.to_json(), "saving_vs_mha": mha // kv.total_bytes} for name, kv in variants.items()},
    }


@click.command(context_settings=CONTEXT)
@click.argument("model", type=TEXT, required=False, metavar="[MODEL]", shell_complete=complete_model)
@click.argument("more", type=TEXT, nargs=-1, metavar="")
@set_option
@click.option("--checkpoint", type=TEXT, metavar="PATH|REPO_ID",
              help="Weights as this checkpoint stores them, read from its headers (any format: bf16, FP8 + scales, "
                   "GPTQ, bitsandbytes); MODEL defaults to its config.json.")
@click.option("--seq", type=TOKENS, help=SEQ_HELP + "  [default: the model's context, n_positions]")
@click.option("--batch", type=POSITIVE, help="Sequences held at once  [default: 1]")
@click.option("--dtype", type=WEIGHT_DTYPE, default="fp16", show_default=True,
              help="Storage type of the weights: fp32, fp16/bfloat16, fp8_e4m3, int8, int4, or a llama.cpp type "
                   "(q8_0, q4_0, q4_K, q6_K, mxfp4, ...).")
@click.option("--kv-dtype", type=KV_DTYPE, default="fp16", show_default=True, help=KV_HELP + " Not tied to --dtype.")
@click.option("--mla-expanded", is_flag=True, help=MLA_HELP)
@click.option("--quant", type=TEXT, metavar="SCHEME",
              help="A checkpoint's quantisation scheme, its real layout and what it keeps 16-bit: gptq-int4, awq-int4, "
                   "bnb-nf4, bnb-nf4-dq, bnb-int8, fp8, fp8-channel, fp8-block, mxfp4, nvfp4 (replaces --dtype).")
@click.option("--group-size", type=POSITIVE, metavar="G",
              help="fp8/int8/int4 only: count one fp16 scale per G weights (GPTQ/AWQ use 128).")
@click.option("--budget", type=TEXT, metavar="SIZE|GPU|NxGPU",
              help="Solve for the longest context at --batch, or with --seq the largest batch, that fits, per GPU: "
                   "80GB, 75GiB, H100-80GB, or 2xH100-80GB (tensor parallel over 2 unless --tp/--pp say otherwise).")
@click.option("--tp", type=POSITIVE, help="Tensor-parallel GPUs (shards matrices, splits KV heads)  [default: 1]")
@click.option("--pp", type=POSITIVE, help="Pipeline stages (splits layers as vLLM does)  [default: 1]")
@click.option("--ep", type=POSITIVE, help="Expert-parallel ways: routed experts split whole  [default: 1]")
@click.option("--cpu-experts", "--n-cpu-moe", "cpu_experts", type=TEXT, metavar="all|N",
              help="Keep the routed experts of the first N layers (all: every layer) in system RAM, as llama.cpp's "
                   "--n-cpu-moe N / --cpu-moe: GPU bytes exclude them, and the output says what a token reads from RAM.")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm", "llamacpp"]),
              help="Print what this server will say about its KV cache (llama.cpp pads --seq to 256 cells).")
@click.option("--kv-memory", type=TEXT, metavar="SIZE",
              help="The KV memory your server's log reports (vLLM 'Available KV cache memory: 8.11 GiB'): "
                   "gives the exact blocks, tokens and concurrency it will print.")
@click.option("--block-size", type=POSITIVE, help="Tokens per KV block  [default: the engine's: vLLM 16, TRT-LLM 32]")
@click.option("--max-num-batched-tokens", "max_batched", type=POSITIVE, default=2048, show_default=True,
              help="vLLM with sliding-window layers: tokens a window group holds beyond its window, which sets the "
                   "concurrency it prints (vllm serve: 2048, or 8192 on a 70 GiB+ GPU that is not an A100).")
@click.option("--image", type=TEXT, metavar="WxH",
              help="A multimodal model: the tokens one image of WxH pixels becomes (the model's processor rule) and "
                   "their KV cache.")
@click.option("--images", type=POSITIVE, default=1, show_default=True, help="How many such images (with --image).")
@click.option("--text-only", is_flag=True,
              help="Leave a multimodal model's towers out of the weights, as vLLM's --language-model-only does.")
@click.option("--mm-encoder-tp-mode", "encoder_mode", type=click.Choice(["weights", "data"]), default="weights",
              show_default=True, help="vLLM's: split the vision encoder's layers across --tp GPUs, or keep it whole on each.")
@json_option
def memory(model: str | None, more: tuple[str, ...], overrides: tuple[str, ...], checkpoint: str | None, seq: int | None, batch: int | None,
           dtype: str, kv_dtype: str, mla_expanded: bool, quant: str | None, group_size: int | None, budget: str | None,
           tp: int | None, pp: int | None, ep: int | None, cpu_experts: str | None, engine: str | None,
           kv_memory: str | None, block_size: int | None, max_batched: int, image: str | None, images: int,
           text_only: bool, encoder_mode: str, as_json: bool) -> None:
    """Weights + KV cache for inference, and which GPUs they fit in.

    Activations and framework overhead are not included (the output says so).

    \b
    Example:
      gptcalc memory llama-7b --seq 4096
      gptcalc memory llama-70b --dtype int4 --group-size 128 --kv-dtype fp16
      gptcalc memory llama-3-8b --budget H100-80GB --batch 8
      gptcalc memory qwen2-72b --dtype fp8 --budget 141GB --seq 8192 --json
      gptcalc memory llama-3-70b --budget 2xH100-80GB --seq 32k
      gptcalc memory --checkpoint ./Llama-3.1-8B-Instruct-FP8 --budget L4
      gptcalc memory qwen3-30b-a3b --quant q4_k_m --n-cpu-moe 24 --budget RTX-4090
      gptcalc memory Qwen/Qwen3.5-27B --image 1024x1024 --images 4
    """
    from calc.render import base as render, memory as render_memory
    from calc.analysis.count import count as count_params
    from calc.analysis.memory import (ENGINES, budget_for, engine_lines, find_scheme, inference, kv_pool, layout_for,
                                      padded_context, parse_budget, parse_cpu_experts)
    from calc.units import parse_bytes

    one_model(model, more)
    spec, stored = _model_and_checkpoint(model, overrides, checkpoint)
    target = parse_budget(budget) if budget is not None else None  # `--budget ''` is an error, not no budget
    layout = layout_for(target, tp, pp, ep)
    if (kv_memory or block_size) and not engine:
        raise GptcalcError("--kv-memory and --block-size describe a server's pool: give --engine too")
    tokens = padded_context(ENGINES[engine], seq or spec.n_positions) if engine else seq or spec.n_positions
    result = inference(spec, count_params(spec), tokens, batch or 1, dtype, kv_dtype, group_size,
                       mla_expanded, layout, find_scheme(quant) if quant is not None else None, stored,
                       parse_cpu_experts(cpu_experts, spec) if cpu_experts is not None else 0, text_only,
                       encoder_mode == "data")
    pictures = _image_cost(spec, image, images, kv_dtype, text_only)
    pool = None
    if kv_memory is not None and engine:
        try:
            pool = kv_pool(result.kv, engine, parse_bytes(kv_memory), seq or spec.n_positions, block_size, max_batched)
        except ValueError as exc:
            raise GptcalcError(f"--kv-memory: {exc}") from None
    server = engine_lines(pool, result.kv, engine) if engine else []
    solved = budget_for(spec, target, result, seq, batch) if target else None
    if as_json:
        render.print_json({**result.to_json(), "model": spec.name, **({"engine": pool.to_json()} if pool else {}),
                           **({"server_says": server} if server else {}),
                           **({"images": pictures.to_json()} if pictures else {}),
                           **({"budget": {**solved.to_json(), "label": target.label, "gpus": target.count}}
                              if solved and target else {})})
        return
    out = render.console()
    for line in render_memory.headline(result, solved, target):
        out.print(line)
    from calc.render.markup import styled

    for line in server:
        out.print(f"{engine} will print: " + styled("bold", line))
    for table in (render_memory.weights_table(result), render_memory.inference_table(result),
                  render_memory.gpu_table(result)):
        out.print(table)
    notes = [render_memory.seq_note(seq), render_memory.context_note(spec, seq),
             *render_memory.inference_notes(result), *render_memory.tower_notes(spec, pictures, text_only),
             *(render_memory.budget_lines(solved, target.label) if solved and target else [])]
    for line in filter(None, notes):
        out.print("  " + line)


def _image_cost(spec: Any, image: str | None, images: int, kv_dtype: str, text_only: bool) -> Any:
    """--image WxH --images N: what those images cost the decoder, or None without --image."""
    from calc.analysis.memory.towers import image_cost, parse_image

    if image is None:
        return None
    if text_only:
        raise GptcalcError("--image and --text-only: a text-only server takes no images; drop one")
    return image_cost(spec, *parse_image(image), images, kv_dtype)


def _model_and_checkpoint(model: str | None, overrides: tuple[str, ...], checkpoint: str | None) -> tuple[Any, Any]:
    """MODEL's spec, or the checkpoint's own (its config.json, else its tensor shapes), and the
    checkpoint's stored bytes by component when --checkpoint is given."""
    if checkpoint is None:
        if model is None:
            raise click.UsageError("Missing argument 'MODEL' (or give --checkpoint PATH|REPO_ID).")
        return load_model(model, overrides), None
    from calc.analysis.memory.stored import stored_weights
    from calc.checkpoint.report import read_checkpoint

    if overrides and model is None:
        raise GptcalcError("--set changes MODEL: name it too (with --checkpoint, MODEL defaults to its config.json)")
    report = read_checkpoint(checkpoint, load_model(model, overrides) if model else None)
    return report.spec, stored_weights(report)
