"""What a journey is made of: `Shape`, `Step`, `Journey`, and the `Dims` every step builder shares.

A `Step` belongs to the model (embeddings, head: `block == ""`) or to one block kind (`block` is
its name in `ModelSpec.blocks`); a block step's params and FLOPs are per layer, and the `Journey`
multiplies them by that kind's number of layers. `Rows` hands out one part's parameter rows so that
every row is owned by exactly one step: the params column then adds up to `count(spec).decoder_total`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Mapping

__all__ = ["FLOP_CONVENTION", "Dims", "Journey", "Rows", "Shape", "Step", "matmul_flops", "softcap_note"]

FLOP_CONVENTION = (
    "2·m·n·k per [m, k] × [k, n] matmul, times its leading dims (causal mask not subtracted); "
    "lookups, norms, softmax, activations, adds and biases: 0"
)


@dataclass(frozen=True)
class Shape:
    """A tensor's sizes and, beside them, the usual symbol of each dimension (B, T, d_model, h, d_head)."""

    sizes: tuple[int, ...]
    names: tuple[str, ...]

    def __str__(self) -> str:
        return "[" + ", ".join(str(size) for size in self.sizes) + "]"

    @property
    def symbolic(self) -> str:
        return "[" + ", ".join(self.names) + "]"


@dataclass(frozen=True)
class Step:
    """One operation: what it reads, the weight it multiplies, what it writes."""

    id: str
    label: str
    output: Shape
    inputs: tuple[Shape, ...] = ()
    weight: Shape | None = None
    params: int = 0  # parameters this step owns, per layer for a block step (a tied head owns 0)
    flops: int = 0  # per layer for a block step
    block: str = ""  # the block kind this step repeats with; "" outside the stack of blocks
    traced: bool = True  # False: explains, makes no tensor the torch reference reports
    note: str = ""
    once: bool = False  # its params are a shared block's (Zamba2), stored once however many layers run it
    formula: str = ""  # the FLOPs' formula where the shapes do not give it (windows of unequal sizes)
    state: Shape | None = None  # the recurrent state a scan updates, per sequence (no weight of its own)
    fused: str = ""  # the checkpoint's linear this weight is a slice of ("qkv", "gate_up"): one module, one adapter

    @property
    def per_layer(self) -> bool:
        return bool(self.block)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "label": self.label,
            "block": self.block or None,
            "per_layer": self.per_layer,
            "traced": self.traced,
            "inputs": [list(shape.sizes) for shape in self.inputs],
            "weight": list(self.weight.sizes) if self.weight else None,
            **({"state": list(self.state.sizes)} if self.state else {}),
            "output": list(self.output.sizes),
            "output_dims": list(self.output.names),
            "params": self.params,
            "flops": self.flops,
            "note": self.note,
            **({"params_stored_once": True} if self.once else {}),
        }


@dataclass(frozen=True)
class Journey:
    """All steps of one forward pass; each block kind's steps appear once and repeat `layers[kind]` times."""

    model: str
    batch: int
    seq: int
    decode: bool
    n_layers: int  # all layers, of every kind
    steps: tuple[Step, ...]
    layers: Mapping[str, int]  # block kind -> how many layers have it, in order of first appearance
    notes: tuple[str, ...] = ()  # what the parts want said under the table (MoE FLOPs, MLA's cache)
    title: str = ""  # what the table is of, when not a decoder's pass (an image through a tower)
    counted: str = "the total of `gptcalc count`"  # what the params column adds up to

    @property
    def new_tokens(self) -> int:
        """Query positions computed by this pass: T for prefill, 1 for a decode step."""
        return 1 if self.decode else self.seq

    @property
    def keys(self) -> int:
        """Key/value positions attended to: T for prefill, T+1 (cache plus new token) for decode."""
        return self.seq + 1 if self.decode else self.seq

    def _total(self, column: str) -> int:
        """A column over the pass: a block step's value times its layers (a shared block's params once)."""
        return sum(getattr(s, column) * (self.layers[s.block] if s.block and not (s.once and column == "params")
                                         else 1) for s in self.steps)

    def block_total(self, kind: str, column: str) -> int:
        """One layer of block `kind`: the sum of its steps' `params` or `flops`."""
        return sum(getattr(s, column) for s in self.steps if s.block == kind)

    @property
    def params(self) -> int:
        """Every parameter once: equals the analytic count's total."""
        return self._total("params")

    @property
    def flops(self) -> int:
        return self._total("flops")

    def _one_kind(self, column: str) -> int | None:
        """Per layer when every layer is the same kind; None for a stack of several kinds (see `block_total`)."""
        if len(self.layers) != 1:
            return None
        (kind,) = self.layers
        return self.block_total(kind, column)

    @property
    def flops_per_layer(self) -> int | None:
        return self._one_kind("flops")

    @property
    def params_per_layer(self) -> int | None:
        return self._one_kind("params")

    def to_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "batch": self.batch,
            "seq": self.seq,
            "decode": self.decode,
            "new_tokens": self.new_tokens,
            "keys": self.keys,
            "n_layers": self.n_layers,
            "flop_convention": FLOP_CONVENTION,
            "params": self.params,
            "params_per_layer": self.params_per_layer,
            "flops_per_layer": self.flops_per_layer,
            "flops": self.flops,
            "blocks": [{"name": kind, "layers": n, "params_per_layer": self.block_total(kind, "params"),
                        "flops_per_layer": self.block_total(kind, "flops")} for kind, n in self.layers.items()],
            "notes": list(self.notes),
            "steps": [step.to_json() for step in self.steps],
        }


def matmul_flops(a: Shape, b: Shape) -> int:
    """[..., m, k] × [k, n] (or batched [..., k, n], or one of E experts' [E, k, n]): 2·m·n·k for every
    leading index of `a`."""
    return 2 * prod(a.sizes[:-1]) * a.sizes[-1] * b.sizes[-1]


def softcap_note(cap: float, what: str) -> str:
    """Gemma-2's soft-capping, of attention scores or of the final logits."""
    return f"{cap:g}·tanh({what} / {cap:g}): every value within ±{cap:g}; shape unchanged"


class Rows:
    """One part's parameter rows (its `params()`), handed out so that each is owned by one step."""

    def __init__(self, rows: Mapping[str, int]) -> None:
        self._left = dict(rows)

    def take(self, *names: str) -> int:
        """The parameters of the named rows (absent rows: 0); a row taken once is gone."""
        return sum(self._left.pop(name, 0) for name in names)

    def done(self, where: str) -> None:
        """Every row has an owner; a row no step shows would make the params column disagree with `count`."""
        if self._left:
            raise RuntimeError(f"shapes: {where}: no step owns {', '.join(self._left)}")


class Dims:
    """Names -> sizes for one pass (and, inside a block, that block's widths); builds shapes and steps.

    `new` is the query length's name ("T" for prefill, "1" for a decode step), `keys` the key length's
    ("T", or "T+1": the cache plus the new token). `block` stamps every step built through this object.
    """

    def __init__(self, sizes: Mapping[str, int], decode: bool, block: str = "") -> None:
        self.sizes = dict(sizes)
        self.decode = decode
        self.new, self.keys = ("1", "T+1") if decode else ("T", "T")
        self.block = block

    def within(self, block: str, **sizes: int) -> "Dims":
        """The same pass inside block `block`, with its own widths named."""
        return Dims({**self.sizes, **sizes}, self.decode, block)

    def named(self, **sizes: int) -> "Dims":
        """The same pass and block with more names (a part's own widths)."""
        return Dims({**self.sizes, **sizes}, self.decode, self.block)

    def shape(self, *names: str) -> Shape:
        return Shape(tuple(self.sizes[name] for name in names), names)

    @property
    def hidden(self) -> Shape:
        """The residual stream: [B, T, d_model] (decode: [B, 1, d_model])."""
        return self.shape("B", self.new, "d_model")

    def step(self, id: str, label: str, output: Shape, inputs: tuple[Shape, ...] = (), weight: Shape | None = None,
             params: int = 0, flops: int = 0, traced: bool = True, note: str = "", formula: str = "",
             state: Shape | None = None) -> Step:
        return Step(id, label, output, inputs, weight, params, flops, self.block, traced, note, formula=formula,
                    state=state)

    def linear(self, id: str, label: str, x: Shape, w: Shape, out: Shape, params: int, note: str = "",
               fused: str = "") -> Step:
        """x @ W: the step owns W (and its bias) and costs 2·m·n·k; `fused` names the checkpoint's linear W is a
        slice of."""
        return replace(self.step(id, label, out, (x,), w, params, matmul_flops(x, w), note=note), fused=fused)
