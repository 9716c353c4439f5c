"""The prompt's journey through a decoder: every tensor's shape from token ids to the next token.

`journey(spec, seq, batch, decode)` lists one `Step` per operation, in the order a token meets
them: the embedding steps, each block kind's steps once (marked with its kind and repeated as many
times as the model has layers of it: DeepSeek-V3's dense block × 3 and MoE block × 58), the final
norm and the LM head. Each step carries the shape(s) it reads, the weight it multiplies (shown
`[in, out]`, as in `x @ W`; torch's nn.Linear stores the transpose), the shape it writes, the
parameters it owns and the FLOPs of its matmul.

A generic walk over the layered `ModelSpec`: one module per part kind builds its steps
(`embedding`: embeddings and head, `norm`, `attention`, `mla`, `mlp`, `moe`), and `block` orders a
block's parts by its norm positions and `parallel`. Every parameter row a part's `params()` lists is
owned by exactly one step, so the params column adds up to `count(spec).decoder_total` (a
multimodal model's vision tower has its own journey, `tower.tower_journey`, for `--image`).

Step ids are the names the torch reference model passes to its `trace` callback, so a test can
compare the two one to one; steps that explain without producing a tensor of their own (grouping
KV heads for GQA, the softmax over the vocabulary) are marked `traced=False`.

Prefill reads T tokens at once. Decode reads one new token while the KV cache holds T past ones:
queries have length 1, keys and values T+1 — the prefill/decode split.
"""

from __future__ import annotations

from calc.analysis.shapes.block import block_notes, block_steps
from calc.analysis.shapes.core import FLOP_CONVENTION, Dims, Journey, Shape, Step
from calc.analysis.shapes.embedding import embedding_steps, head_steps
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["FLOP_CONVENTION", "Journey", "Shape", "Step", "journey"]


def journey(spec: ModelSpec, seq: int, batch: int = 1, decode: bool = False) -> Journey:
    """Every step of a prefill of `seq` tokens, or of one decode step after `seq` cached tokens."""
    if seq < 1:
        raise GptcalcError(f"--seq: must be at least 1, got {seq}")
    if batch < 1:
        raise GptcalcError(f"--batch: must be at least 1, got {batch}")
    positions = seq + 1 if decode else seq
    if positions > spec.n_positions:
        raise GptcalcError(
            f"--seq: {positions} positions exceed {spec.name}'s context length n_positions={spec.n_positions}"
        )
    d = _pass(spec, batch, seq, decode)
    layers = spec.layer_counts()
    steps = embedding_steps(spec, d)
    owned: set[str] = set()  # shared blocks (Zamba2's) whose weights a step already owns
    for name, n in layers.items():
        applied = spec.blocks[name].shared
        steps += block_steps(d, spec.blocks[name], spec.d_model, name, n, applied is None or applied.name not in owned)
        owned |= {applied.name} if applied else set()
    steps += head_steps(spec, d)
    notes = dict.fromkeys(note for name in layers for note in block_notes(spec.blocks[name], name))
    counted = "the language model's total in `gptcalc count`, towers apart" if spec.towers else ""
    return Journey(spec.name, batch, seq, decode, spec.n_layers, tuple(steps), layers, tuple(notes),
                   **({"counted": counted} if counted else {}))


def _pass(spec: ModelSpec, batch: int, seq: int, decode: bool) -> Dims:
    """The sizes every step outside a block's own widths is named by."""
    e = spec.embedding
    return Dims({
        "B": batch, "T": seq, "1": 1, "T+1": seq + 1, "d_model": spec.d_model, "vocab": spec.vocab_size,
        "d_embed": e.width(spec.d_model), "n_positions": spec.n_positions,
        "n_positions+offset": spec.n_positions + e.position_offset,
    }, decode)
