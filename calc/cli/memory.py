"""`kvcache` and `memory`: calc/analysis/memory/, drawn by calc/render/memory.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from calc.cli.options import (CONTEXT, POSITIVE, SHARE, TEXT, TOKENS, complete_model, dp_attention_options,
                              hisparse_options, image_options, json_option, load_model, max_batched_option, one_model,
                              pool_options, read_against_model, set_option, sizing_options)
from calc.errors import GptcalcError

if TYPE_CHECKING:
    from calc.analysis.memory.pool_settings import PoolSettings


SEQ_HELP = "Tokens per sequence: 4096, 32k or 128k (k = 1,024, so 128k = 131,072; the output says what it read)."
MLA_HELP = "MLA models: cache expanded per-head K and V (transformers' eager attention) instead of the latent."


@click.command(context_settings=CONTEXT)
@click.argument("models", type=TEXT, nargs=-1, metavar="[MODEL]...")
@click.option("--seq", type=TOKENS, help=SEQ_HELP + "  [default: each model's context, n_positions]")
@click.option("--batch", type=POSITIVE, help="Sequences held at once  [default: 1; with --budget and --seq, solved for]")
@sizing_options()
@click.option("--mla-expanded", is_flag=True, help=MLA_HELP)
@click.option("--gqa", is_flag=True, help="Show each model under MHA, its own attention and MQA, with the saving.")
@set_option
@json_option
def kvcache(models: tuple[str, ...], seq: int | None, batch: int | None, dtype: str | None, quant: str | None, kv_dtype: str,
            tp: int | None, pp: int | None, ep: int | None, budget: str | None, engine: str | None,
            mla_expanded: bool, gqa: bool, overrides: tuple[str, ...], as_json: bool) -> None:
    """KV cache bytes per token and in total, by layer kind; no MODEL: every preset.

    bytes = n_layers x (K + V elements per token) x tokens kept x batch x bytes per element, where
    K = V = n_kv_heads x head_dim, sliding-window layers keep at most their window, and MLA keeps
    one latent of kv_lora_rank + qk_rope_head_dim. The sizing options are memory's: the cache per
    GPU under --tp/--pp (the busiest stage), the server's lines with --engine, and with --budget
    whether the weights (--dtype/--quant, as stored by default) and the cache fit.

    \b
    Example:
      gptcalc kvcache llama-7b --seq 4096
      gptcalc kvcache llama-70b qwen2-72b --seq 32768 --kv-dtype bf16 --gqa
      gptcalc kvcache mistral-7b deepseek-v3 --seq 32k --kv-dtype q8_0
      gptcalc kvcache llama-3-70b --seq 32k --budget 2xH100-80GB --engine vllm
      gptcalc kvcache --seq 8192 --json
    """
    from calc import api
    from calc.render import base as render, memory as render_memory
    from calc.analysis.memory import kv_variants
    from calc.analysis.count import by_family
    from calc.spec.load import preset_names

    specs = [load_model(model, overrides) for model in models]
    if not models:  # every preset, in the order `presets` lists them
        specs = [spec for spec, _ in by_family(load_model(name, overrides) for name in preset_names())]
    skipped: list[str] = []
    if gqa:
        _gqa_alone(tp=tp, pp=pp, ep=ep, budget=budget, engine=engine, dtype=dtype, quant=quant)
        variants = []
        for spec in specs:
            try:
                variants.append(kv_variants(spec, seq or spec.n_positions, batch or 1, kv_dtype))
            except GptcalcError as exc:
                if models:  # a model the user named: say why it has no MHA/GQA/MQA variants
                    raise
                skipped.append(str(exc).removeprefix("--gqa: "))
        data, table = [_gqa_json(v) for v in variants], render_memory.gqa_table(variants)
    else:
        result = api.kvcache(*specs, seq=seq, batch=batch, kv_dtype=kv_dtype, tp=tp, pp=pp, ep=ep, dtype=dtype,
                             quant=quant, budget=budget, engine=engine, mla_expanded=mla_expanded)
        answers = result.value if isinstance(result.value, list) else [result.value]
        data, table = result.to_dict(), render_memory.kvcache_table(a.cache for a in answers)
    if as_json:
        render.print_json(data)
        return
    out = render.console()
    for answer in [] if gqa or not models else answers:  # the answer first; every preset is a table, not a list
        for line in render_memory.served_cache_lines(answer):
            out.print(line)
    out.print(table)
    notes = [render_memory.seq_note(seq), *(render_memory.context_note(spec, seq) for spec in specs),
             *(note for a in ([] if gqa else answers) for note in render_memory.kv_notes(a.cache))]
    for note in filter(None, notes):
        out.print("  " + note)
    for reason in skipped:
        out.print(f"  not shown: {reason}")


def _gqa_alone(**options: Any) -> None:
    """--gqa redraws one cache under three attentions; a layout, server or budget is memory's question."""
    given = [name for name, value in options.items() if value is not None and value != 1]
    if given:
        raise GptcalcError(f"--gqa with --{given[0].replace('_', '-')}: --gqa compares the cache of one GPU under MHA, "
                           "GQA and MQA; drop one")


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
@click.option("--block-size", type=POSITIVE, help="Tokens per KV block  [default: the engine's: vLLM its attention "
              "backend's on the --budget GPU (16; MLA 32 on SM10x, 64 with an fp8 cache on SM90), TRT-LLM 32]")
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
@click.option("--n-gpu-layers", "-ngl", "n_gpu_layers", type=click.IntRange(min=0), metavar="N",
              help="--engine llamacpp: llama.cpp's -ngl: the output layer and the last N-1 layers on the GPU(s); prints "
                   "the KV (and, for a .gguf MODEL, model) buffer of each device as llama.cpp does.")
@click.option("--tensor-split", "-ts", type=TEXT, metavar="N0,N1,...",
              help="--engine llamacpp with -ngl: llama.cpp's -ts, the share of the offloaded layers of each GPU "
                   "(CUDA0, CUDA1, ...)  [default: one GPU]")
@click.option("--override-tensor", "-ot", "override_tensor", type=TEXT, metavar="PATTERN=CPU|CUDAn,...",
              help="--engine llamacpp with -ngl: llama.cpp's -ot: tensors whose name the pattern finds go to that "
                   "buffer (the first pattern that matches wins; --n-cpu-moe's come after).")
@click.option("--no-kv-offload", "-nkvo", "no_kv_offload", is_flag=True,
              help="--engine llamacpp with -ngl: keep the KV cache in system RAM (llama.cpp's -nkvo).")
@click.option("--split-mode", "-sm", type=click.Choice(["layer", "row", "none"]), default="layer", show_default=True,
              help="--engine llamacpp with -ngl: llama.cpp's -sm: layers across the --tensor-split GPUs, or the main "
                   "GPU alone (none); row is refused by this llama.cpp's CUDA backend.")
@click.option("--no-mmap", is_flag=True,
              help="--engine llamacpp with -ngl or --cpu-only: read the weights into buffers instead of mapping the "
                   "file (llama.cpp's --load-mode none; --no-mmap in earlier builds): CUDA_Host / CPU model buffers.")
@click.option("--cpu-only", is_flag=True,
              help="--engine llamacpp: a llama.cpp build without GPUs (or -dev none): prints its CPU model, KV and "
                   "compute buffer lines (the compute buffer estimated from its worst-case graph).")
@click.option("--cpu-isa", type=click.Choice(["avx2", "avx512"]), default=None,
              help="--engine llamacpp with --cpu-only: the x86-64 instruction set it runs with, which decides the weights "
                   "of a .gguf MODEL it repacks (a CPU_REPACK buffer)  [default: unknown: no model buffer line for such "
                   "a file]")
@click.option("--no-mtp", is_flag=True,
              help="--quant with a GGUF mix: the file was converted with convert_hf_to_gguf.py --no-mtp, without the "
                   "multi-token-prediction layers it writes by default (GLM-4.5's), which change llama-quantize's types "
                   "and the layers llama.cpp deals to devices.")
@click.option("--flash-attn", "-fa", type=click.Choice(["on", "off", "auto"]), default="auto", show_default=True,
              help="--engine llamacpp: llama.cpp's -fa (auto is on where the device runs it): the compute graph's "
                   "attention, and an F16 or F32 mask.")
@max_batched_option
@pool_options
@dp_attention_options
@hisparse_options
@click.option("--max-num-seqs", "max_seqs", type=POSITIVE,
              help="vLLM: requests of the sampler's profiling run  [default: 256, 1024 on a 70 GiB+ GPU]")
@click.option("--gpu-memory-utilization", "--mem-fraction-static", "--free-gpu-memory-fraction", "fraction", type=SHARE,
              help="Share of the GPU the engine may use (TensorRT-LLM: of what its profiling run leaves free)  "
                   "[default: vLLM 0.9; SGLang's rule by GPU size; TensorRT-LLM 0.9]")
@click.option("--activation-memory", type=TEXT, metavar="SIZE",
              help="The engine's activation peak from your log  [default: estimated from the shapes]")
@click.option("--non-torch-memory", type=TEXT, metavar="SIZE",
              help="Memory outside torch (CUDA context, NCCL); SGLang: what is in use before it loads the weights "
                   "(total less its 'Load weight begin. avail mem')  "
                   "[default: 0.2 GiB, as published vLLM logs show; SGLang 0.41 GiB, 2.42 GiB on several GPUs]")
@click.option("--cuda-graph-memory", type=TEXT, metavar="SIZE",
              help="vLLM's CUDA graph estimate (0 with --enforce-eager)  [default: 0.5 GiB]")
@click.option("--all", "show_all", is_flag=True,
              help="Show every GPU of the catalog, not only the budget's card (or, without one, a short list).")
@image_options("the tokens it becomes (the model's processor rule) and their KV cache.")
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
           cache_type_k: str | None, cache_type_v: str | None, max_batched: int | None, pool_settings: PoolSettings, dp_attention: Any,
           hisparse_host_pool: str | None, hisparse_device_buffer: int | None, max_seqs: int | None,
           fraction: Any, activation_memory: str | None, non_torch_memory: str | None, cuda_graph_memory: str | None,
           show_all: bool, image: str | None, images: int, text_only: bool, encoder_cache_size: int | None,
           mm_limit: int | None, encoder_activation_memory: str | None, encoder_mode: str, n_gpu_layers: int | None,
           tensor_split: str | None, override_tensor: str | None, no_kv_offload: bool, no_mmap: bool, cpu_only: bool,
           split_mode: str, cpu_isa: str | None, no_mtp: bool, flash_attn: str, as_json: bool) -> None:
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
                        n_gpu_layers=n_gpu_layers, tensor_split=tensor_split, kv_offload=not no_kv_offload,
                        override_tensor=override_tensor, encoder_cache_size=encoder_cache_size, mm_limit=mm_limit,
                        encoder_activation_memory=encoder_activation_memory, pool_settings=pool_settings,
                        hisparse_host_pool=hisparse_host_pool, hisparse_device_buffer=hisparse_device_buffer,
                        flash_attn=flash_attn != "off", mmap=not no_mmap, cpu_only=cpu_only, split_mode=split_mode,
                        cpu_isa=cpu_isa, dp_attention=dp_attention, no_mtp=no_mtp)
    if as_json:
        render.print_json(answer.to_dict())
        return
    result, solved, target, server = answer.inference, answer.budget, answer.target, answer.server
    out = render.console()
    for line in [*render_memory.headline(result, solved, target), *render_memory.server_lines(engine, server)]:
        out.print(line)
    if answer.llamacpp and (allocated := sum(c["cache"]["bytes"] for c in answer.llamacpp)) != result.kv.total_bytes:
        from calc.units import human_bytes

        out.print(f"  llama.cpp allocates {allocated:,} B ({human_bytes(allocated)}) for these caches; the KV cache "
                  f"below is what {result.kv.seq:,} tokens x {result.kv.batch} hold (its cells and slots differ)")
    if answer.startup is not None:
        out.print(render_memory.startup_table(answer.startup, answer.pool.rank_label if answer.pool else ""))
    gpus = render_memory.shown_gpus(target, show_all)
    for table in (render_memory.weights_table(result), render_memory.inference_table(result),
                  render_memory.gpu_table(result, gpus)):
        out.print(table)
    notes = [render_memory.gpus_note(len(gpus)), render_memory.seq_note(seq), render_memory.context_note(spec, seq),
             *render_memory.inference_notes(result), *render_memory.tower_notes(spec, answer.pictures, text_only),
             *(render_memory.budget_lines(solved, target.label) if solved and target else []),
             answer.engine_note,
             "the tables size the whole model and cache; what each device holds is in llama.cpp's buffer "
             "lines above" if answer.buffers is not None else None,
             _compute_note(answer.compute) if answer.compute is not None else
             "llama.cpp's compute buffer is not estimated for this model: one of its layer kinds is not among those "
             "estimated (docs/memory.md)" if cpu_only else None,
             _model_buffer_note(answer, stored),
             (f"{engine}'s own budget (pool, blocks, tokens): give the GPU with --budget (H100, 2xH200), "
              "or its log's figure with --kv-memory") if engine in ("vllm", "sglang", "trtllm") and not answer.pool else None]
    for line in filter(None, notes):
        out.print("  " + line)


def _compute_note(compute: Any) -> str:
    """Whether llama.cpp's compute buffer line is estimated or its allocator replayed over the rebuilt graph."""
    if compute.peak == "replay":
        return ("llama.cpp's compute buffer line is its graph allocator's high-water mark, replayed by gptcalc over "
                "the worst-case graph it rebuilds node by node (one ubatch against the whole cache): docs/memory.md")
    return ("llama.cpp's compute buffer line is gptcalc's estimate of its worst-case graph's peak (one ubatch "
            "against the whole cache): docs/memory.md")


def _model_buffer_note(answer: Any, stored: Any) -> str | None:
    """Why llama.cpp's model buffer lines are missing, when they are."""
    if answer.buffers is None or any(b.kind == "model" for b in answer.buffers):
        return None
    if answer.unnamed_mix:
        return ("llama.cpp's model buffer lines need every tensor's llama.cpp name and type, which gptcalc does not "
                "know for all of this model's: give the .gguf file as MODEL")
    scheme = answer.inference.weights.scheme
    mix = stored is None and scheme is not None and scheme.gguf
    if mix or stored is not None and str(stored.source).endswith(".gguf"):  # a CPU-only build's repacked file
        return ("a CPU-only llama.cpp build repacks some of this file's weights for its matmuls (a CPU_REPACK buffer, "
                "which depends on the CPU's instruction set): give --cpu-isa avx2 or avx512 for its model buffer lines")
    return ("llama.cpp's model buffer lines need the tensors' types and offsets: give the .gguf file as MODEL, or a "
            "llama-quantize mix with --quant (q4_k_m, ...)")


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

    if overrides and model is None:
        raise GptcalcError("--set changes MODEL: name it too (with --checkpoint, MODEL defaults to its config.json)")
    report = read_against_model(checkpoint, model, overrides)
    return report.spec, stored_weights(report)
