"""Before and after the blocks: token ids to the first block's input, the last block's output to the next token.

Embedding tables are looked up, not multiplied (0 FLOPs); the LM head is a matmul on the last
position only, the one that predicts the next token. A tied head owns 0 parameters: its matrix is
the token embedding's, already counted.
"""

from __future__ import annotations

from math import prod, sqrt

from calc.analysis.shapes.core import Dims, Rows, Shape, Step, softcap_note
from calc.analysis.shapes.norm import norm_step
from calc.parts import Attention
from calc.spec.model import ModelSpec

__all__ = ["embedding_steps", "head_steps"]


def embedding_steps(spec: ModelSpec, d: Dims) -> list[Step]:
    """Token ids -> token rows (-> project_in) (+ learned positions) (× √d_model) (-> embedding norm)."""
    e = spec.embedding
    # AltUp's projections out of the streams run after the blocks: head_steps shows them
    rows = Rows({k: n for k, n in e.params(spec.vocab_size, spec.d_model, spec.n_positions).items() if k != "altup_out"})
    ids, hidden = d.shape("B", d.new), d.hidden
    rows_out = d.shape("B", d.new, "d_embed") if e.proj_dim else hidden
    steps = [
        d.step("token_ids", "token ids", ids, note="one integer id per token, per sequence"),
        d.step("token_embedding", "token embedding", rows_out, (ids,), d.shape("vocab", rows_out.names[-1]),
               rows.take("token_embedding"), note="looks up one row of the table per token"),
    ]
    if e.proj_dim:
        steps.append(d.linear("project_in", "project in ·W_in", rows_out, d.shape("d_embed", "d_model"), hidden,
                              rows.take("project_in"), f"word embeddings {e.proj_dim} wide, projected to d_model"))
    learned = e.positions == "learned"
    if learned:
        steps.append(_positions(spec, d, rows.take("position_embedding")))
    what = "token + position rows, added" if learned else f"the token rows ({_positions_inside(spec)})"
    if e.scale:
        what += f", times √d_model = {sqrt(spec.d_model):.4g} (no parameter)"
    steps.append(d.step("embeddings", "embeddings into block 0", hidden, (hidden, hidden) if learned else (hidden,),
                        note=what))
    if e.norm is not None:
        steps.append(norm_step(d, e.norm, "embedding_norm", "embedding norm", hidden, rows.take("embedding_norm")))
    steps += _per_layer_steps(spec, d, rows) + _altup_in(spec, d, rows)
    rows.done("embedding")
    return steps


def _per_layer_steps(spec: ModelSpec, d: Dims, rows: Rows) -> list[Step]:
    """Gemma-3n's and Gemma-4's per-layer inputs: a second table's rows plus a projection of the token
    rows, normed, added and scaled by 1/√2, one p-wide slice for each layer."""
    p = spec.embedding.per_layer
    if p is None:
        return []
    d = d.named(**{"L·p": p.n_layers * p.width, "vocab_p": p.vocab_size})
    ids, slices = d.shape("B", d.new), d.shape("B", d.new, "L·p")
    return [
        d.step("per_layer_embedding", "per-layer embedding", slices, (ids,), d.shape("vocab_p", "L·p"),
               rows.take("per_layer_embedding"), note=f"{p.n_layers} layers × {p.width} channels per token, looked up"),
        d.linear("per_layer_projection", "per-layer projection ·W (normed, added to the lookup)", d.hidden,
                 d.shape("d_model", "L·p"), slices, rows.take("per_layer_projection", "per_layer_projection_norm"),
                 "the token rows projected into the same slices, RMS-normed per slice; layer i reads slice i"),
    ]


def _altup_in(spec: ModelSpec, d: Dims, rows: Rows) -> list[Step]:
    """Gemma-3n's AltUp: the stream becomes n streams, stream 0 the embedding, the others projections of it."""
    n = spec.embedding.altup_inputs or 1
    if n == 1:
        return []
    d = d.named(n=n, **{"(n-1)·d_model": (n - 1) * spec.d_model})
    streams = d.shape("n", "B", d.new, "d_model")
    return [d.step("altup_in", f"AltUp: {n} streams", streams, (d.hidden,), d.shape("d_model", "(n-1)·d_model"),
                   rows.take("altup_in"), 2 * prod(d.hidden.sizes) * spec.d_model * (n - 1),
                   note=f"{n - 1} d_model × d_model projections of the embedding, each rescaled to its magnitude")]


def _positions(spec: ModelSpec, d: Dims, params: int) -> Step:
    """The learned position table; its rows start at `position_offset` (OPT: 2)."""
    first = spec.embedding.position_offset
    where = "position T (the new token)" if d.decode else "positions 0 … T-1"
    if first:
        where += f", read from row {first} + position (the table's first {first} rows are an offset)"
    table = "n_positions+offset" if first else "n_positions"
    return d.step("position_embedding", "position embedding", d.hidden, (d.shape(d.new),), d.shape(table, "d_model"),
                  params, note=f"learned rows for {where}")


def _positions_inside(spec: ModelSpec) -> str:
    """Where a model without a position table gets positions from: rotary or ALiBi in attention, or nowhere."""
    parts = [part for _, part in spec.attention_parts()]
    if any(a.rope for a in parts):
        return "rotary acts inside attention"
    if any(isinstance(a, Attention) and a.alibi for a in parts):
        return "ALiBi acts inside attention"
    return "no position information"


def head_steps(spec: ModelSpec, d: Dims) -> list[Step]:
    """Final norm, the last position, (project_out,) the LM head, (soft-capping,) softmax, the next token."""
    rows = Rows(spec.head.params(spec.vocab_size, spec.d_model, spec.embedding.proj_dim))
    steps = _altup_out(spec, d) + _hyper_head(spec, d, rows)
    if spec.final_norm is not None:
        params = spec.final_norm.params(spec.d_model)
        steps.append(norm_step(d, spec.final_norm, "final_norm", "final norm", d.hidden, params))
    last = d.shape("B", "d_model")
    steps.append(d.step("last_position", "last position", last, (d.hidden,), note="only the last row predicts"))
    if spec.embedding.proj_dim:
        narrow = d.shape("B", "d_embed")
        steps.append(d.linear("project_out", "project out ·W_out", last, d.shape("d_model", "d_embed"), narrow,
                              rows.take("project_out"), "back to the word embeddings' width"))
        last = narrow
    steps += _logits(spec, d, last, rows)
    rows.done("head")
    return steps


def _altup_out(spec: ModelSpec, d: Dims) -> list[Step]:
    """Gemma-3n's AltUp after the last block: n - 1 streams projected back, all n averaged."""
    n = spec.embedding.altup_inputs or 1
    if n == 1:
        return []
    params = spec.embedding.params(spec.vocab_size, spec.d_model, spec.n_positions)["altup_out"]
    d = d.named(n=n, **{"n-1": n - 1})
    return [d.step("altup_out", "AltUp: the streams back to one", d.hidden, (d.shape("n-1", "B", d.new, "d_model"),),
                   d.shape("d_model", "d_model"), params, 2 * prod(d.hidden.sizes) * spec.d_model * (n - 1),
                   note=f"{n - 1} d_model × d_model projections, rescaled, then the mean of the {n} streams")]


def _hyper_head(spec: ModelSpec, d: Dims, rows: Rows) -> list[Step]:
    """DeepSeek-V4: the residual's n copies collapsed once more (weights from their flattened rows)."""
    if spec.head.hyper is None:
        return []
    n = spec.head.hyper.streams
    d = d.named(n=n, **{"n·d_model": n * spec.d_model})
    flat = d.shape("B", d.new, "n·d_model")
    return [d.linear("hc_head", "hyper-connection head ·W_hc: collapse the copies", flat, d.shape("n·d_model", "n"),
                     d.hidden, rows.take("hc_head"),
                     f"n = {n} weights per token from the flattened copies, then their weighted sum")]


def _logits(spec: ModelSpec, d: Dims, last: Shape, rows: Rows) -> list[Step]:
    head = spec.head
    logits, w = d.shape("B", "vocab"), d.shape(last.names[-1], "vocab")
    note = "one score per vocabulary entry"
    if head.tied:
        note += "; tied: the token embedding's table, transposed (owns 0 parameters)"
    if head.bias:
        note += "; plus a [vocab] bias"
    steps = [d.linear("logits", "LM head ·W_vocab", last, w, logits, rows.take("lm_head", "lm_head_bias"), note)]
    if head.softcap:
        steps.append(d.step("logit_softcap", "soft-cap the logits", logits, (logits,),
                            note=softcap_note(head.softcap, "logits")))
    return steps + [
        d.step("probs", "softmax → probabilities", logits, (logits,), traced=False,
               note="probabilities summing to 1"),
        d.step("next_token", "next token", d.shape("B"), (logits,), note="argmax (or a sample): one id per sequence"),
    ]
