"""One block kind's steps: its attention part and its MLP part, put in order by the block's norm
positions (`attn_in`, `attn_out`, `mlp_in`, `mlp_out`), `parallel` and `post_ln`. A parallel group
of mixers (Falcon-H1) gives each member's steps in turn, all reading the same normed x, and one
residual add of their summed outputs.

    sequential:  [attn_in] attention [attn_out] + x  ->  [mlp_in] MLP [mlp_out] + x
    hyper:       mix n copies -> [attn_in] attention -> write copies -> mix -> [mlp_in] MLP -> write (DeepSeek-V4)
    parallel:    [attn_in] attention [attn_out]  and  [mlp_in] MLP [mlp_out], both on x, added to x together
    post-LN:     attention + x -> attn_in norm  ->  MLP + x -> mlp_in norm
"""

from __future__ import annotations

from calc.analysis.shapes.attention import attention_steps, augment_steps
from calc.analysis.shapes.compressed import compressed_steps, hyper_mix, hyper_write
from calc.analysis.shapes.core import Dims, Rows, Step
from calc.analysis.shapes.mla import cache_note, mla_steps
from calc.analysis.shapes.mlp import mlp_steps
from calc.analysis.shapes.moe import NOTE as MOE_NOTE
from calc.analysis.shapes.moe import moe_steps
from calc.analysis.shapes.norm import norm_step
from calc.analysis.shapes.shared import shared_steps
from calc.analysis.shapes.recurrent import deltanet_steps, kda_steps, lightning_steps, mamba2_steps, mamba_steps, short_conv_steps
from calc.parts.norm import LABELS as NORM_LABELS
from calc.spec.model import NORM_COMPONENTS, Block

__all__ = ["block_notes", "block_steps"]

# Each token mixer's steps and what the residual add calls it, by the part's kind.
MIXERS = {"attention": (attention_steps, "attention"), "mla": (mla_steps, "attention"),
          "compressed_attention": (compressed_steps, "attention"),
          "mamba": (mamba_steps, "Mamba"), "mamba2": (mamba2_steps, "Mamba2"), "gated_deltanet": (deltanet_steps, "DeltaNet"), "kda": (kda_steps, "KDA"),
          "lightning": (lightning_steps, "lightning attention"),
          "short_conv": (short_conv_steps, "short conv")}


def block_steps(d: Dims, block: Block, d_model: int, name: str, layers: int, owner: bool = True) -> list[Step]:
    """Every step of one layer of block kind `name`, which the model has `layers` of: the shared block it
    applies (its weights owned here when `owner`), its mixer + MLP pair (`pairs` times, each with its
    own weights), a shortcut beside the first MLP added at the end."""
    d = d.within(name)
    out = f"the block's output; × {layers} layer{'s' if layers > 1 else ''}"
    shortcut = Rows(block.shortcut.params(d_model)) if block.shortcut else None
    steps: list[Step] = shared_steps(d, block.shared, d_model, owner) if block.shared else []
    for i in range(block.pairs):
        rows = Rows(block.pair_params(d_model))
        last = i == block.pairs - 1 and shortcut is None
        steps += _pair_steps(d, block, rows, out if last else "adds the MLP's change to the residual stream",
                             shortcut if i == 0 else None)
        rows.done(f"block {name!r}")
    if shortcut is not None:
        x = d.hidden
        steps.append(d.step("shortcut_residual", "residual: x + shortcut", x, (x, x),
                            note=f"the shortcut's output, computed beside the first MLP, joins here: {out}"))
        shortcut.done(f"block {name!r} (shortcut)")
    return steps


def _pair_steps(d: Dims, block: Block, rows: Rows, out: str, shortcut: Rows | None) -> list[Step]:
    """One mixer + MLP pair, its norms where the block puts them; `shortcut`: the shortcut's steps
    (its own rows), reading the MLP's normed input."""
    a, m = block.attention, block.mlp
    attention = [step for part in block.mixers() for step in MIXERS[part.kind][0](d, part, rows)]
    mixer = " + ".join(MIXERS[part.kind][1] for part in block.mixers())  # a parallel group's outputs are summed
    mlp = [] if m is None else moe_steps(d, m, rows) if m.kind == "moe" else mlp_steps(d, m, rows)
    if shortcut is not None:
        s = block.shortcut
        mlp = [*(moe_steps(d, s, shortcut) if s.kind == "moe" else mlp_steps(d, s, shortcut)), *mlp]

    def norm(position: str) -> list[Step]:
        if position not in block.norms:
            return []
        component = NORM_COMPONENTS[position]
        where = "on the residual stream after the add (post-LN)" if block.post_ln else ""
        return [norm_step(d, block.norm, component, NORM_LABELS[component], d.hidden, rows.take(component), where)]

    x = d.hidden
    summed = " (the parallel mixers' outputs, each times its scale, summed)" if len(block.mixers()) > 1 else ""
    add_attention = d.step("attn_residual", f"residual: x + {mixer}", x, (x,) * (1 + len(block.mixers())),
                           note=out if m is None else f"adds {mixer}'s change to the block's input{summed}")
    add_mlp = d.step("mlp_residual", "residual: x + MLP", x, (x, x), note=out)
    if block.parallel:
        shared = ("x, each through its own norm" if "mlp_in" in block.norms
                  else "the same normed x" if "attn_in" in block.norms else "x")
        add_both = d.step("residual", f"residual: x + {mixer} + MLP", x, (x, x, x),
                          note=f"parallel: {mixer} and MLP both read {shared}; their outputs are added to x "
                               f"together: {out}")
        return [*norm("attn_in"), *attention, *norm("attn_out"), *norm("mlp_in"), *mlp, *norm("mlp_out"), add_both]
    if block.post_ln:
        return [*attention, add_attention, *norm("attn_in"), *mlp, add_mlp, *norm("mlp_in")]
    if block.hyper is not None:  # DeepSeek-V4: the copies mixed before each sublayer, written back after it
        n = block.hyper.streams
        return [*hyper_mix(d, "hc_attn", n, rows), *norm("attn_in"), *attention,
                hyper_write(d, "hc_attn", n, "attention's change into every copy"),
                *hyper_mix(d, "hc_mlp", n, rows), *norm("mlp_in"), *mlp, hyper_write(d, "hc_mlp", n, out)]
    before, beside, after = augment_steps(d, a, rows)  # Gemma-3n's AltUp and LAuReL, Gemma's per-layer input
    return [*before, *norm("attn_in"), *beside, *attention, *norm("attn_out"), *([add_attention] if a else []),
            *norm("mlp_in"), *mlp, *norm("mlp_out"), *([add_mlp] if m else []), *after]


def block_notes(block: Block, name: str) -> list[str]:
    """What a block's parts want said once under the table."""
    notes = []
    for a in block.mixers():
        notes += list(cache_note(a)) if a.kind == "mla" else []
        window = getattr(a, "window", None)
        if window:
            notes.append(f"sliding window ({name} layers): each query sees at most the last {window:,} keys; "
                         f"a decode step's rolling KV cache holds at most {window:,}")
    return notes + (list(MOE_NOTE) if block.is_moe else [])
