"""DeepSeek-V4's attention: one shared key-value head over a sliding window, plus, in most layers,
compressed blocks of the whole past (DeepseekV4Attention in transformers' modeling_deepseek_v4.py).

Per layer, with d = d_model, h = n_heads, c = head_dim, r = q_lora_rank, g = o_groups, o = o_lora_rank:

    q_a = d·r, q_a_norm = r, q_b = r·h·c          queries through a latent, as MLA's
    kv = d·c, kv_norm = c                          one head that is both key and value (K = V)
    o_a = h·c·o, o_b = g·o·d                       grouped output: each of g head groups down to o, then up to d
    sinks = h                                      a learned logit per head (gpt-oss's)

A compressor (`ratio` m > 0) turns every m tokens into one entry of c, a softmax-gated sum of their
projections (kv_proj, gate_proj: d -> k·c each, a position bias m·k·c, an RMSNorm of c), k = 2 with
`overlap` (CSA, m = 4: each entry mixes two windows) and 1 without (HCA, m = 128). With an
`indexer` (CSA) a lightning indexer compresses its own keys the same way at its head_dim i (two
series, 2·i wide), scores them with n_i heads read from the query latent (q_b: r·n_i·i, weights:
d·n_i) and keeps the best `topk` entries per query.

What a sequence keeps (`cache()`): the window's K = V rows (c each), one compressed entry per m
tokens (c) and, with the indexer, one indexer key per m tokens (i); and per sequence the tokens
waiting for their window to close (at most m - 1 of them: kv and gate, k·c each) and, with
overlap, the last window's first series (m·c of kv in the model's dtype, m·c of gate in fp32: the
gate has the fp32 position bias added). DeepseekV4HCACache and DeepseekV4CSACache hold exactly
these; the counts here are the most they hold, reached when the length is one short of a window.
Every GPU holds all of it: the single KV head and the compressor are not split by tensor parallelism.
"""


from typing import Literal

from calc.parts.attention import Rope
from calc.parts.base import Field, Part, model_validator, present
from calc.parts.cache import CacheSpec, StateSpec, TokenSpec
from calc.parts.compressed_nodes import CompressedGraph, attention_nodes
from calc.parts.norm import Norm
from calc.parts.transient import Subgraph

__all__ = ["LABELS", "CompressedAttention", "CompressedIndexer"]


class CompressedIndexer(Part):
    """The lightning indexer of a compressed layer: `n_heads` heads of `head_dim`, the `topk` best entries."""

    n_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    topk: int = Field(gt=0)


class CompressedAttention(Part):
    kind: Literal["compressed_attention"] = "compressed_attention"
    n_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    q_lora_rank: int = Field(gt=0)
    o_groups: int = Field(gt=0)
    o_lora_rank: int = Field(gt=0)
    window: int = Field(gt=0)  # the sliding window every layer keeps
    norm: Norm  # q_a_norm, kv_norm and the compressors' norms
    rope: Rope | None = None
    ratio: int = Field(default=0, ge=0)  # 0: the window alone; m: one compressed entry per m tokens
    overlap: bool = False  # each entry mixes two windows (two series of kv and gate)
    indexer: CompressedIndexer | None = None

    @model_validator(mode="after")
    def _check(self) -> "CompressedAttention":
        if (self.n_heads * self.head_dim) % self.o_groups:
            raise ValueError(f"o_groups: {self.o_groups} does not divide the {self.n_heads} x {self.head_dim} output")
        if self.ratio == 0 and (self.overlap or self.indexer is not None):
            raise ValueError("overlap and indexer belong to a compressor: they need ratio > 0")
        return self

    @property
    def n_kv_heads(self) -> int:
        """One head, both key and value: what tensor-parallel checks and K/V weight splits read."""
        return 1

    @property
    def series(self) -> int:
        """How many series the compressor projects per token: two when entries overlap."""
        return 2 if self.overlap else 1

    def params(self, d_model: int) -> dict[str, int]:
        d, h, c, r = d_model, self.n_heads, self.head_dim, self.q_lora_rank
        rows = present(q_a=d * r, q_a_norm=self.norm.params(r), q_b=r * h * c, kv=d * c, kv_norm=self.norm.params(c),
                       o_a=h * c * self.o_lora_rank, o_b=self.o_groups * self.o_lora_rank * d, attn_sinks=h)
        return {**rows, **self._compressor_params(d_model)}

    def _compressor_params(self, d_model: int) -> dict[str, int]:
        """The compressor's projections, position bias and norm; the indexer's beside them."""
        if not self.ratio:
            return {}
        k, c, m = self.series, self.head_dim, self.ratio
        rows = {"comp_kv": d_model * k * c, "comp_gate": d_model * k * c, "comp_bias": m * k * c,
                "comp_norm": self.norm.params(c)}
        i = self.indexer
        if i is not None:
            rows.update(idx_q=self.q_lora_rank * i.n_heads * i.head_dim, idx_kv=d_model * 2 * i.head_dim,
                        idx_gate=d_model * 2 * i.head_dim, idx_bias=m * 2 * i.head_dim,
                        idx_norm=self.norm.params(i.head_dim), idx_weights=d_model * i.n_heads)
        return rows

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """Each weight matrix's input width and how many there are per layer."""
        rows = {"q_a": (d_model, 1), "q_b": (self.q_lora_rank, 1), "kv": (d_model, 1),
                "o_a": (self.n_heads * self.head_dim // self.o_groups, 1), "o_b": (self.o_groups * self.o_lora_rank, 1)}
        if self.ratio:
            rows.update({"comp_kv": (d_model, 1), "comp_gate": (d_model, 1)})
        if self.indexer is not None:
            rows.update({"idx_q": (self.q_lora_rank, 1), "idx_kv": (d_model, 1), "idx_gate": (d_model, 1),
                         "idx_weights": (d_model, 1)})
        return rows

    def cache(self, d_model: int) -> CacheSpec:
        """The window's rows, the compressed entries (one per `ratio` tokens) and the indexer's keys;
        the compressor's waiting tokens and overlap as per-sequence states. All whole on every GPU."""
        c, h = self.head_dim, self.n_heads
        rows = [TokenSpec(c, 0, "MQA", h, 1, c, None, self.window, sinks=True)]
        if not self.ratio:
            return CacheSpec(tuple(rows))
        rows.append(TokenSpec(c, 0, "compressed", h, 1, c, None, ratio=self.ratio))
        states = list(_compressor_states("compressor", self.ratio, c, self.series))
        i = self.indexer
        if i is not None:
            rows.append(TokenSpec(i.head_dim, 0, "compressed indexer", i.n_heads, 1, i.head_dim, None, ratio=self.ratio))
            states += _compressor_states("indexer", self.ratio, i.head_dim, 2)
        return CacheSpec(tuple(rows), tuple(states))

    def graph_nodes(self, g: CompressedGraph, layer: int, x: str, d_model: int) -> Subgraph:
        """Its nodes in llama.cpp's worst-case graph (calc/parts/compressed_nodes.py), from the normed input `x`."""
        return attention_nodes(f"l{layer}.", g, self, d_model, x)

    def describe(self) -> str:
        what = (f"shared-KV MQA ({self.n_heads} heads of {self.head_dim}, q_lora_rank {self.q_lora_rank}, "
                f"{self.o_groups} output groups of {self.o_lora_rank}), sliding window {self.window:,}")
        if not self.ratio:
            return what
        kind = "overlapping windows" if self.overlap else "disjoint windows"
        i = self.indexer
        idx = f"; indexer: {i.n_heads} heads of {i.head_dim}, top {i.topk:,} entries" if i else ""
        return f"{what} + one compressed entry per {self.ratio} tokens ({kind}){idx}"


def _compressor_states(name: str, ratio: int, width: int, series: int) -> tuple[StateSpec, ...]:
    """A compressor's per-sequence state: the tokens waiting for their window (at most ratio - 1, kv
    and gate of series x width each) and, with two series, the last window's first one (kv in the
    model's dtype, gate in fp32)."""
    waiting = StateSpec(f"{name} window", (ratio - 1) * 2 * series, width, None)
    if series == 1:
        return (waiting,)
    return (waiting, StateSpec(f"{name} overlap", ratio, width, None),
            StateSpec(f"{name} overlap gate", ratio, width, None, dtype="fp32"))


LABELS = {
    "kv": "K = V projection (one head)",
    "kv_norm": "K = V norm",
    "o_a": "grouped output down",
    "o_b": "output up",
    "comp_kv": "compressor K = V",
    "comp_gate": "compressor gate",
    "comp_bias": "compressor position bias",
    "comp_norm": "compressor norm",
    "idx_kv": "indexer compressor K",
    "idx_gate": "indexer compressor gate",
    "idx_bias": "indexer position bias",
    "idx_norm": "indexer K norm (RMS)",
}
