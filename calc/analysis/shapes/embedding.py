"""Before and after the blocks: token ids to the first block's input, the last block's output to the next token.

Embedding tables are looked up, not multiplied (0 FLOPs); the LM head is a matmul on the last
position only, the one that predicts the next token. A tied head owns 0 parameters: its matrix is
the token embedding's, already counted.
"""

from __future__ import annotations

from math import sqrt

from calc.analysis.shapes.core import Dims, Rows, Shape, Step, softcap_note
from calc.analysis.shapes.norm import norm_step
from calc.parts import Attention
from calc.spec.model import ModelSpec

__all__ = ["embedding_steps", "head_steps"]


def embedding_steps(spec: ModelSpec, d: Dims) -> list[Step]:
    """Token ids -> token rows (-> project_in) (+ learned positions) (× √d_model) (-> embedding norm)."""
    e = spec.embedding
    rows = Rows(e.params(spec.vocab_size, spec.d_model, spec.n_positions))
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
    rows.done("embedding")
    return steps


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
    steps = []
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
