"""The rules of thumb beside our count, per token, each split into a weights term and an attention term.

- Kaplan et al. 2020 (arXiv 2001.08361, Table 1): C_forward = 2N + 2·n_layer·n_ctx·d_attn, N the
  non-embedding parameters. Their attention term is half of QKᵀ and A·V's 4·n_ctx·d_attn per layer,
  and the LM head (2·d_model·vocab) is left out.
- 6N per trained token (forward 2N + backward 4N), attention left out.
- PaLM (Chowdhery et al. 2022, arXiv 2204.02311, Appendix B): 6N + 12·L·H·Q·T per trained token, L
  layers, H heads of width Q, T the sequence: QKᵀ and A·V in full, times 3. torchtitan computes the
  same with N = all parameters but the token embedding.

Our figure splits the same way: 2× every weight a token multiplies (the LM head too, tied or not;
for a MoE only the experts it is routed to) and the score and weighted-value matmuls. N counts
norms and biases (multiplied by nothing) and, for a MoE, we take the active non-embedding
parameters as N; the differences below are exactly these choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from calc.analysis.count import count
from calc.analysis.flops.rows import Flops
from calc.spec.model import ModelSpec

__all__ = ["Check", "checks"]


@dataclass(frozen=True)
class Check:
    """One per-token figure as weights term + attention term (Fractions: per-token averages need not be whole)."""

    name: str
    formula: str
    weights: Fraction
    attention: Fraction
    compare_to: str  # the name of our figure it sits beside ("" for ours)

    @property
    def total(self) -> Fraction:
        return self.weights + self.attention

    def to_json(self, scale: int) -> dict[str, object]:
        return {"name": self.name, "formula": self.formula, "weights": float(self.weights / scale),
                "attention": float(self.attention / scale), "total": float(self.total / scale),
                "compare_to": self.compare_to or None}


def checks(spec: ModelSpec, f: Flops) -> tuple[Check, ...]:
    """Ours (forward, and a training step without recomputation) and each rule beside it, per token."""
    b = count(spec)
    n = (b.active if b.active is not None else b.decoder_total) - b.embeddings  # Kaplan's N, active experts only (decoder)
    n_ctx = f.seq + 1 if f.decode else f.seq
    attention = dict(spec.attention_parts())  # layers without attention add nothing to the context term
    d_attn = sum(layers * attention[kind].n_heads * attention[kind].head_dim
                 for kind, layers in f.layers.items() if kind in attention)  # n_layer·d_attn = L·H·Q
    weights, attention = f.per_token(f.forward - f.attention), f.per_token(f.attention)
    rows = [
        Check("ours: forward", "the rows above", weights, attention, ""),
        Check("Kaplan et al.", "2N + 2·n_layer·n_ctx·d_attn", Fraction(2 * n), Fraction(2 * n_ctx * d_attn),
              "ours: forward"),
    ]
    if not f.decode:
        rows += [
            Check("ours: training", "3 × forward (no recomputation)", 3 * weights, 3 * attention, ""),
            Check("6N", "6N", Fraction(6 * n), Fraction(0), "ours: training"),
            Check("PaLM", "6N + 12·L·H·Q·T", Fraction(6 * n), Fraction(12 * d_attn * n_ctx), "ours: training"),
        ]
    return tuple(rows)
