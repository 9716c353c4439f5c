"""The Python API: what each command computes, as a result whose `to_dict()` is the command's `--json`.

    >>> import calc
    >>> spec = calc.load("llama-3-8b")
    >>> calc.count(spec).total
    8030261248

Each function takes a loaded spec (`load`) and the command's options as keyword arguments with the
command's defaults, and returns a `Result`: the analysis object itself (its attributes read through,
`calc.count(spec).total`) and `to_dict()`, built by the same function the command prints with `--json`,
so a script and the CLI never disagree. docs/python.md shows every function; its examples run as tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from calc.analysis.memory.pool_settings import PoolSettings
    from calc.analysis.memory.sglang_dp import DpAttention
    from calc.spec.model import ModelSpec

__all__ = ["Result", "compare", "count", "flops", "kvcache", "load", "memory", "train"]


@dataclass(frozen=True)
class Result:
    """A command's answer: `value`, the analysis's own object (its attributes are read through this
    result), and `to_dict()`, exactly what the command prints with --json."""

    value: Any
    _json: Callable[[], Any]

    def to_dict(self) -> Any:
        return self._json()

    def __getattr__(self, name: str) -> Any:
        return _read_through(self.value, name)


def _read_through(target: Any, name: str) -> Any:
    """An answer's public attributes are its analysis object's (`calc.count(spec).total`); private and
    dunder names are not, so copying and pickling see the dataclass itself."""
    if name.startswith("_"):
        raise AttributeError(name)
    return getattr(target, name)


def load(name_or_path: str, **overrides: Any) -> ModelSpec:
    """A preset name, a YAML spec, a config.json or its directory, or a Hub id; `overrides` are
    `--set` pairs (`load("llama-3-8b", n_layers=2)`)."""
    from calc.spec.load import load_spec

    return load_spec(name_or_path, overrides or None)


def count(spec: ModelSpec) -> Result:
    """`gptcalc count MODEL`: the exact parameter breakdown."""
    from calc.analysis.count import count as count_params

    breakdown = count_params(spec)
    return Result(breakdown, lambda: count_json(spec, breakdown))


def count_json(spec: ModelSpec, breakdown: Any) -> dict[str, Any]:
    from calc.analysis.active import active_counts

    active = [c.to_json() for c in active_counts(breakdown, spec.model_type)]
    return {**breakdown.to_json(), **({"active_conventions": active} if active else {}),
            "spec": spec.model_dump(mode="json")}


def kvcache(*specs: ModelSpec, seq: int | None = None, batch: int | None = None, kv_dtype: str = "fp16",
            tp: int | None = None, pp: int | None = None, ep: int | None = None, dtype: str | None = None,
            quant: str | None = None, budget: str | None = None, engine: str | None = None,
            mla_expanded: bool = False) -> Result:
    """`gptcalc kvcache MODEL...`: the cache of each model at `seq` (default: its context) on one GPU
    of the layout, `kv_dtype` per element. The sizing options are memory's: with `pp` the busiest
    stage's layers, with `engine` the server's rules and lines, with `budget` whether weights (as
    stored, or `dtype`/`quant`) and cache fit and the longest context that does. The value is the
    list of caches, or the one cache of one model. `batch` defaults to 1, or with `budget` and `seq`
    is what the budget solves for."""
    from calc.errors import GptcalcError

    served = engine is not None or budget is not None or (pp or 1) > 1 or (ep or 1) > 1
    if not budget and (dtype is not None or quant is not None):
        option = "--dtype" if dtype is not None else "--quant"
        raise GptcalcError(f"{option}: the weights' storage, which kvcache uses only with --budget "
                           "(the cache's own type is --kv-dtype)")
    caches = [_served_cache(spec, seq, batch, kv_dtype, tp, pp, ep, dtype, quant, budget, engine, mla_expanded)
              if served else CacheAnswer(_plain_cache(spec, seq, batch or 1, kv_dtype, tp or 1, mla_expanded))
              for spec in specs]
    return Result(caches[0] if len(caches) == 1 else caches, lambda: [c.to_json() for c in caches])


def _plain_cache(spec: ModelSpec, seq: int | None, batch: int, kv_dtype: str, tp: int, mla_expanded: bool) -> Any:
    """The cache alone: the model's layers on one of `tp` GPUs."""
    from calc.analysis.memory import kv_cache
    from calc.analysis.memory.parallel import check_tp

    check_tp(spec, tp)
    return kv_cache(spec, seq or spec.n_positions, batch, kv_dtype, tp, mla_expanded)


def _served_cache(spec: ModelSpec, seq: int | None, batch: int | None, kv_dtype: str, tp: int | None, pp: int | None,
                  ep: int | None, dtype: str | None, quant: str | None, budget: str | None, engine: str | None,
                  mla_expanded: bool) -> CacheAnswer:
    """The cache as `memory` sizes it for a layout, server and budget: one computation, two commands."""
    answer = memory(spec, seq, batch, dtype, quant, kv_dtype, None, tp, pp, ep, budget, engine,
                    mla_expanded=mla_expanded).value
    return CacheAnswer(answer.inference.kv, answer)


@dataclass(frozen=True)
class CacheAnswer:
    """What `kvcache` computes for one model: its cache on one GPU (the busiest pipeline stage's
    layers), and, where a layout, server or budget was asked for, memory's answer around it."""

    cache: Any  # KVCache
    served: Any = None  # the MemoryAnswer, with --pp/--ep/--engine/--budget

    def __getattr__(self, name: str) -> Any:
        return _read_through(self.cache, name)

    def to_json(self) -> dict[str, Any]:
        served = self.served
        if served is None:
            return self.cache.to_json()
        whole = served.to_json()
        extra = {key: whole[key] for key in ("engine", "server_says", "budget", "llamacpp_caches") if key in whole}
        return {**self.cache.to_json(), "layout": whole["layout"], "weights_bytes": served.weights.total_bytes, **extra}


@dataclass(frozen=True)
class MemoryAnswer:
    """What `memory` computes: the inference figures, the server's pool and lines, the budget's answer."""

    spec: ModelSpec
    inference: Any
    pool: Any = None
    server: tuple[str, ...] = ()
    budget: Any = None  # the solved Budget
    target: Any = None  # the BudgetSpec it was solved for
    engine: str | None = None
    startup: Any = None  # the engine's start-up budget, term by term (vLLM, SGLang with a GPU budget)
    llamacpp: list[dict[str, Any]] | None = None  # llama.cpp's caches and the lines it prints about each
    pictures: Any = None  # what --image's images cost the decoder
    buffers: list[Any] | None = None  # with -ngl: llama.cpp's model, KV and RS buffers per device
    compute: Any = None  # a CPU-only llama.cpp build's compute buffer, estimated
    engine_note: str | None = None  # whose lines the server lines are, where the engine has more than one manager
    # placed (-ngl, --cpu-only), a config's GGUF mix whose tensor table gptcalc cannot name (gguf_table.mix_table
    # None): the CLI says why it has no model buffer lines without working the table out again
    unnamed_mix: bool = False

    def __getattr__(self, name: str) -> Any:
        return _read_through(self.inference, name)

    def to_json(self) -> dict[str, Any]:
        budget = self.budget
        return {**self.inference.to_json(), "model": self.spec.name,
                **({"engine": self.pool.to_json()} if self.pool else {}),
                **({"engine_budget": self.startup.to_json()} if self.startup else {}),
                **({"llamacpp_caches": [c["cache"] for c in self.llamacpp]} if self.llamacpp else {}),
                **({"llamacpp_buffers": [b.to_json() for b in self.buffers]} if self.buffers is not None else {}),
                **({"llamacpp_compute": self.compute.to_json()} if self.compute else {}),
                **({"server_says": list(self.server)} if self.server else {}),
                **({"engine_note": self.engine_note} if self.engine_note else {}),
                **({"images": self.pictures.to_json()} if self.pictures else {}),
                **({"budget": {**budget.to_json(), "label": self.target.label, "gpus": self.target.count}}
                   if budget and self.target else {})}


def memory(spec: ModelSpec, seq: int | None = None, batch: int | None = None, dtype: str | None = None,
           quant: str | None = None, kv_dtype: str = "fp16", group_size: int | None = None, tp: int | None = None,
           pp: int | None = None, ep: int | None = None, budget: str | None = None, engine: str | None = None,
           cpu_experts: str | None = None, kv_memory: str | None = None, block_size: int | None = None,
           max_batched: int | None = None, mla_expanded: bool = False, stored: Any = None, *,
           max_seqs: int | None = None, fraction: float | None = None, activation_memory: str | None = None,
           non_torch_memory: str | None = None, cuda_graph_memory: str | None = None, n_parallel: int = 1,
           ubatch: int = 512, kv_unified: bool = False, swa_full: bool = False, cache_type_k: str | None = None,
           cache_type_v: str | None = None, image: str | None = None, images: int = 1, text_only: bool = False,
           encoder_replicated: bool = False, n_gpu_layers: int | None = None, tensor_split: str | None = None,
           kv_offload: bool = True, override_tensor: str | None = None, encoder_cache_size: int | None = None,
           mm_limit: int | None = None, encoder_activation_memory: str | None = None,
           flash_attn: bool = True, mmap: bool = True, cpu_only: bool = False, split_mode: str = "layer",
           cpu_isa: str | None = None, pool_settings: PoolSettings | None = None, hisparse_host_pool: str | None = None,
           hisparse_device_buffer: int | None = None, dp_attention: DpAttention | None = None,
           no_mtp: bool = False) -> Result:
    """`gptcalc memory MODEL`: weights + KV cache per GPU, what the server will print, and the
    longest context (or with `seq` the largest batch) that fits `budget`. With a vLLM or SGLang
    `engine` and a GPU `budget`, the engine's own reserves (utilisation `fraction`, activation peak,
    non-torch and CUDA-graph memory, each a size like "2GiB"; None: the engine's default) set the
    KV pool, unless `kv_memory` gives the pool the server's log printed. With `engine="llamacpp"`,
    llama.cpp's caches as it allocates them for `n_parallel` sequences, `ubatch`, a unified cache,
    a full-size sliding-window cache and its K and V cache types (llama.cpp's -np, -ub, -kvu,
    --swa-full, -ctk, -ctv); with `n_gpu_layers` (-ngl; `tensor_split` "3,1", `override_tensor` as -ot
    "exps=CPU", `cpu_experts` as --n-cpu-moe, `kv_offload=False` as -nkvo; or `cpu_only`, a build without
    GPUs, `cpu_isa` "avx2" / "avx512" the x86-64 instruction set it repacks weights for; `split_mode` as
    -sm) the buffers it allocates per device, the model's when `stored` is a GGUF file's, read without mmap
    when `mmap` is False (calc/analysis/memory/llamacpp_devices.py), and for a CPU-only build an estimate of
    its compute buffer, with flash attention or without (calc/analysis/memory/llamacpp_compute.py).
    A multimodal model's towers are in the weights (their encoder layers split across `tp` GPUs, or
    whole on each with `encoder_replicated`) unless `text_only`; `image`
    ("WxH") prices `images` such images in tokens and KV bytes. Under vLLM with a --budget, its
    encoder cache (`encoder_cache_size` embeddings, `mm_limit` images a prompt) and the encoder's
    profiling forward (`encoder_activation_memory` from a log) are terms of the engine's budget.
    `pool_settings` (calc.PoolSettings): the server flags that shape vLLM's and SGLang's pool beyond its
    memory, as the CLI takes them: vLLM's async scheduling (False: one batch in flight instead of two), its
    indexer_kv_dtype ("auto": the model's) and prefix caching (False: one page a request for a state group),
    SGLang's speculative_num_steps (an EAGLE / MTP draft beside the pool: its share of it, an MTP draft's weights
    out of it, DeepSeek-V4's rings), speculative_draft_layers (None: the model's MTP layers) and mamba_ssm_dtype
    (None: the model's default there); None: every default.
    `hisparse_host_pool` (a size) turns on vLLM's HiSparse for a DSA model, its latents in a host pool of that size,
    with a hot buffer of `hisparse_device_buffer` rows (None: two top-k's). `dp_attention`
    (calc.analysis.memory.sglang_dp.DpAttention): SGLang's DP attention, its weights per GPU and its reserve.
    `no_mtp`: the GGUF a config's GGUF mix makes was converted with --no-mtp, without the MTP layers the converter
    writes by default (GLM-4.5's)."""
    from calc.analysis.count import count as count_params
    from calc.analysis.memory import (budget_for, find_scheme, inference, layout_for, parse_budget, parse_cpu_experts,
                                      weight_choice)
    from calc.analysis.memory.parallel import whole_cache
    from calc.analysis.memory.pool_settings import PoolSettings
    from calc.analysis.memory.refusals import refuse_unserved
    from calc.errors import GptcalcError

    refuse_unserved(spec, engine)
    settings = pool_settings or PoolSettings()
    target = parse_budget(budget) if budget is not None else None  # `budget=''` is an error, not no budget
    layout = layout_for(target, tp, pp, ep)
    if (kv_memory or block_size) and not engine:
        raise GptcalcError("--kv-memory and --block-size describe a server's pool: give --engine too")
    tokens = _engine_context(engine, seq or spec.n_positions) if engine else seq or spec.n_positions
    fmt, scheme = weight_choice(spec, dtype, quant) if stored is None else \
        (dtype or "fp16", find_scheme(quant) if quant is not None else None)  # the checkpoint refuses either
    if no_mtp:
        if stored is not None or scheme is None or not scheme.gguf:
            raise GptcalcError("--no-mtp: the GGUF a config's --quant mix makes was converted without its MTP layers; "
                               "give a config with a GGUF mix (a .gguf or checkpoint says what it holds)")
        from calc.analysis.memory.gguf import no_mtp as without_mtp

        spec = without_mtp(spec)
    ranked = engine == "trtllm" and layout.pp > 1  # TensorRT-LLM's own layer split, each rank its own budget
    if ranked:
        from calc.analysis.memory.trtllm_v2_pp import pipeline_ranks, rank_layers, trtllm_pp_parts
    result = inference(spec, count_params(spec), tokens, batch or 1, fmt, kv_dtype, group_size, mla_expanded, layout,
                       scheme, stored, parse_cpu_experts(cpu_experts, spec) if cpu_experts is not None else 0,
                       text_only, encoder_replicated,
                       parts=trtllm_pp_parts(spec.n_layers, layout.pp) if ranked else None)
    if dp_attention is not None:
        result = _dp_attention(spec, result, layout, engine, dp_attention, text_only, settings)
    pictures = _image_cost(spec, image, images, kv_dtype, text_only)
    sizes = (_size(activation_memory, "--activation-memory"), _size(non_torch_memory, "--non-torch-memory"),
             _size(cuda_graph_memory, "--cuda-graph-memory"))
    encoder_activation = _size(encoder_activation_memory, "--encoder-activation-memory")
    if (encoder_cache_size, mm_limit, encoder_activation) != (None, None, None) and not (
            engine == "vllm" and target and kv_memory is None):  # only vLLM's start-up budget reads them
        raise GptcalcError("--encoder-cache-size, --limit-mm-per-prompt and --encoder-activation-memory set vLLM's "
                           "start-up budget: give --engine vllm with --budget (not --kv-memory)")
    startup = gpu = budget_of = None
    if engine and target:
        from calc.analysis.memory.parallel import pp_partitions, stage_layers
        from calc.analysis.memory.startup import STARTUP_ENGINES, Reserves, budget_gpu, engine_extra_weights, \
            startup_budget

        gpu = budget_gpu(target)
        extra = engine_extra_weights(engine, spec, result.weights, gpu, layout.tp, layout.ep, towers=not text_only,
                                     attention_tp=dp_attention.attention_tp(layout.tp) if dp_attention else None,
                                     layers=stage_layers(pp_partitions(spec.n_layers, layout.pp), result.busiest_stage))
        encoder_tp = None if text_only or not spec.towers else 1 if encoder_replicated else layout.tp
        if engine in STARTUP_ENGINES and kv_memory is None:
            reserves = Reserves(fraction, *sizes, max_batched, max_seqs, encoder_cache_size, mm_limit,
                                encoder_activation)
            budget_of = partial(startup_budget, engine, spec, gpu, tp=layout.tp, pp=layout.pp, reserves=reserves,
                                extra=extra, max_model_len=tokens, encoder_tp=encoder_tp,
                                draft=settings.draft(engine, spec, result.weights, layout),
                                dp=dp_attention.size if dp_attention is not None else None)
            busiest = rank_layers(spec.n_layers, layout.pp, result.busiest_stage) if ranked else None
            startup = budget_of(result.weights.total_bytes, layers=busiest)
    if startup is not None:
        startup.check()
        if engine == "trtllm":
            from calc.analysis.memory.trtllm_workspace import refuse_mla_workspace

            refuse_mla_workspace(result.kv)
        target = replace(target, bytes_per_gpu=startup.kv_memory + result.weights.total_bytes,
                         label=f"{target.label} under {engine}'s reserves")
    pool = whole = None
    if engine and (kv_memory is not None or startup is not None):
        pool_bytes = _size(kv_memory, "--kv-memory") if kv_memory is not None else startup.kv_memory  # type: ignore[union-attr]
        whole = whole_cache(spec, engine, layout, tokens, batch or 1, kv_dtype or "fp16", mla_expanded)
        stages = _sglang_stages(spec, whole, layout, result.weights, pool_bytes,
                                kv_memory is not None) if engine == "sglang" and whole else ()
        ranks = pipeline_ranks(spec, result.gpus, whole, pool_bytes, budget_of) if ranked else None
        pool = settings.pool(spec, result.kv, engine, pool_bytes, seq or spec.n_positions, block_size,
                             max_batched or (_vllm_batch_default(startup.total) if startup else 2048), layout,
                             gpu.capability if gpu else None, stages,
                             _hisparse(spec, hisparse_host_pool, hisparse_device_buffer), ranks)
        startup = pool.rank_budget or startup  # under --pp, the budget of the rank whose pool the figures are
    else:
        settings.refuse_without_pool()
        if hisparse_host_pool is not None or hisparse_device_buffer is not None:
            raise GptcalcError("--hisparse-host-pool sets vLLM's pools: give --engine vllm with --budget or "
                               "--kv-memory")
    placing = (n_gpu_layers, tensor_split, override_tensor)
    if (any(p is not None for p in placing) or not (kv_offload and flash_attn and mmap) or cpu_only
            or split_mode != "layer") and engine != "llamacpp":
        raise GptcalcError("--n-gpu-layers, --tensor-split, --override-tensor, --no-kv-offload, --flash-attn, "
                           "--no-mmap, --cpu-only and --split-mode are llama.cpp's: give --engine llamacpp")
    placement = _placement(spec, *placing, cpu_experts, kv_offload, mmap, cpu_only, split_mode, cpu_isa)
    gguf_file = _gguf_headers(stored) if placement else None
    if placement:
        placement = replace(placement, nextn=_nextn(spec, gguf_file, scheme if stored is None else None),
                            nextn_created=spec.llamacpp.mtp_created)
    ctx = _llamacpp_context(spec, seq, kv_dtype, n_parallel, ubatch, kv_unified, swa_full, cache_type_k, cache_type_v,
                            flash_attn) if engine == "llamacpp" else None
    caches = _llamacpp(spec, ctx, placement) if ctx else None
    compute = _compute(spec, ctx, placement) if ctx else None
    model = _model_buffers(spec, gguf_file, placement, scheme if stored is None else None) if placement else None
    output = _output_buffer(spec, n_parallel, placement) if placement and ctx else None
    kv_size = pool.bytes_per_token if pool else result.kv.bytes_per_token  # TensorRT-LLM's "kv size per token is" figure
    server = (*(startup.lines(kv_size) if startup and not (pool and pool.per_rank) else ()),  # or each rank's
              *(model["lines"] if model else ()),
              *([output.line()] if output else ()),
              *([line for c in caches for line in c["lines"]] if caches else
                _engine_lines(pool, result.kv, engine) if engine else ()), *([compute.line()] if compute else ()))
    solved = budget_for(spec, target, result, seq, batch, None if caches else pool) if target else None
    placed = [*(model["buffers"] if model else ()), *([output] if output else ()),
              *(b for c in caches or () for b in c["buffers"])] if placement else None
    note = _manager_note(spec, result.kv if whole is None else whole, layout, settings) \
        if engine == "trtllm" and pool is not None else \
        dp_attention.note(layout.tp) if dp_attention is not None else None
    answer = MemoryAnswer(spec, result, pool, server, solved, target, engine, startup, caches, pictures, placed,
                          compute, note, model is not None and model["unnamed"])
    return Result(answer, answer.to_json)


def _engine_context(engine: str, tokens: int) -> int:
    """The context `engine` serves for `tokens` (engines.padded_context)."""
    from calc.analysis.memory.engines import ENGINES, padded_context

    return padded_context(ENGINES[engine], tokens)


def _engine_lines(pool: Any, kv: Any, engine: str) -> Any:
    """What `engine` prints about its pool (engines.engine_lines)."""
    from calc.analysis.memory.engines import engine_lines

    return engine_lines(pool, kv, engine)


def _dp_attention(spec: Any, result: Any, layout: Any, engine: str | None, dp: Any, text_only: bool,
                  settings: PoolSettings) -> Any:
    """`result` with one GPU's weights as SGLang lays them out under DP attention (sglang_dp)."""
    from calc.analysis.count import count as count_params

    dp.refuse(spec, engine, bool(spec.towers) and not text_only, bool(settings.speculative_num_steps))
    return dp.held(spec, count_params(spec), result, layout)


def _sglang_stages(spec: Any, whole: Any, layout: Any, weights: Any, pool_bytes: int, given: bool) -> Any:
    """SGLang's pipeline stages, each pricing its own layers (sglang_dsv4.sglang_stages)."""
    from calc.analysis.count import count as count_params
    from calc.analysis.memory.sglang_dsv4 import sglang_stages

    return sglang_stages(spec, count_params(spec), weights, whole, layout, pool_bytes, given)


def _vllm_batch_default(total: int) -> int:
    """vLLM's default --max-num-batched-tokens on a card of `total` bytes (startup.vllm_batch_defaults)."""
    from calc.analysis.memory.startup import vllm_batch_defaults

    return vllm_batch_defaults(total)[0]


def _output_buffer(spec: Any, n_parallel: int, placement: Any) -> Any:
    """llama.cpp's output buffer line (llamacpp_devices.output_buffer)."""
    from calc.analysis.memory.llamacpp_devices import output_buffer

    return output_buffer(spec.vocab_size, n_parallel, spec.n_layers, placement)


def _manager_note(spec: Any, kv: Any, layout: Any, settings: PoolSettings) -> str:
    """Whose KV cache manager TensorRT-LLM's lines are (trtllm_manager.manager_note)."""
    from calc.analysis.memory.trtllm_manager import manager_note

    return manager_note(spec, kv, layout.pp, settings.kv_cache_manager_v2, settings.overlap_scheduler)


def _placement(spec: Any, n_gpu_layers: int | None, tensor_split: str | None, override_tensor: str | None,
               cpu_experts: str | None, kv_offload: bool, mmap: bool = True, cpu_only: bool = False,
               split_mode: str = "layer", cpu_isa: str | None = None) -> Any:
    """llama.cpp's -ngl / -ts / -ot / --n-cpu-moe / -nkvo / --no-mmap / -sm, a CPU-only build's, or None when
    neither -ngl nor --cpu-only is given. -sm none keeps the main GPU alone (src/llama.cpp:288-300); -sm row
    needs a backend's split buffer type, which CUDA no longer registers (ggml-cuda.cu:5888-5909), so
    llama.cpp refuses it there (src/llama-model.cpp:1146-1166)."""
    from calc.analysis.memory import parse_cpu_experts
    from calc.errors import GptcalcError

    if not cpu_only:  # a GPU build's refusals, and none of its placing options given: no placement
        if cpu_isa:
            raise GptcalcError("--cpu-isa is a CPU-only build's (the weights it repacks): give --cpu-only")
        if split_mode == "row":
            raise GptcalcError("--split-mode row: this llama.cpp's CUDA backend has no split buffer type; it stops "
                               "with 'device CUDA0 does not support split buffers' (use layer, the default, or none)")
        if n_gpu_layers is None:
            if tensor_split is not None or override_tensor is not None or not kv_offload or not mmap:
                raise GptcalcError("--tensor-split, --override-tensor, --no-kv-offload and --no-mmap place tensors: "
                                   "give --n-gpu-layers too (llama.cpp's -ngl), or --cpu-only")
            return None  # no llama.cpp placement asked for (and its module not loaded: start-up time)
    from calc.analysis.memory.llamacpp_devices import (X86_REPACKED, Placement, cpu_moe_overrides, parse_overrides,
                                                       parse_tensor_split)

    if cpu_only:
        if n_gpu_layers is not None or tensor_split is not None or override_tensor is not None or not kv_offload:
            raise GptcalcError("--cpu-only is a llama.cpp build without GPUs: leave out --n-gpu-layers, "
                               "--tensor-split, --override-tensor and --no-kv-offload")
        return Placement(0, (), mmap=mmap, repack=X86_REPACKED[cpu_isa] if cpu_isa else None)
    split = parse_tensor_split(tensor_split) if tensor_split is not None and split_mode == "layer" else (1.0,)
    moe = parse_cpu_experts(cpu_experts, spec) if cpu_experts is not None else 0
    overrides = parse_overrides(override_tensor, len(split)) if override_tensor is not None else ()
    return Placement(n_gpu_layers, split, overrides + cpu_moe_overrides(moe), kv_offload, mmap)


def _gguf_headers(stored: Any) -> Any:
    """The headers of a GGUF input (its tensor table read again, header only: the stored weights keep no table),
    or None for any other model."""
    from pathlib import Path

    if stored is None or not str(stored.source).endswith(".gguf") or not Path(stored.source).is_file():
        return None
    from calc.checkpoint.gguf_source import read_split

    return read_split(Path(stored.source))


def _nextn(spec: Any, gguf_file: Any, scheme: Any) -> int:
    """The MTP layers after the layers of the GGUF llama.cpp loads, which it deals devices over: a .gguf's
    `nextn_predict_layers`, or those the converter writes of a config given with a GGUF mix (gguf.written_mtp)."""
    if gguf_file:
        from calc.checkpoint.gguf_source import nextn_layers

        return nextn_layers(gguf_file[0])
    from calc.analysis.memory.gguf import written_mtp

    return written_mtp(spec, scheme.name) if scheme is not None and scheme.gguf else 0


def _model_buffers(spec: Any, gguf_file: Any, placement: Any, scheme: Any = None) -> dict[str, Any]:
    """The model buffer lines of a GGUF input's headers under `placement`, or of the file llama-quantize would make
    of a config with a GGUF mix (`--quant q4_k_m`: its table worked out), and the offloaded-layers line; any other
    model has no tensor table to place. "unnamed": a mix whose table gptcalc cannot name (no lines, and the CLI
    says why)."""
    from calc.analysis.memory.gguf_table import freq_factor_layers
    from calc.analysis.memory.llamacpp_devices import model_buffers

    placement = replace(placement, rope_freqs_layers=freq_factor_layers(spec))
    lines = placement.offloaded_line(spec.n_layers)
    headers = gguf_file
    mixed = headers is None and scheme is not None and scheme.gguf
    if mixed:
        from calc.analysis.count import count as count_params
        from calc.analysis.memory.gguf_table import mix_table

        headers = mix_table(spec, count_params(spec), scheme.name)
    buffers = model_buffers(headers, spec.n_layers, placement) if headers else []
    return {"buffers": buffers, "lines": lines + [b.line() for b in buffers], "unnamed": mixed and headers is None}


def _llamacpp_context(spec: Any, seq: int | None, kv_dtype: str, n_parallel: int, ubatch: int, unified: bool,
                      swa_full: bool, type_k: str | None, type_v: str | None, flash_attn: bool) -> Any:
    """llama.cpp's context options, -c SEQ (the model's context when not given)."""
    from calc.analysis.memory import LlamaCppContext
    from calc.analysis.memory.llamacpp import CACHE_TYPES, GGML_NAMES
    from calc.errors import GptcalcError

    default = GGML_NAMES.get(kv_dtype)
    if default is None and not (type_k and type_v):
        raise GptcalcError(f"--kv-dtype {kv_dtype}: not a llama.cpp cache type (give --cache-type-k/-v: "
                           f"{', '.join(CACHE_TYPES)})")
    return LlamaCppContext(seq or spec.n_positions, n_parallel, ubatch, unified, swa_full, type_k or default,
                           type_v or default, flash_attn)


def _compute(spec: Any, ctx: Any, placement: Any) -> Any:
    """A CPU-only build's compute buffer estimate; a GPU build's buffers are split by device (not modelled)."""
    from calc.analysis.memory.llamacpp import llamacpp_compute

    return llamacpp_compute(spec, ctx) if placement is not None and not placement.tensor_split else None


def _llamacpp(spec: Any, ctx: Any, placement: Any = None) -> list[dict[str, Any]]:
    """llama.cpp's caches under `ctx` and the lines it prints about each (with `placement`, their buffers
    per device too)."""
    from calc.analysis.memory import llamacpp_caches, llamacpp_lines
    from calc.analysis.memory.llamacpp import cache_buffers

    caches = llamacpp_caches(spec, ctx)
    placed = cache_buffers(spec, ctx, placement) if placement else [[] for _ in caches]
    return [{"cache": cache.to_json(), "buffers": buffers, "lines": llamacpp_lines([cache], [buffers])}
            for cache, buffers in zip(caches, placed)]


def _image_cost(spec: Any, image: str | None, images: int, kv_dtype: str, text_only: bool) -> Any:
    """--image WxH --images N: what those images cost the decoder, or None without --image."""
    from calc.analysis.memory.towers import image_cost
    from calc.towers.images import parse_image
    from calc.errors import GptcalcError

    if image is None:
        return None
    if text_only:
        raise GptcalcError("--image and --text-only: a text-only server takes no images; drop one")
    return image_cost(spec, *parse_image(image), images, kv_dtype)


def _hisparse(spec: Any, host_pool: str | None, device_buffer: int | None) -> Any:
    """vLLM's HiSparse as the options ask for it (calc.analysis.memory.vllm_hisparse); None: off."""
    from calc.analysis.memory.vllm_hisparse import HiSparseOptions, index_topk
    from calc.errors import GptcalcError

    if host_pool is None:
        if device_buffer is not None:
            raise GptcalcError("--hisparse-device-buffer sizes HiSparse's hot buffer: give --hisparse-host-pool too")
        return None
    return HiSparseOptions(_size(host_pool, "--hisparse-host-pool") or 0, device_buffer, index_topk(spec))


def _size(text: str | None, option: str) -> int | None:
    """A size option (8GiB, 0.5GiB, 3099590656) in bytes; None when not given."""
    from calc.errors import GptcalcError
    from calc.units import parse_bytes

    if text is None:
        return None
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise GptcalcError(f"{option}: {exc}") from None


def flops(spec: ModelSpec, seq: int, batch: int = 1, decode: bool = False, causal_half: bool = False,
          macs: bool = False, last_logit: bool = False, gpus: tuple[str, ...] = (), mfu: Fraction | float | str = "0.5",
          dtype: str = "bf16", kv_dtype: str = "bf16", image: str | None = None, images: int = 1) -> Result:
    """`gptcalc flops MODEL --seq T`: FLOPs per component, the rules of thumb, and time bounds; with
    `image="WxH"`, the vision tower's FLOPs for `images` such images too (`to_dict()["image"]`)."""
    from calc.analysis.flops import Conventions
    from calc.analysis.flops import flops as count_flops
    from calc.analysis.flops.bounds import bounds
    from calc.analysis.flops.checks import checks
    from calc.analysis.memory.gpus import RATED, rated_gpu
    from calc.cli.options import SHARE

    share = SHARE.convert(str(mfu), None, None)
    conventions = Conventions(macs, causal_half, last_logit)
    result = count_flops(spec, seq, batch, decode, conventions)
    rules = checks(spec, result)
    limits = [bounds(spec, result, rated_gpu(name), share, dtype, kv_dtype) for name in gpus or RATED]
    tower = image_flops(spec, image, images, conventions)
    return Result(result, lambda: flops_json(result, rules, limits, decode, tower))


def image_flops(spec: ModelSpec, image: str | None, images: int, conventions: Any) -> Any:
    """`--image WxH --images N`: the vision tower's FLOPs for the images, or None without an image."""
    from calc.analysis.flops import tower_flops
    from calc.towers.images import parse_image

    return None if image is None else tower_flops(spec, *parse_image(image), images, conventions)


def flops_json(result: Any, rules: list[Any], limits: list[Any], decode: bool, tower: Any = None) -> dict[str, Any]:
    return {**result.to_json(), "checks": [c.to_json(result.scale) for c in rules],
            "bounds": [b.to_json(decode) for b in limits], **({"image": tower.to_json()} if tower else {})}


def train(spec: ModelSpec, seq: int, micro_batch: int, **setup: Any) -> Result:
    """`gptcalc train MODEL --seq T --micro-batch b`: memory per GPU to train; `setup` holds the
    command's other options by name (gpus, zero, tp, sp, tp_impl, pp, cp, precision, loss, recompute, attention,
    optimizer, float8, lora_rank, lora_targets as a tuple of names, qlora, moe_form, dropout: Setup's fields),
    defaulting as the command does."""
    from dataclasses import fields

    from calc.analysis.train import Setup
    from calc.analysis.train import train as plan

    names = {field.name for field in fields(Setup)}
    unknown = sorted(set(setup) - names)
    if unknown:
        from calc.errors import GptcalcError

        raise GptcalcError(f"train: unknown option {unknown[0]!r} (one of {', '.join(sorted(names))})")
    result = plan(spec, Setup(seq=seq, micro_batch=micro_batch, **setup))
    return Result(result, result.to_json)


def compare(*specs: ModelSpec, seq: int | None = None, dtype: str | None = None, quant: str | None = None,
            kv_dtype: str = "fp16", tp: int | None = None, pp: int | None = None, ep: int | None = None,
            budget: str | None = None, engine: str | None = None) -> Result:
    """`gptcalc compare A B ...`: the models side by side, each as stored unless `dtype`/`quant` say."""
    from calc.analysis.compare import compare_models
    from calc.analysis.memory import layout_for, parse_budget
    from calc.analysis.memory.refusals import engine_seq

    target = parse_budget(budget) if budget is not None else None
    comparison = compare_models(list(specs), engine_seq(engine, seq, specs),
                                dtype, kv_dtype, quant, layout_for(target, tp, pp, ep), target)
    return Result(comparison, comparison.to_json)
