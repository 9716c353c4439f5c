"""The cache a decoder keeps while it generates, one kind of layer at a time.

Each layer's mixer states its cache (`calc.parts.cache.CacheSpec`): rows that grow with every
token (attention's K and V, MLA's latent) and states of fixed size per sequence (Mamba2's and gated
DeltaNet's conv window and recurrent state, LFM2's conv window). This module only adds them up:

    row bytes          = format.row_bytes(width)            # ceil(width / block) blocks; fp16: width x 2
    bytes per token    = sum over kinds of n_layers x (row(K) + row(V)) // ratio
    rows kept          = min(seq, window) for a sliding-window layer in a rolling buffer,
                         seq // ratio for a compressed one (a row per `ratio` tokens), else seq
    state bytes        = sum over kinds of n_layers x state elements x state bytes/element
    total bytes        = sum over kinds of n_layers x (row(K) + row(V)) x rows kept x batch
                         + state bytes x batch

- full attention keeps every token; GQA and MQA shrink the rows by n_heads / n_kv_heads;
- sliding window (Mistral-7B-v0.1's 4,096, Gemma-2/3's local layers, gpt-oss's 128) keeps the
  last `window` tokens: a rolling buffer. An engine that does not roll allocates all `seq`
  (`KVCache.unrolled_bytes`);
- MLA (DeepSeek-V2/V3) caches one latent of kv_lora_rank + qk_rope_head_dim per layer per token,
  for all heads (K = that, V = 0); `expanded=True` gives the per-head keys and values an
  implementation that expands the latent would hold instead (K and V widths differ);
- DeepSeek-V4 keeps a window of 128 tokens plus one compressed row per 4 tokens (CSA, with its
  indexer's key) or per 128 (HCA): its cache grows at 1/4 or 1/128 of a row per token;
- a recurrent layer's state does not grow: Qwen3-Next's 36 gated DeltaNet layers hold the same
  bytes at 1 token and at 1M, so only its 12 attention layers grow with the context;
- attention sinks (gpt-oss) are one learned logit per head: parameters, nothing cached.

States are kept in the model's dtype (the cache's own when it is fp32, fp16 or bf16, 16 bits
otherwise: engines quantise K and V, not states), or in fp32 where the model says so.

Under tensor parallelism (`tp`) each GPU holds n_kv_heads / tp KV heads, one head when tp exceeds
them (vLLM and SGLang replicate KV heads then), and the whole MLA latent (it has no heads to split);
states split by their heads (`StateSpec.per_gpu`).
No torch here: tests/test_memory_torch.py checks these numbers against real cache tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.memory.formats import FORMATS, Format, kv_format
from calc.errors import GptcalcError
from calc.parts.cache import StateSpec, TokenSpec
from calc.spec.model import ModelSpec

__all__ = ["KVCache", "KVLayers", "StateLayers", "kv_cache", "kv_layers", "kv_variants", "mtp_layers", "state_layers"]


@dataclass(frozen=True)
class KVLayers:
    """One kind of layer's cache: how many layers, and the K and V elements each keeps per token."""

    block: str
    n_layers: int
    k: int  # elements per token per layer on one GPU (n_kv_heads x head_dim; MLA: the latent + rope key)
    v: int  # 0 for the MLA latent, which stands for both
    kind: str  # MHA, GQA, MQA or MLA
    n_heads: int
    n_kv_heads: int  # the model's own (for MLA: n_heads once expanded)
    head_dim: int
    window: int | None = None  # a sliding window: at most this many tokens kept
    kv_heads_per_gpu: int | None = None  # None: MLA's latent, not split by heads
    sinks: bool = False
    expanded: tuple[int, int] | None = None  # MLA latent: the per-head (K, V) an expanding cache would hold
    rope: int = 0  # MLA latent: the rotary key's width inside k
    ratio: int = 1  # a compressed kind: one row per this many tokens
    chunk: int | None = None  # chunked local attention: the chunk (kept whole here; vLLM pages it apart)

    def tokens(self, seq: int, rolling: bool = True) -> int:
        """Rows this kind keeps at `seq`: the window caps them in a rolling buffer; a compressed
        kind keeps one per `ratio` tokens, for whole blocks only."""
        return min(seq, self.window) if self.window and rolling else seq // self.ratio

    def row_bytes(self, fmt: Format) -> int:
        """One row of one layer: a K row and a V row, each whole blocks of `fmt`."""
        return fmt.row_bytes(self.k) + (fmt.row_bytes(self.v) if self.v else 0)

    def bytes_per_token(self, fmt: Format) -> int:
        """What one more token adds over this kind's layers: a row each, or 1/ratio of one (rounded down)."""
        return self.n_layers * self.row_bytes(fmt) // self.ratio

    def bytes_at(self, seq: int, fmt: Format, rolling: bool = True) -> int:
        """This kind's rows at `seq` tokens of one sequence."""
        return self.n_layers * self.row_bytes(fmt) * self.tokens(seq, rolling)

    def as_expanded(self) -> "KVLayers":
        """The same layers caching per-head K and V instead of the MLA latent (itself if not MLA)."""
        if self.expanded is None:
            return self
        return replace(self, k=self.expanded[0], v=self.expanded[1], expanded=None, rope=0)

    def to_json(self) -> dict[str, object]:
        """Its fields, `expanded` as a list: what --json prints, so that the API's to_dict() equals it."""
        return {**self.__dict__, "expanded": list(self.expanded) if self.expanded else None}


@dataclass(frozen=True)
class StateLayers:
    """One kind of layer's fixed per-sequence state (a conv window or a recurrent state)."""

    block: str
    n_layers: int
    name: str  # "conv" or "recurrent"
    elements: int  # per layer per sequence on one GPU
    dtype: str  # "model" or "fp32"
    mixer: str = ""  # the mixer that keeps it (mamba2, gated_deltanet, ...): engines page some apart

    def format(self, cache: Format) -> Format:
        """fp32 where the model keeps it so; else the model's dtype: the cache's when it is a plain
        float of 16 or 32 bits, 16 bits when the cache is quantised (engines quantise K and V only)."""
        if self.dtype == "fp32":
            return FORMATS["fp32"]
        return cache if cache.name in ("fp32", "fp16", "bf16") else FORMATS["bf16"]

    def bytes_per_sequence(self, cache: Format) -> int:
        return self.n_layers * self.format(cache).row_bytes(self.elements)

    def to_json(self, cache: Format) -> dict[str, object]:
        return {**self.__dict__, "dtype": self.format(cache).name, "bytes_per_sequence": self.bytes_per_sequence(cache)}


def _split(k: int, v: int, heads: int, tp: int) -> tuple[int, int, int]:
    """(K, V, KV heads) on one of `tp` GPUs: heads / tp each, or one replicated head when tp exceeds them."""
    if tp > heads:
        if tp % heads:
            raise GptcalcError(f"--tp {tp}: more GPUs than the {heads} KV heads must be a multiple of them")
        return k // heads, v // heads, 1  # each GPU holds a replica of one head
    if heads % tp:
        raise GptcalcError(f"--tp {tp}: does not divide the {heads} KV heads")
    return k // tp, v // tp, heads // tp


def _layers(name: str, n_layers: int, t: TokenSpec, tp: int) -> KVLayers:
    """One layer kind's per-token cache on one GPU: rows split by their heads, or whole (MLA's
    latent) with its expansion split by the query heads."""
    common = dict(kind=t.kind, n_heads=t.n_heads, n_kv_heads=t.n_kv_heads, head_dim=t.head_dim, window=t.window,
                  sinks=t.sinks, rope=t.rope, ratio=t.ratio, chunk=t.chunk)
    if t.heads is None:
        expanded = _split(*t.expanded, t.n_heads, tp)[:2] if t.expanded else None
        return KVLayers(name, n_layers, t.k, t.v, **common, expanded=expanded)
    k, v, heads = _split(t.k, t.v, t.heads, tp)
    return KVLayers(name, n_layers, k, v, **common, kv_heads_per_gpu=heads)


def _state(name: str, n_layers: int, state: StateSpec, tp: int, mixer: str = "") -> StateLayers:
    if not state.splits(tp):
        raise GptcalcError(f"--tp {tp}: does not divide the {state.heads} heads of {name}'s {state.name} state")
    return StateLayers(name, n_layers, state.name, state.per_gpu(tp), state.dtype, mixer)


def kv_layers(spec: ModelSpec, tp: int = 1, expanded: bool = False) -> tuple[KVLayers, ...]:
    """Each layer kind's per-token cache on one GPU, as its mixer states it."""
    rows = tuple(_layers(name, n, t, tp) for name, n in spec.layer_counts().items()
                 for t in spec.blocks[name].cache(spec.d_model).tokens)
    return tuple(kind.as_expanded() for kind in rows) if expanded else rows


def mtp_layers(spec: ModelSpec, tp: int = 1) -> tuple[KVLayers, ...]:
    """The rows of the checkpoint's multi-token-prediction layers (none without them). They are no
    part of the decoder's cache, but an engine's draft worker may keep a pool for them: SGLang's MTP
    draft prices its layers into the target's pool (calc.analysis.memory.sglang_draft)."""
    if spec.mtp is None:
        return ()
    return tuple(_layers(spec.mtp.block, spec.mtp.n_layers, t, tp)
                 for t in spec.blocks[spec.mtp.block].cache(spec.d_model).tokens)


def _state_mixer(mixer: object, state: StateSpec, d_model: int) -> str:
    """The kind of mixer that keeps `state`: the layer's own, or the member of a parallel group whose cache
    states it (Falcon-H1's Mamba2 beside its attention), which is what engines page by (state_pages)."""
    members = getattr(mixer, "mixers", None) or (mixer,)
    return next((getattr(m, "kind", "") for m in members if state in m.cache(d_model).states), "")


def state_layers(spec: ModelSpec, tp: int = 1) -> tuple[StateLayers, ...]:
    """Each layer kind's fixed per-sequence states on one GPU (none for a pure attention model)."""
    return tuple(_state(name, n, state, tp, _state_mixer(spec.blocks[name].attention, state, spec.d_model))
                 for name, n in spec.layer_counts().items() for state in spec.blocks[name].cache(spec.d_model).states)


@dataclass(frozen=True)
class KVCache:
    """What a decoder keeps for `seq` tokens of `batch` sequences, by layer kind: K and V rows per
    token (`layers`) and fixed per-sequence states (`states`)."""

    model: str
    seq: int
    batch: int
    format: Format
    layers: tuple[KVLayers, ...]
    tp: int = 1
    expanded: bool = False  # MLA: per-head K and V instead of the latent
    states: tuple[StateLayers, ...] = ()
    mtp: tuple[KVLayers, ...] = ()  # the checkpoint's MTP layers' rows (mtp_layers), outside every total here

    @property
    def dtype(self) -> str:
        return self.format.name

    @property
    def n_layers(self) -> int:
        """Layers that cache per token (a DSA layer's latent and indexer keys are one layer)."""
        return sum({kind.block: kind.n_layers for kind in self.layers}.values())

    @property
    def elements_per_token(self) -> int:
        """K and V elements one token adds on one GPU, over all layers: 2 x n_layers x n_kv_heads x head_dim uniform."""
        return sum(kind.n_layers * (kind.k + kind.v) for kind in self.layers)

    @property
    def bytes_per_token(self) -> int:
        """Bytes one more token adds to one sequence while every layer still keeps it (seq <= every window)."""
        return sum(kind.bytes_per_token(self.format) for kind in self.layers)

    def kind_bytes(self, kind: KVLayers, rolling: bool = True) -> int:
        return kind.bytes_at(self.seq, self.format, rolling) * self.batch

    @property
    def state_bytes_per_sequence(self) -> int:
        """The fixed part: every state one sequence keeps, whatever its length (0 without states)."""
        return sum(state.bytes_per_sequence(self.format) for state in self.states)

    @property
    def state_bytes(self) -> int:
        return self.state_bytes_per_sequence * self.batch

    def bytes_at(self, seq: int, batch: int) -> int:
        """The whole cache at seq x batch: rows for the tokens each kind keeps, plus the states."""
        rows = sum(kind.bytes_at(seq, self.format) for kind in self.layers)
        return (rows + self.state_bytes_per_sequence) * batch

    @property
    def total_bytes(self) -> int:
        """Every kind at the tokens it keeps (sliding-window layers capped at their window), plus states."""
        return self.bytes_at(self.seq, self.batch)

    @property
    def unrolled_bytes(self) -> int:
        """What an engine that allocates `seq` positions for every layer, windows or not, holds."""
        rows = sum(kind.bytes_at(self.seq, self.format, rolling=False) for kind in self.layers)
        return rows * self.batch + self.state_bytes

    @property
    def expanded_bytes(self) -> int | None:
        """MLA: what caching per-head K and V instead of the latent would take (None without MLA)."""
        if not any(kind.expanded for kind in self.layers):
            return None
        return replace(self, layers=tuple(kind.as_expanded() for kind in self.layers), expanded=True).total_bytes

    @property
    def attention_kind(self) -> str:
        """MHA, GQA, MQA, MLA or a mix ("GQA + MLA"); "none" for a model without attention (Mamba2)."""
        return " + ".join(dict.fromkeys(kind.kind for kind in self.layers)) or "none"

    # The first layer kind's heads, for the one-line summaries (every supported stack shares them; 0 without attention).
    @property
    def n_heads(self) -> int:
        return self.layers[0].n_heads if self.layers else 0

    @property
    def n_kv_heads(self) -> int:
        return self.layers[0].n_kv_heads if self.layers else 0

    @property
    def head_dim(self) -> int:
        return self.layers[0].head_dim if self.layers else 0

    def to_json(self) -> dict[str, object]:
        return {
            "model": self.model, "seq": self.seq, "batch": self.batch, "dtype": self.dtype,
            "bits_per_value": str(self.format.bits_per_value), "tp": self.tp,
            "attention": self.attention_kind, "n_layers": self.n_layers,
            "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
            "mla_cache": ("expanded" if self.expanded else "latent") if "MLA" in self.attention_kind else None,
            "layers": [{**kind.to_json(), "tokens_kept": kind.tokens(self.seq),
                        "bytes_per_token": kind.bytes_per_token(self.format), "total_bytes": self.kind_bytes(kind)}
                       for kind in self.layers],
            "bytes_per_token": self.bytes_per_token,
            "states": [state.to_json(self.format) for state in self.states],
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "state_bytes": self.state_bytes,
            "total_bytes": self.total_bytes,
            "unrolled_bytes": self.unrolled_bytes,
            "mla_expanded_bytes": self.expanded_bytes,
        }


def kv_cache(spec: ModelSpec, seq: int, batch: int = 1, dtype: str | Format = "fp16", tp: int = 1,
             expanded: bool = False) -> KVCache:
    """The cache of `spec` at seq x batch tokens on one of `tp` GPUs, elements stored as `dtype`."""
    fmt = dtype if isinstance(dtype, Format) else kv_format(dtype)
    if seq < 1 or batch < 1 or tp < 1:
        raise GptcalcError(f"seq={seq}, batch={batch}, tp={tp}: each must be at least 1")
    return KVCache(spec.name, seq, batch, fmt, kv_layers(spec, tp, expanded), tp, expanded, state_layers(spec, tp),
                   mtp_layers(spec, tp))


def kv_variants(spec: ModelSpec, seq: int, batch: int = 1, dtype: str | Format = "fp16") -> dict[str, KVCache]:
    """The same model's cache under MHA (n_kv_heads = n_heads), its own setting, and MQA (1)."""
    if any(a.cache(spec.d_model).tokens[0].heads is None for _, a in spec.attention_parts()):
        raise GptcalcError(f"--gqa: {spec.name} uses MLA, which caches a latent rather than KV heads")
    heads = {a.n_heads for _, a in spec.attention_parts()}
    if not heads:
        raise GptcalcError(f"--gqa: {spec.name} has no attention layers, so no KV heads to vary")
    if len(heads) != 1:
        raise GptcalcError(f"--gqa: {spec.name}'s layers differ in query heads ({sorted(heads)})")
    return {
        "MHA": kv_cache(spec.with_kv_heads(heads.pop()), seq, batch, dtype),
        "model": kv_cache(spec, seq, batch, dtype),
        "MQA": kv_cache(spec.with_kv_heads(1), seq, batch, dtype),
    }
