"""Forward FLOPs per component from the shapes journey's matmul steps, and a training step's."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping

from calc.analysis.shapes import Journey, Step, journey
from calc.spec.model import ModelSpec

__all__ = ["ATTENTION_CORE", "Conventions", "FlopRow", "Flops", "causal_pairs", "flops", "tower_flops"]

ATTENTION_CORE = ("scores", "attn_heads_out")  # the two matmuls whose size grows with the context


@dataclass(frozen=True)
class Conventions:
    macs: bool = False  # count multiply-accumulates (1 per multiply-add) instead of FLOPs (2)
    causal_half: bool = False  # attention over the causal mask's (query, key) pairs only
    last_logit: bool = False  # the LM head on the last position only

    def described(self, decode: bool) -> list[str]:
        """Each convention in force, said in a sentence (the defaults too)."""
        unit = ("MACs: one multiply-accumulate = 1 (FLOPs would be 2×); --macs" if self.macs
                else "FLOPs: a multiply and an add count 2, so a [m, k] × [k, n] matmul is 2·m·n·k (--macs halves)")
        if decode:
            causal = "causal mask: a decode step's one query sees every cached key, nothing masked"
        elif self.causal_half:
            causal = ("causal attention: only the (query, key) pairs the mask keeps, Σ_p min(p+1, window) = "
                      "T(T+1)/2 without a window (Megatron-LM, MaxText: T²/2)")
        else:
            causal = ("causal attention counted in full, T keys for every query (PaLM, torchtitan, FlopCounterMode); "
                      "--causal-half counts only the unmasked pairs")
        head = ("LM head: on each sequence's new token" if decode
                else "LM head: on the last position only (an inference engine's next token)" if self.last_logit
                else "LM head: on every position, as training and a plain forward compute it (--last-logit: the "
                     "last only)")
        return [unit, causal, head, "embedding lookups, norms, softmax, activations, residual adds, biases: 0"]


@dataclass(frozen=True)
class FlopRow:
    """One matmul of the forward pass; `flops` is one layer's for a block row (× `layers`)."""

    id: str
    label: str
    block: str
    layers: int
    flops: int
    formula: str  # 2·(the dimension names multiplied)
    attention: bool  # a score or weighted-value matmul, growing with the context

    @property
    def total(self) -> int:
        return self.flops * self.layers

    def to_json(self, scale: int) -> dict[str, object]:
        return {"id": self.id, "label": self.label, "block": self.block or None, "layers": self.layers,
                "per_layer": self.flops // scale, "total": self.total // scale, "formula": self.formula,
                "attention": self.attention}


@dataclass(frozen=True)
class Flops:
    """A forward pass's matmuls as rows, its totals and a training step's (prefill only)."""

    model: str
    batch: int
    seq: int
    decode: bool
    conventions: Conventions
    rows: tuple[FlopRow, ...]
    layers: Mapping[str, int] = field(default_factory=dict)
    title: str = ""  # what was computed, when not a decoder's pass (images through a tower)
    per: str = "token"  # what `tokens` counts: a tower's rows are patches

    @property
    def tokens(self) -> int:
        """Positions computed: B·T for a prefill, B for a decode step."""
        return self.batch * (1 if self.decode else self.seq)

    @property
    def scale(self) -> int:
        """What a FLOP count is divided by when printed: 2 for MACs."""
        return 2 if self.conventions.macs else 1

    def _sum(self, rows: list[FlopRow] | tuple[FlopRow, ...]) -> int:
        return sum(row.total for row in rows)

    @property
    def forward(self) -> int:
        return self._sum(self.rows)

    @property
    def attention(self) -> int:
        """The score and weighted-value matmuls of every layer."""
        return self._sum([row for row in self.rows if row.attention])

    @property
    def blocks(self) -> int:
        """Everything inside the stack of layers (what full recomputation runs again)."""
        return self._sum([row for row in self.rows if row.block])

    def training(self) -> dict[str, int]:
        """One training step on these B·T tokens: forward + 2× backward, plus what recomputation repeats."""
        base = 3 * self.forward
        return {"none": base, "selective": base + self.attention, "full": base + self.blocks}

    def per_token(self, n: int) -> Fraction:
        return Fraction(n, self.tokens)

    def to_json(self) -> dict[str, object]:
        s = self.scale
        result: dict[str, object] = {
            "model": self.model, "batch": self.batch, "seq": self.seq, "decode": self.decode, "per": self.per,
            "unit": "MAC" if self.conventions.macs else "FLOP", "tokens": self.tokens,
            "conventions": self.conventions.described(self.decode),
            "forward": self.forward // s, "forward_per_token": float(self.per_token(self.forward) / s),
            "attention": self.attention // s, "rows": [row.to_json(s) for row in self.rows],
        }
        if not self.decode:
            result["training"] = {mode: n // s for mode, n in self.training().items()}
        return result


def flops(spec: ModelSpec, seq: int, batch: int = 1, decode: bool = False,
          conventions: Conventions = Conventions()) -> Flops:
    """The forward pass's matmuls under `conventions`, one row per journey step that multiplies."""
    j = journey(spec, seq, batch, decode)
    # the head's steps from the last position on; those before it (Gemma-3n's AltUp, DeepSeek-V4's
    # hyper-connection head) already run on every position
    last = next(i for i, step in enumerate(j.steps) if step.id == "last_position")
    rows = []
    for index, step in enumerate(j.steps):
        if not step.flops:
            continue
        window = _window(spec, step.block)
        if step.id in ATTENTION_CORE and conventions.causal_half and not decode:
            rows.append(_causal(j, step, window))
        elif index > last and not (conventions.last_logit or decode):
            rows.append(_every_position(j, step))  # the head's matmuls, on all T positions
        else:
            rows.append(_row(j, step, step.flops, _formula(step)))
    return Flops(spec.name, batch, seq, decode, conventions, tuple(rows), j.layers)


def tower_flops(spec: ModelSpec, width: int, height: int, images: int = 1,
                conventions: Conventions = Conventions()) -> Flops:
    """`images` images of width x height through the vision tower (`tower_journey`): every matmul on
    all of a view's patches (bidirectional, so no causal half; no LM head)."""
    from calc.analysis.shapes.tower import tower_journey

    j, _ = tower_journey(spec, width, height, images)
    rows = tuple(_row(j, step, step.flops, _formula(step)) for step in j.steps if step.flops)
    return Flops(spec.name, j.batch, j.seq, False, Conventions(macs=conventions.macs), rows, j.layers, j.title, "patch")


def _window(spec: ModelSpec, block: str) -> int | None:
    """The sliding window of a block's cached keys, as its mixer states it (None: all, or no keys)."""
    tokens = spec.blocks[block].cache(spec.d_model).tokens if block else ()
    return tokens[0].window if tokens else None


def _row(j: Journey, step: Step, n: int, formula: str) -> FlopRow:
    layers = j.layers[step.block] if step.block else 1
    return FlopRow(step.id, step.label, step.block, layers, n, formula, step.id in ATTENTION_CORE)


def _operands(step: Step) -> tuple[tuple[str, ...], str, str]:
    """The leading names, k and n of a step's [.., m, k] × [k, n] (the weight, or its second input)."""
    a = step.inputs[0]
    b = step.weight if step.weight is not None else step.inputs[1]
    return a.names[:-1], a.names[-1], b.names[-1]


def _product(*names: str) -> str:
    """'2·B·T·d_model·(r_kv+d_rope)': a sum in a name is bracketed."""
    return "2·" + "·".join(f"({name})" if "+" in name and not name.startswith("(") else name for name in names)


def _formula(step: Step, extra: tuple[str, ...] = ()) -> str:
    if step.formula:
        return step.formula
    lead, k, n = _operands(step)
    return _product(*lead[:1], *extra, *lead[1:], k, n)


def _every_position(j: Journey, step: Step) -> FlopRow:
    """The journey's head reads the last position, [B, d]; here it reads all T of them."""
    return _row(j, step, step.flops * j.seq, _formula(step, ("T",)))


def causal_pairs(seq: int, window: int | None) -> int:
    """(query, key) pairs a causal mask keeps over `seq` positions: query p sees min(p+1, window) keys."""
    w = seq if window is None else min(window, seq)
    return w * (w + 1) // 2 + (seq - w) * w


def _causal(j: Journey, step: Step, window: int | None) -> FlopRow:
    """A score or weighted-value matmul over the unmasked pairs only: 2·B·h·d per pair."""
    keys = j.seq if window is None else min(window, j.seq)
    pairs = causal_pairs(j.seq, window)
    lead, k, n = _operands(step)
    channel = k if step.id == "scores" else n  # d_head (scores) or d_v (weighted values)
    what = "T(T+1)/2" if keys == j.seq else "Σ_p min(p+1, window)"
    formula = _product(*lead[:-1], channel, what)
    return _row(j, step, step.flops // (j.seq * keys) * pairs, formula)
