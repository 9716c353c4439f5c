"""A shared block's application (Zamba2's hybrid layers), step by step, before the layer's own Mamba2.

    [x, embedding] (B, T, d_in = 2·d_model) -> norm -> attention (Q, K, V read d_in; W_O writes
    d_model), each of Q, K, V plus its low-rank adapter -> norm -> gated MLP, its gate/up plus the
    adapter -> the application's d × d linear -> added to x for the Mamba2 to read

A copy's weights are stored once (calc/parts/shared.py): its steps own their parameters in the first
block kind that applies the copy, marked `once` (the journey counts them one time, not per layer),
and own none in any other kind. Each application runs every matmul, so FLOPs are per layer as usual.
An adapter's two matrices are two steps, each owning its own: in·r, then r·out.
"""

from __future__ import annotations

from dataclasses import replace

from calc.analysis.shapes.attention import attention_steps
from calc.analysis.shapes.core import Dims, Rows, Shape, Step
from calc.analysis.shapes.mlp import mlp_steps
from calc.analysis.shapes.norm import norm_step
from calc.parts.shared import PREFIX, Shared

__all__ = ["shared_steps"]


def shared_steps(d: Dims, applied: Shared, d_model: int, owner: bool) -> list[Step]:
    """Every step of one application of `applied`'s copy, up to the sum the Mamba2 layer reads;
    `owner`: this block kind's steps hold the copy's parameters (the first kind applying it)."""
    copy, r = applied.block, applied.adapter_rank
    a = copy.attention
    d = d.named(d_in=copy.in_width, r=r, **{"h·d_head": a.q_dim, "kv·d_head": a.kv_dim, "kv·d_v": a.v_dim,
                                             "2·d_ff": 2 * copy.mlp.d_ff})
    x, wide = d.hidden, d.shape("B", d.new, "d_in")
    stored = Rows(copy.rows(d_model) if owner else {})
    own = Rows(applied.params(d_model))
    where = (f"stored once: shared block {applied.name}'s weights, counted one time for every layer applying it"
             if owner else f"shared block {applied.name}'s weights, counted with the first layer kind applying it")
    head = [d.step("shared_concat", f"[x, embedding] for shared block {applied.name}", wide, (x, x),
                   note="the residual stream and the token embedding side by side: what the shared block reads"),
            norm_step(d, copy.norm, "shared_norm", "shared block: norm", wide, stored.take("attn_norm"), "over d_in")]
    widths = {"q": "h·d_head", "k": "kv·d_head", "v": "kv·d_v", "mlp": "2·d_ff"}
    adapters = {key: _adapter(d, own, key, x if key == "mlp" else wide, widths[key]) for key in applied.adapters}

    def stored_once(steps: list[Step]) -> list[Step]:
        return [replace(s, once=owner, note=f"{s.note}; {where}" if s.params else s.note) for s in steps]

    attention = stored_once([*head, *attention_steps(d, a, stored, "d_in")])
    mlp_norm = stored_once([norm_step(d, copy.norm, "shared_mlp_norm", "shared block: norm", x, stored.take("mlp_norm"))])
    mlp = stored_once(mlp_steps(d, copy.mlp, stored, name="shared block MLP"))
    stored.done(f"shared block {applied.name}")
    proj = [d.linear("shared_proj", "shared block output ·W (its own d × d linear)", x,
                     d.shape("d_model", "d_model"), x, own.take(f"{PREFIX}proj"),
                     "this layer's own linear, not shared")] if applied.proj else []
    add = d.step("shared_add", "x + shared block output", x, (x, x),
                 note="what the Mamba2's norm reads; its residual add keeps x, not this sum")
    own.done(f"shared block {applied.name}'s application")
    qkv = [step for key in ("q", "k", "v") for step in adapters.get(key, [])]
    return [*attention[:2], *qkv, *attention[2:], *mlp_norm, *adapters.get("mlp", []), *mlp, *proj, add]


def _adapter(d: Dims, own: Rows, key: str, x: Shape, out: str) -> list[Step]:
    """An application's low-rank adapter beside a projection: x·A (in -> r), then ·B (r -> out), added
    to the projection's output."""
    low, width = d.shape("B", d.new, "r"), x.names[-1]
    total, down = own.take(f"{PREFIX}{key}_adapter"), d.sizes[width] * d.sizes["r"]
    what = "the MLP's gate/up" if key == "mlp" else key.upper()
    return [d.linear(f"shared_{key}_adapter_down", f"{what} adapter ·A", x, d.shape(width, "r"), low, down,
                     "this layer's own rank-r adapter, on the projection's input"),
            d.linear(f"shared_{key}_adapter_up", f"{what} adapter ·B", low, d.shape("r", out), d.shape("B", d.new, out),
                     total - down, f"added to {what}'s projection")]
