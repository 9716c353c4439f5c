"""`kvcache` and `memory`: calc/analysis/memory/, drawn by calc/render/memory.py."""

from __future__ import annotations

from typing import Any

import click

from calc.cli.options import (CONTEXT, KV_DTYPE, POSITIVE, SHARE, TEXT, TOKENS, complete_model, json_option, load_model,
                              one_model, set_option, sizing_options)
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
    for kv in [] if gqa or not models else caches:  # the answer first; every preset is a table, not a list
        out.print(render_memory.kvcache_headline(kv))
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
@sizing_options()
@click.option("--mla-expanded", is_flag=True, help=MLA_HELP)
@click.option("--group-size", type=POSITIVE, metavar="G",
              help="fp8/int8/int4 only: count one fp16 scale per G weights (GPTQ/AWQ use 128).")
@click.option("--cpu-experts", "--n-cpu-moe", "cpu_experts", type=TEXT, metavar="all|N",
              help="Keep the routed experts of the first N layers (all: every layer) in system RAM, as llama.cpp's "
                   "--n-cpu-moe N / --cpu-moe: GPU bytes exclude them, and the output says what a token reads from RAM.")
@click.option("--kv-memory", type=TEXT, metavar="SIZE",
              help="The KV memory your server's log reports (vLLM 'Available KV cache memory: 8.11 GiB'): "
                   "gives the exact blocks, tokens and concurrency it will print.")
@click.option("--block-size", type=POSITIVE, help="Tokens per KV block  [default: the engine's: vLLM 16, TRT-LLM 32]")
@click.option("--parallel", "-np", "n_parallel", type=POSITIVE, default=1, show_default=True,
              help="--engine llamacpp: sequences (llama.cpp's -np/--parallel, n_seq_max), each its own stream of cells "
                   "unless --kv-unified.")
@click.option("--ubatch", type=POSITIVE, default=512, show_default=True,
              help="--engine llamacpp: llama.cpp's -ub; its sliding-window cache holds n_swa + ubatch cells.")
@click.option("--kv-unified", is_flag=True, help="--engine llamacpp: one cache stream for all sequences (llama.cpp's -kvu).")
@click.option("--swa-full", is_flag=True, help="--engine llamacpp: full-size sliding-window cache (llama.cpp's --swa-full).")
@click.option("--cache-type-k", "-ctk", type=TEXT, metavar="TYPE", default=None,
              help="--engine llamacpp: K cache type (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)  "
                   "[default: --kv-dtype's]")
@click.option("--cache-type-v", "-ctv", type=TEXT, metavar="TYPE", default=None,
              help="--engine llamacpp: V cache type  [default: --kv-dtype's]")
@click.option("--max-num-batched-tokens", "max_batched", type=POSITIVE,
              help="vLLM: tokens of the profiling forward (its activation peak) and, with sliding-window layers, "
                   "what a window group holds beyond its window  [default: vllm serve's: 2048, 8192 on a 70 GiB+ "
                   "GPU that is not an A100, 16384 on 160 GiB+; SGLang: its chunked prefill size]")
@click.option("--max-num-seqs", "max_seqs", type=POSITIVE,
              help="vLLM: requests of the sampler's profiling run  [default: 256, 1024 on a 70 GiB+ GPU]")
@click.option("--gpu-memory-utilization", "--mem-fraction-static", "fraction", type=SHARE,
              help="Share of the GPU the engine may use  [default: vLLM 0.9; SGLang's rule by GPU size]")
@click.option("--activation-memory", type=TEXT, metavar="SIZE",
              help="The engine's activation peak from your log  [default: estimated from the shapes]")
@click.option("--non-torch-memory", type=TEXT, metavar="SIZE", help="Memory outside torch (CUDA context, NCCL)  "
              "[default: 0.2 GiB, as published vLLM logs show]")
@click.option("--cuda-graph-memory", type=TEXT, metavar="SIZE",
              help="vLLM's CUDA graph estimate (0 with --enforce-eager)  [default: 0.5 GiB]")
@click.option("--all", "show_all", is_flag=True,
              help="Show every GPU of the catalog, not only the budget's card (or, without one, a short list).")
@click.option("--image", type=TEXT, metavar="WxH",
              help="A multimodal model: the tokens one image of WxH pixels becomes (the model's processor rule) and "
                   "their KV cache.")
@click.option("--images", type=POSITIVE, default=1, show_default=True, help="How many such images (with --image).")
@click.option("--text-only", is_flag=True,
              help="Leave a multimodal model's towers out of the weights, as vLLM's --language-model-only does.")
@click.option("--encoder-cache-size", type=POSITIVE, metavar="EMBEDS",
              help="vLLM's encoder cache, in encoder embeddings (its --encoder-cache-size)  "
                   "[default: --max-num-batched-tokens, at least one largest image's]")
@click.option("--limit-mm-per-prompt", "mm_limit", type=click.IntRange(min=0), metavar="IMAGES",
              help="vLLM's images a prompt may hold; 0 profiles no encoder  [default: 999]")
@click.option("--encoder-activation-memory", type=TEXT, metavar="SIZE",
              help="vLLM: what the encoder's profiling forward adds above the decoder's  [default: estimated]")
@click.option("--mm-encoder-tp-mode", "encoder_mode", type=click.Choice(["weights", "data"]), default="weights",
              show_default=True, help="vLLM's: split the vision encoder's layers across --tp GPUs, or keep it whole on each.")
@json_option
def memory(model: str | None, more: tuple[str, ...], overrides: tuple[str, ...], checkpoint: str | None, seq: int | None, batch: int | None,
           dtype: str | None, kv_dtype: str, mla_expanded: bool, quant: str | None, group_size: int | None, budget: str | None,
           tp: int | None, pp: int | None, ep: int | None, cpu_experts: str | None, engine: str | None,
           kv_memory: str | None, block_size: int | None, n_parallel: int, ubatch: int, kv_unified: bool, swa_full: bool,
           cache_type_k: str | None, cache_type_v: str | None, max_batched: int | None, max_seqs: int | None,
           fraction: Any, activation_memory: str | None, non_torch_memory: str | None, cuda_graph_memory: str | None,
           show_all: bool, image: str | None, images: int, text_only: bool, encoder_cache_size: int | None,
           mm_limit: int | None, encoder_activation_memory: str | None, encoder_mode: str, as_json: bool) -> None:
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
    from calc import api
    from calc.render import base as render, memory as render_memory

    one_model(model, more)
    spec, stored = _model_and_checkpoint(model, overrides, checkpoint)
    answer = api.memory(spec, seq, batch, dtype, quant, kv_dtype, group_size, tp, pp, ep, budget, engine, cpu_experts,
                        kv_memory, block_size, max_batched, mla_expanded, stored, max_seqs=max_seqs,
                        fraction=float(fraction) if fraction is not None else None,
                        activation_memory=activation_memory, non_torch_memory=non_torch_memory,
                        cuda_graph_memory=cuda_graph_memory, n_parallel=n_parallel, ubatch=ubatch,
                        kv_unified=kv_unified, swa_full=swa_full, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                        image=image, images=images, text_only=text_only, encoder_replicated=encoder_mode == "data",
                        encoder_cache_size=encoder_cache_size, mm_limit=mm_limit,
                        encoder_activation_memory=encoder_activation_memory)
    if as_json:
        render.print_json(answer.to_dict())
        return
    result, solved, target, server = answer.inference, answer.budget, answer.target, answer.server
    out = render.console()
    for line in render_memory.headline(result, solved, target):
        out.print(line)
    from calc.render.markup import styled

    for line in server:
        out.print(f"{engine} will print: " + styled("bold", line))
    if answer.llamacpp and (allocated := sum(c["cache"]["bytes"] for c in answer.llamacpp)) != result.kv.total_bytes:
        from calc.units import human_bytes

        out.print(f"  llama.cpp allocates {allocated:,} B ({human_bytes(allocated)}) for these caches; the KV cache "
                  f"below is what {result.kv.seq:,} tokens x {result.kv.batch} hold (its cells and slots differ)")
    if answer.startup is not None:
        out.print(render_memory.startup_table(answer.startup))
    gpus = render_memory.shown_gpus(target, show_all)
    for table in (render_memory.weights_table(result), render_memory.inference_table(result),
                  render_memory.gpu_table(result, gpus)):
        out.print(table)
    notes = [render_memory.gpus_note(len(gpus)), render_memory.seq_note(seq), render_memory.context_note(spec, seq),
             *render_memory.inference_notes(result), *render_memory.tower_notes(spec, answer.pictures, text_only),
             *(render_memory.budget_lines(solved, target.label) if solved and target else []),
             (f"{engine}'s own budget (pool, blocks, tokens): give the GPU with --budget (H100, 2xH200), "
              "or its log's figure with --kv-memory") if engine in ("vllm", "sglang") and not answer.pool else None]
    for line in filter(None, notes):
        out.print("  " + line)


def _model_and_checkpoint(model: str | None, overrides: tuple[str, ...], checkpoint: str | None) -> tuple[Any, Any]:
    """MODEL's spec, or the checkpoint's own (its config.json, else its tensor shapes), and the
    checkpoint's stored bytes by component when --checkpoint is given. A GGUF given as MODEL is
    both: its weights are what the file stores (its quant mix), not a dtype's."""
    if checkpoint is None and model is not None and model.endswith(".gguf") and not overrides:
        model, checkpoint = None, model
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
